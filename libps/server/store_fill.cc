// The checkpoint side of the store (store.h): Restore, Fill and ShardFill.
#include <algorithm>
#include <cstring>

#include "libps/core/text.h"
#include "libps/server/store.h"
#include "libps/server/store_shard.h"

namespace ps::server {

Status Store::Restore(const ShardKey& key, std::span<const float> values,
                      std::span<const NamedSlot> slots) {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Restore"));
  if (s->lazy)
    return InvalidArgument("Restore " + key.ToString() + ": a lazy shard is restored with Fill");
  const size_t n = s->values.size();
  PS_RETURN_IF_ERROR(CheckSize("Restore", key, "values", values.size(), n));
  std::array<const NamedSlot*, kMaxSlots> given{};
  for (const NamedSlot& slot : slots) {
    size_t i = 0;
    while (i < s->slot_defs.size() && s->slot_defs[i].name != slot.name) ++i;
    if (i == s->slot_defs.size())
      return InvalidArgument("Restore " + key.ToString() + ": slot " + QuoteInput(slot.name, '"') +
                             " does not belong to optimizer " + OptimizerKindName(spec_->kind));
    if (given[i] != nullptr)
      return InvalidArgument("Restore " + key.ToString() + ": slot " + QuoteInput(slot.name, '"') +
                             " given twice");
    PS_RETURN_IF_ERROR(
        CheckSize("Restore", key, ("slot " + slot.name).c_str(), slot.values.size(), n));
    given[i] = &slot;
  }
  s->LockAll();
  std::memcpy(s->values.data(), values.data(), n * sizeof(float));
  for (size_t i = 0; i < s->slot_defs.size(); ++i) {
    if (given[i] != nullptr) {
      std::memcpy(s->slots[i].data(), given[i]->values.data(), n * sizeof(float));
    } else {
      std::fill_n(s->slots[i].data(), n, s->slot_defs[i].initial);
    }
  }
  s->UnlockAll();
  return Status::Ok();
}

Store::ShardFill::ShardFill(std::shared_lock<std::shared_mutex> lock, Shard* shard)
    : lock_(std::move(lock)), shard_(shard) {
  shard_->LockAll();
}

Store::ShardFill::~ShardFill() { shard_->UnlockAll(); }

const ShardDef& Store::ShardFill::def() const { return shard_->def; }

std::span<float> Store::ShardFill::values() {
  return {shard_->values.data(), shard_->values.size()};
}

Result<std::span<float>> Store::ShardFill::Slot(std::string_view name) {
  if (shard_->lazy)
    return InvalidArgument("Restore " + shard_->def.key().ToString() +
                           ": a lazy shard has no slot arrays");
  for (size_t i = 0; i < shard_->slot_defs.size(); ++i) {
    if (shard_->slot_defs[i].name == name)
      return std::span<float>(shard_->slots[i].data(), shard_->values.size());
  }
  return InvalidArgument("Restore " + shard_->def.key().ToString() + ": slot \"" +
                         std::string(name) + "\" does not belong to this ps's optimizer");
}

Status Store::ShardFill::InitSlot(std::string_view name, int64_t first, int64_t rows) {
  PS_ASSIGN_OR_RETURN(std::span<float> slot, Slot(name));
  const Shard& s = *shard_;
  if (first < 0 || rows < 0 || first > s.layout().rows - rows)
    return OutOfRange("Restore " + s.def.key().ToString() + ": rows [" + std::to_string(first) +
                      ", +" + std::to_string(rows) + ") outside the shard's " +
                      std::to_string(s.layout().rows));
  float initial = 0;
  for (const auto& def : s.slot_defs) {
    if (def.name == name) initial = def.initial;
  }
  std::fill_n(slot.begin() + first * static_cast<int64_t>(s.cols),
              rows * static_cast<int64_t>(s.cols), initial);
  return Status::Ok();
}

Status Store::ShardFill::DropRows() {
  const Shard& s = *shard_;
  if (!s.lazy) return InvalidArgument("Restore " + s.def.key().ToString() + ": not a lazy shard");
  for (int64_t k = 0; k < s.num_stripes; ++k) {
    s.lazy[k].Clear();
    if (s.sketch) s.sketch[k].Clear();
  }
  s.arena->Clear();
  shard_->live.store(0, std::memory_order_relaxed);
  shard_->evicted.clear();
  return Status::Ok();
}

Status Store::ShardFill::EraseRows(std::span<const int64_t> rows) {
  const Shard& s = *shard_;
  const ShardKey key = s.def.key();
  if (!s.lazy) return InvalidArgument("Restore " + key.ToString() + ": not a lazy shard");
  PS_RETURN_IF_ERROR(CheckRows("Restore", key, rows, s.layout().rows));
  int64_t erased = 0;
  for (int64_t row : rows) {
    const uint64_t h = HashRow(row);
    erased += s.lazy[LazyStripeOf(h)].Erase(row, h, *s.arena) ? 1 : 0;
  }
  shard_->live.fetch_sub(erased, std::memory_order_relaxed);
  return Status::Ok();
}

Status Store::ShardFill::UpsertRows(std::span<const int64_t> rows, CreatedRows* created) {
  const Shard& s = *shard_;
  const ShardKey key = s.def.key();
  if (!s.lazy) return InvalidArgument("Restore " + key.ToString() + ": not a lazy shard");
  if (created->shard_ != nullptr && created->shard_ != shard_)
    return InvalidArgument("Restore " + key.ToString() + ": rows created on another shard");
  PS_RETURN_IF_ERROR(CheckRows("Restore", key, rows, s.layout().rows));
  PS_RETURN_IF_ERROR(CheckUnique("Restore", key, rows));
  created->shard_ = shard_;
  created->records_.reserve(created->records_.size() + rows.size());
  for (int64_t row : rows) {
    const uint64_t h = HashRow(row);
    LazyStripe& stripe = s.lazy[LazyStripeOf(h)];
    LazyStripe::Entry* entry = stripe.Find(row, h);
    if (entry == nullptr) {
      entry = s.CreateRow(stripe, row, h);
      if (entry == nullptr)
        return Internal("Restore " + key.ToString() + ": " + s.CreateFailure(row));
      shard_->live.fetch_add(1, std::memory_order_relaxed);
    }
    float* record = s.arena->At(entry->ref);
    if (s.stamped) s.SetStamp(record, 0);  // ResetRowClock stamps the checkpoint's step
    entry->epoch = 0;
    created->records_.push_back(record);
  }
  return Status::Ok();
}

Status Store::ShardFill::CreateRows(std::span<const int64_t> rows, CreatedRows* created) {
  const Shard& s = *shard_;
  const ShardKey key = s.def.key();
  if (!s.lazy) return InvalidArgument("Restore " + key.ToString() + ": not a lazy shard");
  PS_RETURN_IF_ERROR(CheckRows("Restore", key, rows, s.layout().rows));
  for (int64_t row : rows) {
    const uint64_t h = HashRow(row);
    if (s.lazy[LazyStripeOf(h)].Find(row, h) != nullptr)
      return Status(Code::kAlreadyExists, "Restore " + key.ToString() + ": row " +
                                              std::to_string(row) + " is created already");
  }
  // None exists: UpsertRows creates every one (and makes the remaining checks).
  return UpsertRows(rows, created);
}

Status Store::ShardFill::WriteRows(const CreatedRows& created, std::string_view block,
                                   int64_t first, std::span<const float> data) {
  const Shard& s = *shard_;
  const std::string name = s.def.key().ToString();
  if (!s.lazy) return InvalidArgument("Restore " + name + ": not a lazy shard");
  if (created.shard_ != shard_ && !created.records_.empty())
    return InvalidArgument("Restore " + name + ": rows created on another shard");
  size_t b = 0;
  if (block != "values") {
    while (b < s.slot_defs.size() && s.slot_defs[b].name != block) ++b;
    if (b == s.slot_defs.size())
      return InvalidArgument("Restore " + name + ": slot \"" + std::string(block) +
                             "\" does not belong to this ps's optimizer");
    ++b;
  }
  const size_t cols = s.cols;
  const auto n = static_cast<int64_t>(data.size() / cols);
  if (data.size() % cols != 0 || first < 0 ||
      first > static_cast<int64_t>(created.records_.size()) - n)
    return OutOfRange("Restore " + name + ": rows [" + std::to_string(first) + ", +" +
                      std::to_string(n) + ") outside the " +
                      std::to_string(created.records_.size()) + " created rows");
  for (int64_t i = 0; i < n; ++i) {
    std::memcpy(created.records_[static_cast<size_t>(first + i)] + b * cols, data.data() + i * cols,
                cols * sizeof(float));
  }
  return Status::Ok();
}

Result<std::unique_ptr<Store::ShardFill>> Store::Fill(const ShardKey& key) {
  std::shared_lock lock(mu_);
  PS_ASSIGN_OR_RETURN(Shard * s, Find(key, "Restore"));
  return std::unique_ptr<ShardFill>(new ShardFill(std::move(lock), s));
}

}  // namespace ps::server
