// `pstrain export` and `pstrain predict`: inference bundles from checkpoints, and scoring
// a data set with one (libps/serving does the work; bundle.h documents the format).
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "launcher/cli.h"
#include "libps/core/json.h"
#include "libps/model/model.h"
#include "libps/scoring/scoring.h"

namespace ps::launcher {

// Writes the bundle and prints what it holds. 1 when it cannot (no checkpoint, a damaged
// one at --step, --out exists, I/O).
int RunExport(const ExportCommand& command);
// Writes one score line per example to --out or stdout and, for labelled data, the
// metrics to stderr and --metrics. 1 when the model or the data cannot be loaded (or
// the data has no examples), 2 for --step with a bundle or --data that is not JSON.
int RunPredict(const PredictCommand& command);
// Execs pstrain-serve with the command's arguments (found next to pstrain, in the build
// tree, or on PATH); 127 when it cannot be found or run.
int RunServe(const ServeCommand& command);
// --metrics FILE: the metrics as a JSON line (the keys of eval/metrics.jsonl), atomically.
// Without metrics (unlabelled data) an existing FILE is removed, never left to pass for
// this run's; returns a note saying so (empty when the metrics were written).
Result<std::string> WriteMetricsFile(const std::string& path, int64_t step,
                                     const std::optional<scoring::EvalMetrics>& metrics);

// Example `i`'s line of `out` (no newline): each head's outputs separated by spaces,
// heads separated by a tab, every value "%.9g" (round-trips a float32).
std::string FormatScoreLine(const model::EvalOutput& out, int64_t i);
// --data: JSON text starting with '{' (base dir: the current directory), else a JSON
// file (base dir: its directory). Returns the data object and its base dir.
Result<std::pair<Json, std::string>> ReadDataArg(const std::string& arg);

}  // namespace ps::launcher
