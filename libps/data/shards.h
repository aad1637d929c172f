// Streamed training data as a queue of shards owned by the chief.
//
// MakeShards cuts the job's files into shards without reading them (a stat, and the two
// bytes of the gzip magic): a file is a shard; an uncompressed text file (LibSVM, Criteo
// TSV) larger than shard_bytes is cut into byte ranges of shard_bytes (the last one
// shorter). A range [a, b) holds the lines that start in it (ByteRange.lines): no line is
// lost or read twice, wherever the cuts fall. A TFRecord file and a compressed file are
// one shard each.
//
// ShardQueue is the chief's data position, a pure state machine (no I/O, no clock, no
// thread): the shards of all epochs form one sequence, epoch e being a permutation of
// every shard drawn from (seed, e) (sorted order without shuffling); sequence number
// q = e * S + k names shard order_e[k]. Lease hands out the next `records` records of a
// shard; Ack (a pack that succeeded) or Release (one that was given up: its records are
// given out again) answers every lease. Positions are record indices within a shard plus
// the byte offset of the first record not yet acknowledged, so that a reader can seek to
// it. State: O(shards of the sequence done out of order + leased shards × (the gaps and
// out-of-order acknowledgements in each)), never per record.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::data {

inline constexpr uint64_t kWholeFile = UINT64_MAX;
inline constexpr int64_t kDefaultShardBytes = int64_t{64} << 20;

struct Shard {
  uint32_t file = 0;  // index into the sorted file list
  uint64_t begin = 0;
  uint64_t end = kWholeFile;  // [begin, end) of a text file's bytes; kWholeFile: all of it
  bool lines = false;         // a byte range of a text file (begin/end cut at lines)
  bool operator==(const Shard&) const = default;
};

// text: the format is line based (LibSVM, Criteo TSV). Errors (InvalidArgument): a file
// that cannot be stat'ed or opened (InputErrno), shard_bytes < 1.
Result<std::vector<Shard>> MakeShards(const std::vector<std::string>& files, bool text,
                                      int64_t shard_bytes);

// The shards of epoch `epoch` in their order (a permutation of 0..count-1).
std::vector<uint32_t> EpochOrder(size_t count, uint64_t seed, int64_t epoch, bool shuffle);

// One pack's data: records [start, start + take) of shard `shard` (sequence number `seq`).
// The reader opens the shard at byte `base_byte`, where record `base_record` starts, and
// skips start - base_record records. `generation` tells leases of a queue restored since
// apart (their answers are ignored).
struct Lease {
  int64_t seq = 0;
  uint32_t shard = 0;
  uint64_t base_byte = 0;
  int64_t base_record = 0;
  int64_t start = 0;
  int64_t take = 0;
  uint64_t generation = 0;
};

// Where a pack ended: `records` read (from lease.start; bad ones skipped included), the
// byte offset after the last of them, whether the shard ended there, and then the
// shard's record count (lower than lease.start for a lease that began past the end).
struct PackEnd {
  int64_t records = 0;
  uint64_t end_byte = 0;
  bool end_of_shard = false;
  int64_t total = -1;
};

class ShardQueue {
 public:
  struct Options {
    std::vector<Shard> shards;       // non-empty, unless `follow`
    std::vector<std::string> files;  // Shard::file indexes it (not with `follow`)
    uint64_t seed = 0;
    bool shuffle = true;
    std::optional<int64_t> epochs;  // nullopt: endless
    // Data that keeps arriving (train_data.follow): `shards` and `files` are empty and
    // grow by Append; the sequence is the shards in the order appended, each leased once
    // (seed, shuffle and epochs are not used). Shards and files done and below every
    // shard not done are dropped, so the state holds only what is not trained yet.
    bool follow = false;
  };
  explicit ShardQueue(Options options);

  // The next `records` records for `worker`: from a shard it holds, else from the next
  // shard of the sequence, else from another worker's shard (records given up first).
  // nullopt when nothing is left to give out (every shard of the last epoch leased to
  // its end).
  std::optional<Lease> Take(int worker, int64_t records);
  // Something to give out now (Take would not return nullopt).
  bool CanTake() const;
  void Ack(const Lease& lease, const PackEnd& end);
  void Release(const Lease& lease);
  // Every shard of every epoch done (never without epochs).
  bool Exhausted() const;
  // Nothing left to give out: every shard of the last epoch is leased to its end (its
  // tail may still be in flight). Never without epochs.
  bool AllGivenOut() const;
  // Packs leased and not answered.
  int64_t in_flight() const { return in_flight_; }
  // Passes done, by shards: 1.5 when half the shards of the second epoch are done.
  double EpochsDone() const;
  // Records of the shards whose end was seen (their count is known).
  int64_t records_counted() const { return records_counted_; }

  // The position (a JSON object; only meaningful with nothing in flight: the leases in
  // flight are written as given back) and its restore. Restore fails (InvalidArgument)
  // when the saved position is for another shard list; the queue is then unchanged.
  Json Save() const;
  Status Restore(const Json& saved);
  // Back to the start of the first epoch.
  void Reset();

  const Options& options() const { return options_; }
  // The shard and file a lease names (Lease::shard, Shard::file). Only for leases of this
  // generation not yet answered (in follow mode what is done may be dropped).
  const Shard& shard(uint32_t index) const;
  const std::string& file(uint32_t index) const;

  // Follow mode: `path` arrived (at `arrival`, unix seconds) and is cut into `shards`
  // (their `file` is set here); they go to the end of the sequence. An empty `shards`
  // counts the file as done at once.
  void Append(const std::string& path, double arrival, std::vector<Shard> shards);
  // Follow mode: the arrival times of the files whose every shard is done since the last
  // call, in the order they were done.
  std::vector<double> TakeFilesDone();
  // Follow mode: files appended and done (over the job, restored from checkpoints), and
  // files appended and not done yet.
  int64_t files_done() const { return files_done_total_; }
  int64_t files_waiting() const;

 private:
  struct Acked {
    int64_t end = 0;
    uint64_t end_byte = 0;
  };
  struct Leased {
    uint32_t shard = 0;
    int owner = -1;
    int64_t base_record = 0;          // every record before it is acknowledged
    uint64_t base_byte = 0;           // where it starts
    std::map<int64_t, Acked> acked;   // beyond base_record, by start
    std::map<int64_t, int64_t> gaps;  // given back: start → end
    int64_t next = 0;                 // the first record never given out
    std::optional<int64_t> total;     // records, once the end was seen
    int64_t in_flight = 0;
  };
  struct FileEntry {  // follow mode
    std::string path;
    double arrival = 0;
    int64_t shards_left = 0;
  };
  uint32_t ShardAt(int64_t seq);
  // Follow mode: counts `seq`'s file down and drops what lies below the done prefix.
  void FollowDone(int64_t seq);
  Json SaveFollow(Json out) const;
  Status RestoreFollow(const Json& saved);
  bool HasWork(const Leased& l) const;
  Lease TakeFrom(int64_t seq, Leased& l, int worker, int64_t records);
  void MaybeDone(int64_t seq);
  int64_t limit() const;  // sequence numbers below it are trained

  Options options_;
  uint64_t generation_ = 1;
  int64_t done_prefix_ = 0;       // every seq below it is done
  std::set<int64_t> done_after_;  // done seqs above done_prefix_
  int64_t next_seq_ = 0;          // the first seq never leased
  std::map<int64_t, Leased> leased_;
  int64_t in_flight_ = 0;
  int64_t records_counted_ = 0;
  int64_t order_epoch_ = -1;
  std::vector<uint32_t> order_;  // of order_epoch_
  // Follow mode: the shards of sequence numbers shard_base_ on (shard index == sequence
  // number), and the files of index file_base_ on.
  std::deque<Shard> follow_shards_;
  int64_t shard_base_ = 0;
  std::deque<FileEntry> follow_files_;
  int64_t file_base_ = 0;
  std::vector<double> files_done_;  // arrivals, since TakeFilesDone
  int64_t files_done_total_ = 0;
};

}  // namespace ps::data
