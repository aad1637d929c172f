// Training data that keeps arriving (train_data.follow): FileFollower lists the job's
// patterns every poll and tells which files are complete and new, in order of arrival.
//
// A file is complete when its directory holds the done marker (`done_marker`, e.g.
// "_SUCCESS": the directory is taken as a whole, once, when its marker appears, and files
// added to it later are not taken), or else when it has not been modified for
// `quiet_seconds`. The unit taken is the directory (marker) or the file; its arrival time
// is the marker's or the file's modification time. Units are taken in order of arrival
// (ties by name).
//
// The record of what was taken is bounded by a watermark: the units taken whose arrival
// is at most `max_age_seconds` before the newest one taken are remembered by name; a unit
// that arrived before that window is never taken (it was taken before, or it arrived
// that late). So the record holds the units of one window, whatever the job's length.
// Save/Restore carry it in the checkpoint beside the shard queue.
// Not thread-safe: one thread (the chief's follower) scans.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"

namespace ps::data {

struct FollowOptions {
  double poll_seconds = 10;
  std::string done_marker;  // empty: complete after quiet_seconds without a change
  double quiet_seconds = 30;
  double max_age_seconds = 3600;
};

// train_data.follow: true, or an object of the options above. Errors (InvalidArgument)
// name `path` and the key.
Result<FollowOptions> ParseFollow(const Json& value, const std::string& path);

// A unit that arrived: its arrival (unix seconds) and its files (sorted; in marker mode
// every file of the directory the patterns match, none when they match none).
struct Arrival {
  std::string unit;
  double arrival = 0;
  std::vector<std::string> files;
};

class FileFollower {
 public:
  // patterns: glob(7) patterns, already resolved against the job's base_dir.
  FileFollower(std::vector<std::string> patterns, FollowOptions options);

  // Lists the patterns (a pattern that matches nothing is no error) and returns the units
  // complete at `now` (unix seconds) and never taken, in order of arrival; they count as
  // taken from here on. Errors: a directory on the way cannot be read.
  Result<std::vector<Arrival>> Scan(double now);
  // Files the patterns matched in the last scan (done markers not counted).
  int64_t matched() const { return matched_; }
  // Units remembered by name (the record's size).
  size_t recorded() const { return taken_.size(); }
  const FollowOptions& options() const { return options_; }

  // The record as JSON, and back. Restore fails (InvalidArgument) on a malformed record
  // and leaves the follower unchanged.
  Json Save() const;
  Status Restore(const Json& saved);
  void Reset();

 private:
  double watermark() const { return newest_ - options_.max_age_seconds; }
  void Take(const Arrival& a);

  std::vector<std::string> patterns_;
  FollowOptions options_;
  std::map<std::string, double> taken_;  // unit → arrival, arrivals >= watermark()
  double newest_ = -1e300;               // the newest arrival taken
  int64_t matched_ = 0;
};

}  // namespace ps::data
