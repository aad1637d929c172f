// The chief's status (proto::ChiefStatus, filled once per sample) as people and files see
// it: JSON for `pstrain status --json` and every train_metrics.jsonl progress line, and
// TensorBoard scalars. The JSON keys are the proto fields' names; a worker's absent
// per-step figures are null; a ps that did not answer has only task, address, state and
// error. Reading is lenient (a missing or mistyped key reads as its default), so that
// metrics files written by older versions still render. Pure; safe from any thread.
#pragma once

#include <cstdint>
#include <vector>

#include "libps/core/json.h"
#include "libps/core/status.h"
#include "libps/obs/events.h"
#include "libps/proto/messages.h"

namespace ps::obs {

Json ToJson(const proto::WorkerLoad& worker);
Json ToJson(const proto::PsLoad& ps);
Json ToJson(const proto::ChiefStatus& status);
// {"load_window_sec", "workers", "ps"}: the load part of a status, for metrics lines.
Json LoadJson(const proto::ChiefStatus& status);

proto::WorkerLoad WorkerLoadFromJson(const Json& json);
proto::PsLoad PsLoadFromJson(const Json& json);
// A status object or a metrics line ("tasks", "workers" and "ps" arrays may be absent).
proto::ChiefStatus ChiefStatusFromJson(const Json& json);

// The load figures as TensorBoard scalars at `step`: per worker
// "step_time/<task>/{data,pull,compute,push}" (shares of its step time) and
// "step_time/<task>/step_ms"; per answering ps "ps_load/<task>/{requests_per_s,
// bytes_in_per_s,bytes_out_per_s,rows_per_s,max_queue_depth}". Figures a worker does not
// have in this window are left out.
Status AddLoadScalars(EventWriter& events, const proto::ChiefStatus& status, int64_t step,
                      double wall_time);

// An evaluation as TensorBoard scalars "accuracy", "loss" and (auc >= 0) "auc" at `step`:
// written to model_dir/eval (the run "eval") by the evaluator for every checkpoint, and by
// the chief for its final evaluation when the cluster has no evaluator.
Status AddEvalScalars(EventWriter& events, int64_t step, double accuracy, double loss, double auc,
                      double wall_time);
// A committed checkpoint: "checkpoint/seconds" (shard writes + commit) and
// "checkpoint/mib" (shard bytes / 2^20) at its step.
Status AddCheckpointScalars(EventWriter& events, int64_t step, double seconds, int64_t bytes,
                            double wall_time);

}  // namespace ps::obs
