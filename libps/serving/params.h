// The parameters a serving bundle scores with, as immutable versions that share what did
// not change (read-copy-update; serving.h, "Refreshing"). Internal to libps/serving.
//
// A ParamVersion is never written once published: a Scorer takes the bundle's current
// version (a shared_ptr copied under a mutex held for nothing else) for one batch and
// reads it without any lock, so a refresh never makes a batch wait. A refresh builds the
// next version beside it (VersionBuilder): it starts as a copy of the previous one's
// block pointers, and a block is copied only when a row of it changes. So two versions
// share every block in which no row changed; one is freed when the last batch holding it
// finishes.
//
// Blocks, per variable (in the plan's order, model::Params's index):
//  - a dense variable (model::Params takes it whole): one block, the whole variable;
//  - a row-indexed variable (sparse, not lazy): blocks of kBlockRows rows;
//  - a lazy table: a power-of-two number of buckets chosen by a hash of the row id, each
//    its rows' ids (ascending) and values. A row absent from its bucket is not stored
//    and scores with its initial value (model::FillInitial with the job's seed), exactly
//    as the ps store and the evaluator give it.
// Memory beside the rows: 16 bytes per block pointer and about 64 per block or bucket
// (its control block and allocation); a version's pointer vectors are its own.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "libps/ckpt/store_io.h"
#include "libps/job/job.h"
#include "libps/model/model.h"
#include "libps/scoring/loaded_model.h"
#include "libps/serving/serving.h"

namespace ps::serving {

inline constexpr int64_t kBlockRows = 16;  // rows per block of a row-indexed variable
// A lazy table gets about this many rows per bucket; past kMaxBucketRows on average a
// new version re-buckets it (a copy of that table, the one exception to sharing).
inline constexpr int64_t kBucketRows = 16;
inline constexpr int64_t kMaxBucketRows = 64;

struct LazyBucket {
  std::vector<int64_t> ids;   // global row ids, ascending
  std::vector<float> values;  // [ids.size() * cols]
};

struct VarVersion {
  struct Meta {
    std::string name;
    bool sparse = false;  // model::Params gives it by rows
    bool lazy = false;
    int64_t rows = 0;  // full_shape[0], the id space of a lazy table
    int64_t cols = 0;  // floats per row
    std::vector<int64_t> full_shape;
    model::InitSpec init;  // lazy: the initial values of rows not stored
    uint64_t seed = 0;
    int64_t block_rows = 0;  // rows per block (not lazy)
  };
  std::shared_ptr<const Meta> meta;
  std::vector<std::shared_ptr<const std::vector<float>>> blocks;  // not lazy: [block_rows * cols]
  std::vector<std::shared_ptr<const LazyBucket>> buckets;         // lazy
  int64_t live_rows = 0;                                          // lazy: rows stored
};

struct ParamVersion {
  std::vector<VarVersion> vars;  // the plan's variables, in order
  BundleInfo info;               // the state these values are (step, digests, stored rows)
};

// Bytes of `v`'s blocks and buckets (their floats and ids) that `other` does not share.
// With other null: all of them.
uint64_t UnsharedBytes(const ParamVersion& v, const ParamVersion* other);

// The first version, from parameters loaded into a store (every shard of the plan).
Result<std::shared_ptr<const ParamVersion>> VersionFromStore(const scoring::LoadedModel& loaded,
                                                             BundleInfo info);

// model::Params for a batch whose rows (Model::RowsNeeded's) are `rows`: dense variables
// point into `v` (valid while it is held), sparse ones are gathered into `scratch[var]`.
Status GatherParams(const ParamVersion& v, const std::vector<std::vector<int64_t>>& rows,
                    std::vector<std::vector<float>>* scratch, model::Params* params);

// The next version, built beside the one it starts from (which stays as it was). Not
// thread-safe; one refresh at a time.
class VersionBuilder {
 public:
  explicit VersionBuilder(const ParamVersion& from);
  // The variable's index, or -1.
  int Find(std::string_view name) const;
  size_t vars() const { return next_->vars.size(); }
  const VarVersion::Meta& meta(int var) const { return *next_->vars[var].meta; }
  // Writes row `row` (global, < rows) of `var` (lazy: created when absent); a block
  // shared with an earlier version is copied first, unless the row already holds exactly
  // these values. values: [cols].
  void SetRow(int var, int64_t row, std::span<const float> values);
  // Lazy: drops the row (absent: nothing to do).
  void EraseRow(int var, int64_t row);
  // Lazy: drops every stored row in [begin, end) that `keep` (global ids, ascending)
  // does not hold.
  void EraseRowsExcept(int var, int64_t begin, int64_t end, std::span<const int64_t> keep);
  // Blocks and buckets copied so far, and their bytes (floats and ids) when copied.
  int64_t copied_blocks() const { return copied_; }
  uint64_t copied_bytes() const { return copied_bytes_; }
  // The new version; the builder is spent. `info`'s variables get their stored rows.
  std::shared_ptr<const ParamVersion> Finish(BundleInfo info);

 private:
  LazyBucket& OwnBucket(int var, size_t b);
  std::vector<float>& OwnBlock(int var, size_t b);
  std::shared_ptr<ParamVersion> next_;
  std::vector<std::vector<bool>> owned_;  // [var][block or bucket]: copied by this builder
  int64_t copied_ = 0;
  uint64_t copied_bytes_ = 0;
};

// The records of delta checkpoints (ckpt::ReadDelta's, oldest first) written into `b` as
// a restore applies them (shard_file.h): deleted rows dropped, stored rows written.
// Records of variables the model lacks are ignored; one whose shape or lazy-ness differs
// is FailedPrecondition naming the file and record.
Status ApplyDeltaRecords(std::span<const ckpt::DeltaRecords> deltas, VersionBuilder& b);

// The full checkpoint `c` (not its deltas) read into `b` file by file, record by record,
// writing only the rows that differ: memory beyond the new blocks is one piece of a record
// (at most kStreamBytes of a dense record; a lazy record's ids, 8 bytes a row). Every
// file is checked against c's MANIFEST and every checksum verified as it is read (DataLoss
// naming the file); rows of the model no record holds are FailedPrecondition. After an
// error `b` holds part of the checkpoint: drop it.
inline constexpr int64_t kStreamBytes = int64_t{1} << 20;
Status StreamCheckpoint(const ckpt::CheckpointInfo& c, VersionBuilder& b);

}  // namespace ps::serving
