// `pstrain status` as text: the chief's status (proto::ChiefStatus) rendered for people.
// Pure; safe from any thread.
#pragma once

#include <string>

#include "libps/proto/messages.h"

namespace ps::launcher {

// The chief's status as text: "key: value" lines (state, global_step, total_steps,
// examples_per_sec, elapsed, stop_reason when set), then after a blank line each: the
// tasks table (task, state, and last_error when any task has one), the workers and ps
// load tables (libps/obs/figures.h):
//   worker  state  steps  ex/s  step_ms  data  pull  compute  push   (shares of step time)
//   ps  address  state  req/s  in/s  out/s  rows/s  queue  max_queue  held  shards
// (bytes as HumanBytes, a missing figure "-"; a ps's error on a line "ps:1: <error>" below
// its table), then LoadHints' lines. Empty lists are left out.
std::string FormatStatus(const proto::ChiefStatus& status);

}  // namespace ps::launcher
