#include "libps/ckpt/store_io.h"

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string_view>
#include <vector>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/cluster/shard_layout.h"
#include "libps/core/text.h"

namespace ps::ckpt {

using server::ShardDef;
using server::Store;
using RowRange = ShardReader::RowRange;

Result<ShardFileInfo> SaveStore(const Store& store, const std::string& model_dir, int ps_index,
                                int64_t global_step) {
  PS_ASSIGN_OR_RETURN(std::string dir, CreateCheckpointDir(model_dir, global_step));
  return WriteStoreFile(store, dir + "/" + ShardFileName(ps_index), ps_index, global_step);
}

namespace {

// The kind-3 record of what changed in `shard` after epoch `since`; false when nothing did.
Status AppendDelta(ShardWriter* writer, const server::ShardView& shard, uint32_t since) {
  const auto cols = static_cast<size_t>(shard.def.layout.cols);
  std::vector<int64_t> ids;
  std::vector<size_t> index;  // lazy: of each id in shard.row_ids
  std::vector<int64_t> deleted;
  if (shard.def.layout.lazy) {
    for (size_t i = 0; i < shard.row_ids.size(); ++i) {
      if (shard.row_epoch(i) > since) {
        ids.push_back(shard.row_ids[i]);
        index.push_back(i);
      }
    }
    for (const auto& [row, epoch] : shard.evicted) {
      if (epoch > since) deleted.push_back(row);
    }
    std::sort(deleted.begin(), deleted.end());
    deleted.erase(std::unique(deleted.begin(), deleted.end()), deleted.end());
  } else {
    for (size_t r = 0; r < shard.row_epochs.size(); ++r) {
      if (shard.row_epochs[r] > since) ids.push_back(static_cast<int64_t>(r));
    }
  }
  if (ids.empty() && deleted.empty()) return Status::Ok();
  ShardRecordView rec{.layout = shard.def.layout,
                      .values = {},
                      .slots = {},
                      .row_ids = ids,
                      .gather = {},
                      .delta = true,
                      .deleted_ids = deleted};
  for (const auto& [name, span] : shard.slots)
    rec.slots.emplace_back(name, std::span<const float>());
  rec.gather = [&](size_t block, size_t first, std::span<float> out) {
    for (size_t i = 0; i < out.size() / cols; ++i) {
      std::span<const float> row;
      if (shard.def.layout.lazy) {
        row = shard.row(index[first + i], block);
      } else {
        const std::span<const float> all =
            block == 0 ? shard.values : shard.slots[block - 1].second;
        row = all.subspan(static_cast<size_t>(ids[first + i]) * cols, cols);
      }
      std::copy(row.begin(), row.end(), out.begin() + static_cast<std::ptrdiff_t>(i * cols));
    }
  };
  return writer->Append(rec);
}

}  // namespace

Result<ShardFileInfo> WriteStoreFile(const Store& store, const std::string& path, int ps_index,
                                     int64_t global_step, std::optional<uint32_t> changed_since) {
  PS_ASSIGN_OR_RETURN(ShardWriter writer, ShardWriter::Create(path, ps_index, global_step));
  Status st;
  store.ForEachShard([&](const server::ShardView& shard) {
    if (!st.ok()) return;
    if (changed_since) {
      st = AppendDelta(&writer, shard, *changed_since);
      return;
    }
    ShardRecordView rec{.layout = shard.def.layout,
                        .values = shard.values,
                        .slots = shard.slots,
                        .row_ids = {},
                        .gather = {},
                        .delta = false,
                        .deleted_ids = {}};
    if (shard.def.layout.lazy) {
      rec.row_ids = shard.row_ids;
      const auto cols = static_cast<size_t>(shard.def.layout.cols);
      rec.gather = [&shard, cols](size_t block, size_t first, std::span<float> out) {
        for (size_t i = 0; i < out.size() / cols; ++i) {
          std::span<const float> row = shard.row(first + i, block);
          std::copy(row.begin(), row.end(), out.begin() + static_cast<std::ptrdiff_t>(i * cols));
        }
      };
    }
    st = writer.Append(rec);
  });
  PS_RETURN_IF_ERROR(st);
  return writer.Commit();
}

namespace {

// One shard of the store being restored.
struct Target {
  ShardDef def;
  // Global rows [begin, end) taken from records so far; a row twice is DataLoss.
  std::vector<std::pair<int64_t, int64_t>> covered;
  int64_t begin() const { return def.layout.row_begin; }
  int64_t end() const { return def.layout.row_begin + def.layout.rows; }
};

// The part of the record being read that goes to one target.
struct Part {
  Target* target = nullptr;
  RowRange rows;  // of the record (relative to its row_begin)
  // Sparse records: the record's stored rows [stored_first, + created.size()) are in
  // `rows`, created in the target in that order.
  int64_t stored_first = 0;
  Store::CreatedRows created;
  // Delta records of a dense variable: the target-local rows of stored rows
  // [stored_first, + dense_rows.size()).
  std::vector<int64_t> dense_rows;
};

// Which shard files can hold rows of `targets`, by the placement the chief records in
// the MANIFEST's extra.variables ([{"name", "shards": [{"ps", "row_begin", "rows"}...]}...]).
// nullopt when it records none, or in a form this build does not know: read every file.
// Only an optimisation: the placement is not checksummed, so RestoreStore reads the other
// files too before it calls a row missing.
std::optional<std::set<int>> FilesWithRows(
    const Manifest& m, const std::map<std::string, std::vector<Target>>& targets) {
  auto vars = m.extra.find("variables");
  if (vars == m.extra.end() || !vars->is_array()) return std::nullopt;
  std::set<int> files;
  for (const Json& v : *vars) {
    if (!v.is_object() || !v.contains("name") || !v["name"].is_string() || !v.contains("shards") ||
        !v["shards"].is_array()) {
      return std::nullopt;
    }
    auto t = targets.find(v["name"].get<std::string>());
    for (const Json& s : v["shards"]) {
      if (!s.is_object() || !s.contains("ps") || !s.contains("row_begin") || !s.contains("rows") ||
          !s["ps"].is_number_integer() || !s["row_begin"].is_number_integer() ||
          !s["rows"].is_number_integer()) {
        return std::nullopt;
      }
      const int64_t ps = s["ps"].get<int64_t>();
      if (ps < 0 || ps >= m.num_ps) return std::nullopt;
      if (t == targets.end()) continue;
      const int64_t b = s["row_begin"].get<int64_t>();
      const int64_t rows = s["rows"].get<int64_t>();
      int64_t e = 0;
      // Not checksummed: a range that cannot be is no usable placement.
      if (b < 0 || rows < 0 || __builtin_add_overflow(b, rows, &e)) return std::nullopt;
      for (const Target& target : t->second) {
        if (b < target.end() && target.begin() < e) files.insert(static_cast<int>(ps));
      }
    }
  }
  return files;
}

// Reads records into the store's shards, resharding as needed; see RestoreStore.
class Restorer {
 public:
  Restorer(Store* store, RestoreStats* stats, RestoreSlots slots)
      : store_(store), stats_(stats), skip_slots_(slots == RestoreSlots::kSkip) {}

  // The store's shards and slots; drops every created row of its lazy shards unless
  // `keep_rows` (deltas applied on top of what the store holds: ApplyDeltas).
  Status Init(bool keep_rows = false) {
    PS_ASSIGN_OR_RETURN(server::OptimizerSpec spec, store_->optimizer());
    for (const auto& slot : server::SlotDefs(spec)) slots_.push_back(slot.name);
    std::sort(slots_.begin(), slots_.end());
    for (const auto& key : store_->Keys()) {
      PS_ASSIGN_OR_RETURN(ShardDef def, store_->GetDef(key));
      if (def.layout.lazy && !keep_rows) {
        stats_->store_changed = true;
        PS_ASSIGN_OR_RETURN(auto fill, store_->Fill(key));
        PS_RETURN_IF_ERROR(fill->DropRows());
      }
      auto& list = targets_[def.layout.var];
      list.push_back(Target{std::move(def), {}});
    }
    for (auto& [var, list] : targets_) {
      std::sort(list.begin(), list.end(),
                [](const Target& a, const Target& b) { return a.begin() < b.begin(); });
    }
    return Status::Ok();
  }

  const std::map<std::string, std::vector<Target>>& targets() const { return targets_; }

  Status ReadFile(const CheckpointInfo& c, int ps) {
    const ShardFileInfo& info = c.manifest.shards[static_cast<size_t>(ps)];
    path_ = c.dir + "/" + info.name;
    PS_ASSIGN_OR_RETURN(ShardReader reader, ShardReader::Open(path_));
    PS_RETURN_IF_ERROR(CheckAgainstManifest(reader, info, ps, c.global_step));
    ShardReader::Visitor v;
    v.select = [this](const RecordMeta& meta) { return Select(meta); };
    v.dense = [this](const RecordMeta& meta, std::string_view block, RowRange range) {
      return Dense(meta, block, range);
    };
    v.sparse.rows = [this](const RecordMeta& meta, std::span<const int64_t> ids) {
      return SparseRows(meta, ids);
    };
    v.sparse.deleted = [this](const RecordMeta& meta, std::span<const int64_t> ids) {
      return Deleted(meta, ids);
    };
    v.sparse.data = [this](const RecordMeta& meta, std::string_view block, int64_t first,
                           std::span<const float> data) {
      return SparseData(meta, block, first, data);
    };
    Status st = reader.Read(v);
    Close();
    ++stats_->files_read;
    return st;
  }

  // The records of `delta` (ReadDelta), as ReadFile would read them from its files.
  Status ApplyRecords(const DeltaRecords& delta) {
    for (size_t f = 0; f < delta.files.size(); ++f) {
      path_ = delta.paths[f];
      Status st;
      for (const ShardRecord& rec : delta.files[f]) {
        st = ApplyRecord(rec);
        if (!st.ok()) break;
      }
      Close();
      ++stats_->files_read;
      PS_RETURN_IF_ERROR(st);
    }
    return Status::Ok();
  }

  // FailedPrecondition naming the first row of a shard that no record held.
  Status CheckCovered(const std::string& dir) {
    stats_->shards = 0;
    for (auto& [var, list] : targets_) {
      for (Target& t : list) {
        std::sort(t.covered.begin(), t.covered.end());
        int64_t next = t.begin();
        for (const auto& [b, e] : t.covered) {
          if (b > next) break;
          next = std::max(next, e);
        }
        if (next < t.end()) {
          int64_t gap_end = t.end();
          for (const auto& [b, e] : t.covered) {
            if (b > next) {
              gap_end = b;
              break;
            }
          }
          return FailedPrecondition(dir + ": no record holds rows [" + std::to_string(next) + ", " +
                                    std::to_string(gap_end) + ") of " + t.def.layout.Name() +
                                    " (was the variable added to the model since?)");
        }
        ++stats_->shards;
      }
    }
    return Status::Ok();
  }

 private:
  // One record from memory through the visitor ReadFile gives the reader, in the order
  // ShardReader::Read calls it (shard_file.h): select; a dense record's selected ranges
  // block by block; a sparse or delta record's deleted ids, row ids, then its blocks.
  Status ApplyRecord(const ShardRecord& rec) {
    const RecordMeta& meta = rec.meta;
    PS_ASSIGN_OR_RETURN(auto ranges, Select(meta));
    if (!ranges) return Status::Ok();
    const auto cols = static_cast<size_t>(meta.layout.cols);
    std::vector<std::pair<std::string_view, std::span<const float>>> blocks{{"values", rec.values}};
    for (const auto& [name, data] : rec.slots)
      blocks.emplace_back(name, data);  // none when read values-only
    if (!meta.layout.lazy && !meta.delta) {
      for (const auto& [name, data] : blocks) {
        for (const RowRange& r : *ranges) {
          if (r.count == 0) continue;
          PS_ASSIGN_OR_RETURN(std::span<float> dst, Dense(meta, name, r));
          if (dst.empty()) continue;
          const auto n = static_cast<size_t>(r.count) * cols;
          if (dst.size() != n || data.size() < (static_cast<size_t>(r.first) * cols) + n) {
            return Internal(meta.Describe(path_) + ": " + std::string(name) + " rows do not fit");
          }
          std::copy_n(
              data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(r.first) * cols), n,
              dst.begin());
        }
      }
      return Status::Ok();
    }
    if (meta.delta && !rec.deleted_ids.empty()) PS_RETURN_IF_ERROR(Deleted(meta, rec.deleted_ids));
    PS_RETURN_IF_ERROR(SparseRows(meta, rec.row_ids));
    if (meta.elements() == 0) return Status::Ok();
    for (const auto& [name, data] : blocks) PS_RETURN_IF_ERROR(SparseData(meta, name, 0, data));
    return Status::Ok();
  }

  Result<std::optional<std::vector<RowRange>>> Select(const RecordMeta& meta) {
    parts_.clear();
    const cluster::ShardLayout& rec = meta.layout;
    auto it = targets_.find(rec.var);
    if (it == targets_.end()) {
      ++stats_->records_skipped;
      return std::optional<std::vector<RowRange>>();
    }
    const cluster::ShardLayout& mine = it->second.front().def.layout;
    const std::string where = meta.Describe(path_) + ": variable " + QuoteInput(rec.var, '"') + "";
    if (rec.full_shape != mine.full_shape) {
      return FailedPrecondition(where + " has shape " + cluster::ShapeString(rec.full_shape) +
                                " in the checkpoint and " + cluster::ShapeString(mine.full_shape) +
                                " in this job (was the model changed?)");
    }
    if (rec.lazy != mine.lazy) {
      return FailedPrecondition(where +
                                (rec.lazy ? " is lazy in the checkpoint and dense"
                                          : " is dense in the checkpoint and lazy") +
                                " in this job (was the model's \"lazy\" setting changed?)");
    }
    // Another optimizer wrote the checkpoint: its slots this store lacks are read and
    // verified but not stored, and the store's slots it lacks start at their initial
    // values (CreateRows initialises a lazy row's; InitSlots below a dense shard's).
    std::vector<std::string> missing;
    if (!skip_slots_) {
      for (const std::string& name : meta.slot_names) {
        if (!HasSlot(name)) stats_->slots_dropped.insert(name);
      }
      for (const std::string& name : slots_) {
        if (std::find(meta.slot_names.begin(), meta.slot_names.end(), name) ==
            meta.slot_names.end()) {
          missing.push_back(name);
          stats_->slots_initialised.insert(name);
        }
      }
    }
    const int64_t rb = rec.row_begin;
    const int64_t re = rec.row_begin + rec.rows;
    std::vector<RowRange> ranges;
    for (Target& t : it->second) {
      const int64_t b = std::max(rb, t.begin());
      const int64_t e = std::min(re, t.end());
      if (b >= e) continue;
      for (const auto& [cb, ce] : t.covered) {
        if (!meta.delta && cb < e && b < ce) {  // a delta's rows overwrite the base's
          return DataLoss(meta.Describe(path_) + ": rows [" + std::to_string(std::max(b, cb)) +
                          ", " + std::to_string(std::min(e, ce)) + ") of " + t.def.layout.Name() +
                          " are in two records of the checkpoint");
        }
      }
      if (!meta.delta) t.covered.emplace_back(b, e);
      if (!missing.empty() && !t.def.layout.lazy) {
        PS_ASSIGN_OR_RETURN(Store::ShardFill * fill, Open(&t));
        for (const std::string& name : missing) {
          PS_RETURN_IF_ERROR(
              fill->InitSlot(name, b - t.begin(), e - b).WithContext(meta.Describe(path_)));
        }
      }
      parts_.push_back(Part{&t, RowRange{b - rb, e - b}, 0, {}, {}});
      ranges.push_back(parts_.back().rows);
    }
    if (parts_.empty()) {
      ++stats_->records_skipped;
      return std::optional<std::vector<RowRange>>();
    }
    ++stats_->records_read;
    if (parts_.size() != 1 || parts_[0].target->begin() != rb || parts_[0].target->end() != re) {
      stats_->resharded = true;
    }
    return std::optional<std::vector<RowRange>>(std::move(ranges));
  }

  // The fill of `t`, closing the one open for another target.
  Result<Store::ShardFill*> Open(Target* t) {
    if (open_ != t) {
      fill_.reset();
      open_ = nullptr;
      stats_->store_changed = true;  // every write goes through a fill
      PS_ASSIGN_OR_RETURN(fill_, store_->Fill(t->def.key()));
      open_ = t;
    }
    return fill_.get();
  }
  void Close() {
    fill_.reset();
    open_ = nullptr;
  }

  Result<std::span<float>> Dense(const RecordMeta& meta, std::string_view block, RowRange range) {
    auto part = std::find_if(parts_.begin(), parts_.end(),
                             [&](const Part& p) { return p.rows.first == range.first; });
    if (part == parts_.end()) return Internal(meta.Describe(path_) + ": rows not selected");
    Target* t = part->target;
    PS_ASSIGN_OR_RETURN(Store::ShardFill * fill, Open(t));
    const auto cols = static_cast<size_t>(t->def.layout.cols);
    const auto offset =
        static_cast<size_t>(meta.layout.row_begin + range.first - t->begin()) * cols;
    const auto n = static_cast<size_t>(range.count) * cols;
    if (block == "values") return fill->values().subspan(offset, n);
    if (skip_slots_ || !HasSlot(block)) return std::span<float>();  // read and verified, not stored
    auto slot = fill->Slot(block);
    if (!slot.ok()) return slot.status().WithContext(meta.Describe(path_));
    return slot->subspan(offset, n);
  }

  // The target-local ids of `ids` (record-local, ascending) that fall in `part`; sets
  // part.stored_first to the index of the first.
  std::vector<int64_t> Local(const RecordMeta& meta, Part& part, std::span<const int64_t> ids) {
    auto first = std::lower_bound(ids.begin(), ids.end(), part.rows.first);
    auto last = std::lower_bound(first, ids.end(), part.rows.first + part.rows.count);
    part.stored_first = first - ids.begin();
    const int64_t shift =
        meta.layout.row_begin - part.target->begin();  // record-local id -> target-local
    std::vector<int64_t> local;
    for (auto id = first; id != last; ++id) local.push_back(*id + shift);
    return local;
  }

  Status SparseRows(const RecordMeta& meta, std::span<const int64_t> ids) {
    for (Part& part : parts_) {
      std::vector<int64_t> local = Local(meta, part, ids);
      if (meta.delta && !meta.layout.lazy) {
        part.dense_rows = std::move(local);
        continue;
      }
      PS_ASSIGN_OR_RETURN(Store::ShardFill * fill, Open(part.target));
      Status st = meta.delta ? fill->UpsertRows(local, &part.created)
                             : fill->CreateRows(local, &part.created);
      PS_RETURN_IF_ERROR(st.WithContext(meta.Describe(path_)));
    }
    return Status::Ok();
  }

  // A delta's deleted rows: dropped from the lazy shards that hold them.
  Status Deleted(const RecordMeta& meta, std::span<const int64_t> ids) {
    for (Part& part : parts_) {
      std::vector<int64_t> local = Local(meta, part, ids);
      PS_ASSIGN_OR_RETURN(Store::ShardFill * fill, Open(part.target));
      PS_RETURN_IF_ERROR(fill->EraseRows(local).WithContext(meta.Describe(path_)));
    }
    return Status::Ok();
  }

  Status SparseData(const RecordMeta& meta, std::string_view block, int64_t first,
                    std::span<const float> data) {
    if (block != "values" && (skip_slots_ || !HasSlot(block)))
      return Status::Ok();  // verified by the reader, not stored
    const auto cols = static_cast<size_t>(meta.layout.cols);
    const int64_t n = static_cast<int64_t>(data.size() / cols);
    const bool dense = meta.delta && !meta.layout.lazy;
    for (Part& part : parts_) {
      const auto stored =
          static_cast<int64_t>(dense ? part.dense_rows.size() : part.created.size());
      const int64_t b = std::max(first, part.stored_first);
      const int64_t e = std::min(first + n, part.stored_first + stored);
      if (b >= e) continue;
      PS_ASSIGN_OR_RETURN(Store::ShardFill * fill, Open(part.target));
      if (dense) {  // changed rows of a dense shard, one by one into its memory
        std::span<float> dst = fill->values();
        if (block != "values") {
          auto slot = fill->Slot(block);
          if (!slot.ok()) return slot.status().WithContext(meta.Describe(path_));
          dst = *slot;
        }
        for (int64_t i = b; i < e; ++i) {
          const auto row =
              static_cast<size_t>(part.dense_rows[static_cast<size_t>(i - part.stored_first)]);
          std::copy_n(
              data.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(i - first) * cols),
              cols, dst.begin() + static_cast<std::ptrdiff_t>(row * cols));
        }
        continue;
      }
      PS_RETURN_IF_ERROR(fill->WriteRows(part.created, block, b - part.stored_first,
                                         data.subspan(static_cast<size_t>(b - first) * cols,
                                                      static_cast<size_t>(e - b) * cols))
                             .WithContext(meta.Describe(path_)));
    }
    return Status::Ok();
  }

  bool HasSlot(std::string_view name) const {
    return std::binary_search(slots_.begin(), slots_.end(), name);
  }

  Store* store_;
  RestoreStats* stats_;
  const bool skip_slots_;
  std::map<std::string, std::vector<Target>> targets_;  // by variable, each sorted by row_begin
  std::vector<std::string> slots_;                      // the optimizer's slot names, sorted
  std::string path_;                                    // of the file being read
  std::vector<Part> parts_;                             // of the record being read
  Target* open_ = nullptr;                              // whose fill_ is open
  std::unique_ptr<Store::ShardFill> fill_;
};

// Applies `deltas` in order on top of what the restorer's store holds.
Status ReadDeltas(Restorer& restorer, std::span<const CheckpointInfo> deltas, RestoreStats& s) {
  // Deltas hold only the rows that changed, so no coverage check could notice a file a
  // wrong placement ruled out: every delta file is read (they are small; records of other
  // ps tasks' rows are skipped unread).
  for (const CheckpointInfo& delta : deltas) {
    const int n = static_cast<int>(delta.manifest.shards.size());
    s.files_listed += n;
    for (int ps = 0; ps < n; ++ps) PS_RETURN_IF_ERROR(restorer.ReadFile(delta, ps));
    ++s.deltas;
  }
  return Status::Ok();
}

}  // namespace

Status RestoreStore(Store* store, const CheckpointInfo& c, RestoreStats* stats,
                    RestoreSlots slots) {
  RestoreStats local;
  RestoreStats& s = stats != nullptr ? *stats : local;
  s = RestoreStats{};
  s.files_listed = static_cast<int>(c.manifest.shards.size());
  Restorer restorer(store, &s, slots);
  PS_RETURN_IF_ERROR(restorer.Init());
  if (restorer.targets().empty()) return Status::Ok();
  const std::optional<std::set<int>> files = FilesWithRows(c.manifest, restorer.targets());
  for (int ps = 0; ps < s.files_listed; ++ps) {
    if (files && !files->contains(ps)) continue;
    PS_RETURN_IF_ERROR(restorer.ReadFile(c, ps));
  }
  if (Status covered = restorer.CheckCovered(c.dir); !covered.ok()) {
    if (!files) return covered;
    // Rows missing by the placement (it is not checksummed: a tampered or wrong one must
    // not turn a damaged checkpoint into FailedPrecondition, which stops the chief's
    // fallback to an older one): the files it ruled out may hold them.
    for (int ps = 0; ps < s.files_listed; ++ps) {
      if (!files->contains(ps)) PS_RETURN_IF_ERROR(restorer.ReadFile(c, ps));
    }
    PS_RETURN_IF_ERROR(restorer.CheckCovered(c.dir));
  }
  return ReadDeltas(restorer, c.deltas, s);
}

Result<DeltaRecords> ReadDelta(const CheckpointInfo& delta, RestoreSlots slots) {
  DeltaRecords out{
      .checkpoint = {delta.global_step, delta.dir, delta.manifest, {}}, .paths = {}, .files = {}};
  for (int ps = 0; ps < static_cast<int>(delta.manifest.shards.size()); ++ps) {
    const ShardFileInfo& info = delta.manifest.shards[static_cast<size_t>(ps)];
    out.paths.push_back(delta.dir + "/" + info.name);
    PS_ASSIGN_OR_RETURN(ShardReader reader, ShardReader::Open(out.paths.back()));
    PS_RETURN_IF_ERROR(CheckAgainstManifest(reader, info, ps, delta.global_step));
    PS_ASSIGN_OR_RETURN(auto records,
                        reader.ReadRecords(/*values_only=*/slots == RestoreSlots::kSkip));
    out.files.push_back(std::move(records));
  }
  return out;
}

Status ApplyDeltas(Store* store, std::span<const DeltaRecords> deltas, RestoreStats* stats,
                   RestoreSlots slots) {
  RestoreStats local;
  RestoreStats& s = stats != nullptr ? *stats : local;
  s = RestoreStats{};
  Restorer restorer(store, &s, slots);
  PS_RETURN_IF_ERROR(restorer.Init(/*keep_rows=*/true));
  if (restorer.targets().empty()) return Status::Ok();
  for (const DeltaRecords& delta : deltas) {
    s.files_listed += static_cast<int>(delta.files.size());
    PS_RETURN_IF_ERROR(restorer.ApplyRecords(delta));
    ++s.deltas;
  }
  return Status::Ok();
}

}  // namespace ps::ckpt
