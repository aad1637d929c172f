#include "launcher/report.h"

#include <cstdio>
#include <filesystem>
#include <string>

#include "libps/core/files.h"
#include "libps/daemon/daemon.h"
#include "libps/obs/inspect.h"
#include "libps/obs/report.h"

namespace ps::launcher {

using daemon::kExitFailure;
using daemon::kExitOk;

int RunReport(const ReportCommand& command) {
  auto html = obs::RenderReport(command.model_dir);
  if (!html.ok()) {
    PrintErr("pstrain report: " + html.status().message());
    return kExitFailure;
  }
  std::string out = command.out.empty() ? (std::filesystem::path(command.model_dir) / obs::kReportFile).string()
                                        : command.out;
  // tmp + fsync + rename: a browser never shows a half-written page.
  if (Status st = WriteFileAtomic(out, *html); !st.ok()) {
    PrintErr("pstrain report: " + st.message());
    return kExitFailure;
  }
  std::printf("%s\n", out.c_str());
  return kExitOk;
}

int RunInspect(const InspectCommand& command) {
  obs::InspectOptions options;
  options.step = command.step;
  options.verify = command.verify;
  auto report = obs::InspectModelDir(command.model_dir, options);
  if (!report.ok()) {
    PrintErr("pstrain inspect: " + report.status().message());
    return kExitFailure;
  }
  std::fputs(report->text.c_str(), stdout);
  return report->healthy ? kExitOk : kExitFailure;
}

}  // namespace ps::launcher
