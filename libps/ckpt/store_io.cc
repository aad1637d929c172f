#include "libps/ckpt/store_io.h"

#include "libps/ckpt/checkpoint_dir.h"

namespace ps::ckpt {

Result<ShardFileInfo> SaveStore(const ps::server::Store& store, const std::string& model_dir, int ps_index,
                                int64_t global_step) {
  PS_ASSIGN_OR_RETURN(std::string dir, CreateCheckpointDir(model_dir, global_step));
  return WriteStoreFile(store, dir + "/" + ShardFileName(ps_index), ps_index, global_step);
}

Result<ShardFileInfo> WriteStoreFile(const ps::server::Store& store, const std::string& path, int ps_index,
                                     int64_t global_step) {
  PS_ASSIGN_OR_RETURN(ShardWriter writer, ShardWriter::Create(path, ps_index, global_step));
  Status st;
  store.ForEachShard([&](const ps::server::ShardView& shard) {
    if (!st.ok()) return;
    ShardRecordView rec{
        .layout = shard.def.layout, .values = shard.values, .slots = shard.slots, .row_ids = {}, .gather = {}};
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

Status RestoreStore(ps::server::Store* store, const std::string& shard_path, std::set<ps::server::ShardKey>* restored,
                    RestoreSlots slots) {
  const bool skip_slots = slots == RestoreSlots::kSkip;
  PS_ASSIGN_OR_RETURN(ShardReader reader, ShardReader::Open(shard_path));
  // Blocks of one record arrive in order ("values", then each slot) and are read straight
  // into the shard, which stays locked from its first block until the next record starts.
  // A sparse record (lazy shard) first recreates its rows, then its blocks arrive in pieces.
  std::unique_ptr<ps::server::Store::ShardFill> fill;
  int record = -1;
  auto open = [&](const RecordMeta& meta) -> Status {
    fill.reset();
    record = meta.index;
    const cluster::ShardLayout& want = meta.layout;
    auto f = store->Fill({want.var, want.shard});
    if (!f.ok() || (*f)->def().layout.rows != want.rows || (*f)->def().layout.cols != want.cols ||
        (*f)->def().layout.row_begin != want.row_begin) {
      return FailedPrecondition(meta.Describe(shard_path) +
                                ": this ps holds no shard of that shape (was the checkpoint written by "
                                "another cluster layout or partitioner?)");
    }
    if ((*f)->def().layout.lazy != want.lazy) {
      return FailedPrecondition(meta.Describe(shard_path) + (want.lazy ? ": the checkpoint holds a lazy shard"
                                                                       : ": the checkpoint holds a dense shard") +
                                " and this ps's shard is " + ((*f)->def().layout.lazy ? "lazy" : "dense") +
                                " (was the model's \"lazy\" setting changed?)");
    }
    fill = std::move(*f);
    restored->insert({want.var, want.shard});
    return Status::Ok();
  };
  ShardReader::SparseSink sparse;
  sparse.rows = [&](const RecordMeta& meta, std::span<const int64_t> ids) -> Status {
    PS_RETURN_IF_ERROR(open(meta));
    return fill->CreateRows(ids).WithContext(meta.Describe(shard_path));
  };
  sparse.data = [&](const RecordMeta& meta, std::string_view block, int64_t first,
                    std::span<const float> data) -> Status {
    if (skip_slots && block != "values") return Status::Ok();
    return fill->WriteRows(block, first, data).WithContext(meta.Describe(shard_path));
  };
  Status st = reader.ReadAll([&](const RecordMeta& meta, std::string_view block) -> Result<std::span<float>> {
    if (meta.index != record) PS_RETURN_IF_ERROR(open(meta));
    if (block == "values") return fill->values();
    if (skip_slots) return std::span<float>();  // read and verified, not stored
    auto slot = fill->Slot(block);
    if (!slot.ok()) return slot.status().WithContext(meta.Describe(shard_path));
    return *slot;
  }, &sparse);
  fill.reset();
  return st;
}

}  // namespace ps::ckpt
