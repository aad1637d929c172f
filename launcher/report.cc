#include "launcher/report.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>

#include "libps/core/files.h"
#include "libps/daemon/daemon.h"
#include "libps/obs/inspect.h"
#include "libps/obs/report.h"

namespace ps::launcher {

using daemon::kExitFailure;
using daemon::kExitOk;

int RunReport(const ReportCommand& command) {
  std::string out = command.out.empty()
                        ? (std::filesystem::path(command.model_dir) / obs::kReportFile).string()
                        : command.out;
  for (bool first = true;; first = false) {
    const auto next = std::chrono::steady_clock::now() +
                      std::chrono::duration<double>(command.watch_sec.value_or(0));
    auto history = obs::ReadMetrics(command.model_dir);
    if (!history.ok()) {
      PrintErr("pstrain report: " + history.status().message());
      return kExitFailure;
    }
    // tmp + fsync + rename: a browser never shows a half-written page.
    if (Status st = WriteFileAtomic(out, obs::RenderReportHtml(*history, command.model_dir));
        !st.ok()) {
      PrintErr("pstrain report: " + st.message());
      return kExitFailure;
    }
    if (first) std::printf("%s\n", out.c_str());
    std::fflush(stdout);
    if (!command.watch_sec || obs::RunFinished(*history)) return kExitOk;
    std::this_thread::sleep_until(next);
  }
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
