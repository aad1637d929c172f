// Streaming input: a data set named by many files, read in a background thread,
// never held in memory as a whole.
//
//   files ──(sharded by file, or by record when there are fewer files than shards)──►
//   per-epoch file order ──► RecordReader (gunzip, frame, parse) ──► shuffle buffer
//   (shuffle_buffer rows) ──► batches ──► bounded queue (prefetch batches) ──► Next()
//
// Sharding: with at least as many files as shards, shard w reads the files whose index
// in the sorted list is w mod num_shards (tf.data's auto-shard by file); otherwise every
// shard reads every file and keeps record r of file f when (f + r) mod num_shards == w
// (auto-shard by data). Epochs: the shard's files in a fresh order per epoch, drawn
// from (seed, epoch, shard) when shuffling; sorted order otherwise. The shuffle buffer
// is tf.data's: it holds shuffle_buffer rows, each output is a uniformly chosen one,
// replaced by the next row read; it carries over epoch boundaries (as
// `.repeat().shuffle(n)` does) and is drained in random order at the end of a single
// pass. Memory: shuffle_buffer rows + prefetch batches + one file's read buffers.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "libps/data/dataset.h"
#include "libps/data/random.h"
#include "libps/data/record_format.h"

namespace ps::data {

// Expands patterns (glob(7); relative ones resolved against base_dir) into a sorted
// list of distinct files. Error (InvalidArgument): "<path>[i]: '<pattern>' matches no
// file", or an empty pattern list.
Result<std::vector<std::string>> ExpandFiles(const std::vector<std::string>& patterns,
                                             const std::string& base_dir, const std::string& path);

struct StreamOptions {
  std::string path;                // "job.train_data", for log lines
  int64_t shuffle_buffer = 10000;  // rows; <= 1: no shuffling beyond the file order
  bool skip_errors = false;        // "on_error": "skip": count and log bad records, go on
  int prefetch_batches = 0;        // batches read ahead of Next; 0: about 16384 examples' worth
                                   // (2 to 64 batches)
};

// Counts records skipped under "on_error": "skip" and logs them (each of the first
// 100, then every 1000th). Thread-safe.
class ErrorPolicy {
 public:
  ErrorPolicy(bool skip, std::string path) : skip_(skip), path_(std::move(path)) {}
  // st when failing, else Ok after counting and logging st.
  Status Handle(Status st);
  int64_t skipped() const { return skipped_.load(); }

 private:
  bool skip_;
  std::string path_;
  std::atomic<int64_t> skipped_{0};
};

// Reads every record of `file` (index file_index in the data set's sorted list) that
// `keep(file_index, record_index)` selects, parses it into *row and calls emit(*row);
// emit returns false to stop early. Errors go through policy.
Status ReadRecords(const RecordFormat& format, const std::string& file, size_t file_index,
                   const std::function<bool(size_t, int64_t)>& keep, ErrorPolicy& policy, Row* row,
                   const std::function<bool(Row&)>& emit);

class StreamingDataset : public Dataset {
 public:
  // Starts the reader thread and waits until it has parsed its first row, so that a
  // file that cannot be opened, a first record that does not fit the spec, or a shard
  // without any example fails here. Errors name the file and record.
  static Result<std::unique_ptr<StreamingDataset>> Create(
      std::shared_ptr<const RecordFormat> format, std::vector<std::string> files,
      StreamOptions stream, DatasetOptions options);
  ~StreamingDataset() override;  // stops and joins the reader thread

  Result<model::Batch> Next(int64_t batch_size) override;
  const DatasetInfo& info() const override { return format_->info(); }
  int64_t examples_seen() const override { return seen_; }
  bool done() const override;
  int64_t skipped() const override { return policy_.skipped(); }

  // The files this shard reads (in sorted order), and whether records are split by
  // index (fewer files than shards).
  const std::vector<std::string>& shard_files() const { return shard_files_; }
  bool by_record() const { return by_record_; }

 private:
  StreamingDataset(std::shared_ptr<const RecordFormat> format, std::vector<std::string> files,
                   StreamOptions stream, DatasetOptions options);
  void Run();           // the reader thread
  Status Produce();     // its body; Aborted when stopped
  bool Emit(Row& row);  // through the shuffle buffer; false when stopped
  bool AddToBatch(const Row& row);
  bool Flush();  // queues the open batch; false when stopped

  const std::shared_ptr<const RecordFormat> format_;
  const std::vector<std::string> files_;  // the whole data set, sorted
  const StreamOptions stream_;
  const DatasetOptions options_;
  std::vector<std::string> shard_files_;
  std::vector<size_t> shard_index_;  // [shard_files_] index into files_
  bool by_record_ = false;
  ErrorPolicy policy_;

  // Reader thread only.
  std::vector<Row> buffer_;  // the shuffle buffer
  Rng rng_{0};
  model::Batch open_;  // the batch being filled

  std::atomic<bool> stopping_{false};  // the destructor has begun
  mutable std::mutex mu_;
  std::condition_variable cv_;      // any change below
  int64_t batch_size_ = 0;          // set by the first Next; the reader waits for it
  std::deque<model::Batch> queue_;  // at most stream_.prefetch_batches
  bool first_row_ = false;          // a row has been parsed
  bool finished_ = false;           // the reader is done (end of a single pass or error)
  Status error_;
  bool stop_ = false;

  // Consumer only.
  size_t cursor_ = 0;  // rows of queue_.front() already returned
  int64_t seen_ = 0;

  std::thread thread_;  // last: started after everything it uses
};

}  // namespace ps::data
