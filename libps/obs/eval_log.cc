#include "libps/obs/eval_log.h"

#include <filesystem>

#include "libps/core/files.h"
#include "libps/core/log.h"
#include "libps/obs/metrics.h"
#include "libps/obs/status.h"

namespace ps::obs {

Status EvalLog::Append(const Json& line) {
  const std::string dir = model_dir_ + "/eval";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(dir + ": " + ec.message());
  PS_ASSIGN_OR_RETURN(AppendOnlyFile out,
                      AppendOnlyFile::Open(model_dir_ + "/" + kEvalMetricsFile));
  PS_RETURN_IF_ERROR(out.Append(line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"));
  auto num = [&](const char* key) {
    return line.contains(key) && line[key].is_number() ? line[key].get<double>() : -1.0;
  };
  AddScalars(line.at("step").get<int64_t>(), num("accuracy"), num("loss"), num("auc"),
             line.value("unix_time", WallTimeNow()));
  return Status::Ok();
}

void EvalLog::AddScalars(int64_t step, double accuracy, double loss, double auc, double wall_time) {
  Status st;
  if (!events_) {
    auto w = EventWriter::Open(model_dir_ + "/eval");
    if (w.ok())
      events_.emplace(std::move(*w));
    else
      st = w.status();
  }
  if (events_) st = AddEvalScalars(*events_, step, accuracy, loss, auc, wall_time);
  if (st.ok() && events_failing_) PS_LOG(Info) << "TensorBoard eval events: writing again";
  if (!st.ok() && !events_failing_) PS_LOG(Warning) << "TensorBoard eval events: " << st.message();
  events_failing_ = !st.ok();
}

}  // namespace ps::obs
