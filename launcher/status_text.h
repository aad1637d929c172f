// `pstrain status` as text: the chief's status reply rendered for people.
// Pure; safe from any thread.
#pragma once

#include <string>
#include <string_view>

#include "libps/core/status.h"

namespace ps::launcher {

// The chief's StatusReply JSON as text: top-level scalars as "key: value" lines (in
// the chief's order; strings unquoted, null as "-"; objects and arrays as compact JSON),
// then "tasks" (an array of objects) as a table whose columns are the union of the
// tasks' keys in order of first appearance, missing cells "-". Then, after a blank line
// each, the "workers" and "ps" load arrays (libps/obs/figures.h) as fixed tables:
//   worker  state  steps  ex/s  step_ms  data  pull  compute  push   (shares of step time)
//   ps  address  state  req/s  in/s  out/s  rows/s  queue  max_queue  held  shards
// (bytes as HumanBytes, a missing or non-numeric cell "-"; a ps's "error" on a line
// "ps:1: <error>" below its table), then LoadHints' lines. Unknown fields are printed
// (in the tables: ignored), never rejected. Errors: malformed JSON or not an object.
Result<std::string> FormatStatus(std::string_view json_text);

}  // namespace ps::launcher
