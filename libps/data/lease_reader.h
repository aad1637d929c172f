// LeaseReader: the worker's side of the shard queue (shards.h). Reads the records a
// lease names, from the file and byte range the chief sent, keeping the shard open
// between leases so that the next lease of the same shard continues where the last one
// stopped instead of seeking and skipping.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/data/follow.h"
#include "libps/data/record_format.h"
#include "libps/data/row.h"
#include "libps/data/shards.h"
#include "libps/data/stream.h"

namespace ps::data {

// A streamed data set ("files") as the shard queue reads it: its format, its
// files (sorted) and, with make_shards, its shards (the chief's stat of every file;
// train_data.shard_bytes). Errors: the config's, ExpandFiles', MakeShards'.
struct StreamedData {
  std::shared_ptr<const RecordFormat> format;
  std::vector<std::string> files;
  std::vector<Shard> shards;
  StreamOptions options;
  // train_data.follow: the files arrive while the job runs; `files` and `shards` are
  // empty and `patterns` (resolved against base_dir) are followed (follow.h).
  std::optional<FollowOptions> follow;
  std::vector<std::string> patterns;
  bool text = false;  // line based: MakeShards may cut its files
  int64_t shard_bytes = kDefaultShardBytes;
};
Result<StreamedData> PlanStreamedData(const Json& config, const std::string& path,
                                      const std::string& base_dir, bool make_shards);

// A lease as a pack carries it: the shard's file and range, and the lease's records.
struct LeaseSpec {
  std::string file;
  Shard shard;  // shard.file is not used: `file` names it
  Lease lease;
};

class LeaseReader {
 public:
  LeaseReader(std::shared_ptr<const RecordFormat> format, bool skip_errors, std::string path)
      : format_(std::move(format)), policy_(skip_errors, std::move(path)) {}
  // Reads records [start, start + take) of the lease's shard into *rows (in file order;
  // a bad record skipped under "on_error": "skip" counts as read but adds no row).
  // Errors: the file's (InputErrno when it vanished), a record's, and InvalidArgument
  // "<file>: shrank to N bytes while leased (position at byte M)".
  Result<PackEnd> Read(const LeaseSpec& spec, std::vector<Row>* rows);
  int64_t skipped() const { return policy_.skipped(); }

 private:
  struct Open {
    int64_t seq = 0;
    uint64_t generation = 0;
    int64_t record = 0;  // the index of the next record the reader reads
    bool ended = false;  // the shard's end was reached
    std::unique_ptr<RecordReader> reader;
  };
  // Moves the open reader to the next record: false at the shard's end. A bad record
  // counts (skipped or failing).
  Result<bool> Next(Row* row, bool parse, bool* parsed);

  std::shared_ptr<const RecordFormat> format_;
  ErrorPolicy policy_;
  std::optional<Open> open_;
};

}  // namespace ps::data
