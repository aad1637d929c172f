// `pstrain inspect`: what a model dir's checkpoints hold, and whether they are intact.
// Pure apart from reading the model dir; safe from any thread.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "libps/core/status.h"

namespace ps::obs {

struct InspectOptions {
  std::optional<int64_t> step;  // the checkpoint to detail; default: the newest
  bool verify = false;          // read all data and check every record's checksums
};

struct InspectReport {
  std::string text;     // what `pstrain inspect` prints
  bool healthy = true;  // false: a damaged checkpoint, shard or record was found
};

// Lists model_dir's committed checkpoints (step, UTC time, size, ps tasks, final, and
// the deltas on top: count, newest step, size; a broken chain is a warning), then
// details one: its shard files checked against the MANIFEST, and every variable record
// (name, partition, rows, full shape, ps index = the shard file holding it, slots, bytes,
// data checksum status — "ok", "unchecked" without verify, or the failure), then per ps
// task: its shard file and size (MANIFEST), the record bytes it holds, and, when
// train_metrics.jsonl (metrics.h) has a progress line with a "ps" array (figures.h), the
// last such line's requests (total), requests/s and bytes in/out per second. Damage is
// reported in the text (and healthy = false), not as an error. Errors: NotFound when
// model_dir holds no committed checkpoint or none at options.step.
Result<InspectReport> InspectModelDir(const std::string& model_dir, const InspectOptions& options);

}  // namespace ps::obs
