// `pstrain report` and `pstrain inspect`: what is in a model dir, for people
// (libps/obs/report.h and libps/obs/inspect.h do the work).
#pragma once

#include "launcher/cli.h"

namespace ps::launcher {

// Writes the HTML report (libps/obs/report.h) to --out, else MODEL_DIR/report.html, and
// prints its path. 1 when the model dir does not exist or the file cannot be written.
int RunReport(const ReportCommand& command);
// Prints InspectModelDir's listing. 1 when there is no checkpoint or damage was found.
int RunInspect(const InspectCommand& command);

}  // namespace ps::launcher
