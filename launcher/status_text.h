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

// `pstrain status --watch` on a terminal: one screen, "\x1b[H\x1b[2J" (home, clear) then
// a heading "pstrain status  CHIEF  every N s  TIME  (Ctrl-C quits; the job is not
// affected)", a blank line and FormatStatus.
std::string WatchScreen(const proto::ChiefStatus& status, const std::string& chief,
                        double every_sec, const std::string& time);
// The same when stdout is not a terminal: one line per poll,
//   "TIME state running  step 1200/9000  ex/s 35784  worker:0 12.5 ms/step (pull 30%) ...  ps:0 800 req/s 1.4 MB/s q1 ..."
// then LoadHints' lines, each prefixed with "TIME ".
std::string WatchLines(const proto::ChiefStatus& status, const std::string& time);

}  // namespace ps::launcher
