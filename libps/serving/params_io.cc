// Checkpoint records into a VersionBuilder (params.h): deltas from memory, full
// checkpoints streamed from their files.
#include <algorithm>

#include "libps/ckpt/shard_file.h"
#include "libps/core/text.h"
#include "libps/serving/params.h"

namespace ps::serving {

namespace {

// The builder's variable a record is for, -1 to ignore the record (a variable the model
// lacks), or FailedPrecondition when it does not fit.
Result<int> VarOf(const VersionBuilder& b, const ckpt::RecordMeta& meta, const std::string& path) {
  const cluster::ShardLayout& rec = meta.layout;
  const int var = b.Find(rec.var);
  if (var < 0) return -1;
  const VarVersion::Meta& m = b.meta(var);
  const std::string where = meta.Describe(path) + ": variable " + QuoteInput(rec.var, '"');
  if (rec.full_shape != m.full_shape) {
    return FailedPrecondition(where + " has shape " + cluster::ShapeString(rec.full_shape) +
                              " in the checkpoint and " + cluster::ShapeString(m.full_shape) +
                              " in this job (was the model changed?)");
  }
  if (rec.lazy != m.lazy) {
    return FailedPrecondition(where +
                              (rec.lazy ? " is lazy in the checkpoint and dense"
                                        : " is dense in the checkpoint and lazy") +
                              " in this job (was the model's \"lazy\" setting changed?)");
  }
  return var;
}

// Rows of each variable the records held, to find those none held.
class Coverage {
 public:
  explicit Coverage(size_t vars) : ranges_(vars) {}
  void Add(int var, int64_t begin, int64_t end) { ranges_[var].emplace_back(begin, end); }
  Status Check(const VersionBuilder& b, const std::string& dir) {
    for (size_t v = 0; v < ranges_.size(); ++v) {
      auto& r = ranges_[v];
      std::sort(r.begin(), r.end());
      int64_t next = 0;
      for (const auto& [begin, end] : r) {
        if (begin > next) break;
        next = std::max(next, end);
      }
      const VarVersion::Meta& m = b.meta(static_cast<int>(v));
      if (next < m.rows) {
        return FailedPrecondition(dir + ": no record holds rows from " + std::to_string(next) +
                                  " of " + m.name +
                                  " (was the variable added to the model since?)");
      }
    }
    return Status::Ok();
  }

 private:
  std::vector<std::vector<std::pair<int64_t, int64_t>>> ranges_;
};

}  // namespace

Status ApplyDeltaRecords(std::span<const ckpt::DeltaRecords> deltas, VersionBuilder& b) {
  for (const ckpt::DeltaRecords& d : deltas) {
    for (size_t f = 0; f < d.files.size(); ++f) {
      for (const ckpt::ShardRecord& rec : d.files[f]) {
        const ckpt::RecordMeta& meta = rec.meta;
        PS_ASSIGN_OR_RETURN(const int var, VarOf(b, meta, d.paths[f]));
        if (var < 0) continue;
        const int64_t begin = meta.layout.row_begin;
        const auto cols = static_cast<size_t>(meta.layout.cols);
        const std::span<const float> values(rec.values);
        if (!meta.delta && !meta.layout.lazy) {  // a whole dense shard
          for (int64_t r = 0; r < meta.layout.rows; ++r)
            b.SetRow(var, begin + r, values.subspan(static_cast<size_t>(r) * cols, cols));
          continue;
        }
        if (!meta.delta) {  // a lazy shard's rows: exactly these
          std::vector<int64_t> keep;
          for (int64_t id : rec.row_ids) keep.push_back(begin + id);
          b.EraseRowsExcept(var, begin, begin + meta.layout.rows, keep);
        }
        for (int64_t id : rec.deleted_ids) b.EraseRow(var, begin + id);
        for (size_t i = 0; i < rec.row_ids.size(); ++i)
          b.SetRow(var, begin + rec.row_ids[i], values.subspan(i * cols, cols));
      }
    }
  }
  return Status::Ok();
}

Status StreamCheckpoint(const ckpt::CheckpointInfo& c, VersionBuilder& b) {
  Coverage covered(b.vars());
  for (size_t ps = 0; ps < c.manifest.shards.size(); ++ps) {
    const ckpt::ShardFileInfo& info = c.manifest.shards[ps];
    const std::string path = c.dir + "/" + info.name;
    PS_ASSIGN_OR_RETURN(ckpt::ShardReader reader, ckpt::ShardReader::Open(path));
    PS_RETURN_IF_ERROR(
        ckpt::CheckAgainstManifest(reader, info, static_cast<int>(ps), c.global_step));
    // The record being read: its variable, and a dense piece read into `piece` waiting to
    // be written (its rows are in once the reader asks for the next piece or is done).
    int var = -1;
    int64_t begin = 0, cols = 0;
    std::vector<int64_t> ids;  // a sparse record's row ids (global)
    std::vector<float> piece;
    ckpt::ShardReader::RowRange pending{};
    auto flush = [&] {
      for (int64_t r = 0; r < pending.count; ++r) {
        b.SetRow(var, begin + pending.first + r,
                 std::span<const float>(piece).subspan(static_cast<size_t>(r * cols),
                                                       static_cast<size_t>(cols)));
      }
      pending = {};
    };
    ckpt::ShardReader::Visitor v;
    v.select = [&](const ckpt::RecordMeta& meta)
        -> Result<std::optional<std::vector<ckpt::ShardReader::RowRange>>> {
      flush();
      PS_ASSIGN_OR_RETURN(var, VarOf(b, meta, path));
      if (var < 0) return std::optional<std::vector<ckpt::ShardReader::RowRange>>();
      begin = meta.layout.row_begin;
      cols = meta.layout.cols;
      if (!meta.delta) covered.Add(var, begin, begin + meta.layout.rows);
      std::vector<ckpt::ShardReader::RowRange> ranges;
      if (!meta.layout.lazy && !meta.delta) {
        const int64_t step = std::max<int64_t>(1, kStreamBytes / (cols * 4));
        for (int64_t r = 0; r < meta.layout.rows; r += step)
          ranges.push_back({r, std::min(step, meta.layout.rows - r)});
      }
      return std::optional(std::move(ranges));
    };
    v.dense = [&](const ckpt::RecordMeta&, std::string_view block,
                  ckpt::ShardReader::RowRange range) -> Result<std::span<float>> {
      flush();
      if (block != "values") return std::span<float>();
      pending = range;
      piece.resize(static_cast<size_t>(range.count * cols));
      return std::span<float>(piece);
    };
    v.sparse.deleted = [&](const ckpt::RecordMeta&, std::span<const int64_t> deleted) -> Status {
      for (int64_t id : deleted) b.EraseRow(var, begin + id);
      return Status::Ok();
    };
    v.sparse.rows = [&](const ckpt::RecordMeta& meta, std::span<const int64_t> rows) -> Status {
      ids.clear();
      for (int64_t id : rows) ids.push_back(begin + id);
      if (!meta.delta) b.EraseRowsExcept(var, begin, begin + meta.layout.rows, ids);
      return Status::Ok();
    };
    v.sparse.data = [&](const ckpt::RecordMeta&, std::string_view block, int64_t first,
                        std::span<const float> data) -> Status {
      if (block != "values") return Status::Ok();
      const auto c = static_cast<size_t>(cols);
      for (size_t i = 0; i < data.size() / c; ++i)
        b.SetRow(var, ids[static_cast<size_t>(first) + i], data.subspan(i * c, c));
      return Status::Ok();
    };
    PS_RETURN_IF_ERROR(reader.Read(v));
    flush();
  }
  return covered.Check(b, c.dir);
}

}  // namespace ps::serving
