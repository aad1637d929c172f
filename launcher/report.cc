#include "launcher/report.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

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
  // Written beside the target and renamed, so a browser never shows a half-written page.
  std::string tmp = out + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f << *html;
    f.close();
    if (!f) {
      std::error_code ec;
      std::filesystem::remove(tmp, ec);
      PrintErr("pstrain report: " + tmp + ": cannot write");
      return kExitFailure;
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, out, ec);
  if (ec) {
    std::filesystem::remove(tmp, ec);
    PrintErr("pstrain report: " + out + ": cannot write: " + ec.message());
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
