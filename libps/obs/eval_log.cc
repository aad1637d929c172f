#include "libps/obs/eval_log.h"

#include <algorithm>
#include <filesystem>

#include "libps/core/files.h"
#include "libps/core/log.h"
#include "libps/obs/metrics.h"
#include "libps/obs/status.h"

namespace ps::obs {

void EvalLog::LoadNewest() {
  if (newest_loaded_) return;
  newest_loaded_ = true;
  LineStats stats;
  ForEachJsonLine(dir() + "/metrics.jsonl", &stats, [&](const Json& l, int) {
    auto it = l.find("step");
    if (it != l.end() && it->is_number_integer())
      newest_step_ = std::max(newest_step_.value_or(it->get<int64_t>()), it->get<int64_t>());
  }).ok();
}

Status EvalLog::Append(const Json& line) {
  const std::string dir = this->dir();
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return IoError(dir + ": " + ec.message());
  LoadNewest();  // before this line is added
  PS_ASSIGN_OR_RETURN(AppendOnlyFile out, AppendOnlyFile::Open(dir + "/metrics.jsonl"));
  PS_RETURN_IF_ERROR(out.Append(line.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n"));
  auto num = [&](const char* key) {
    return line.contains(key) && line[key].is_number() ? line[key].get<double>() : -1.0;
  };
  AddScalars(line.at("step").get<int64_t>(), num("accuracy"), num("loss"), num("auc"),
             line.value("unix_time", WallTimeNow()));
  return Status::Ok();
}

void EvalLog::AddScalars(int64_t step, double accuracy, double loss, double auc, double wall_time) {
  LoadNewest();
  if (newest_step_ && step <= *newest_step_) {
    PS_LOG(Info) << "TensorBoard run " << run_ << ": step " << step
                 << " not added (the run is at step " << *newest_step_
                 << "; its steps only increase)";
    return;
  }
  newest_step_ = step;
  Status st;
  if (!events_) {
    std::error_code ec;
    std::filesystem::create_directories(dir(), ec);
    auto w = EventWriter::Open(dir());
    if (w.ok())
      events_.emplace(std::move(*w));
    else
      st = w.status();
  }
  if (events_) st = AddEvalScalars(*events_, step, accuracy, loss, auc, wall_time);
  if (st.ok() && events_failing_)
    PS_LOG(Info) << "TensorBoard " << run_ << " events: writing again";
  if (!st.ok() && !events_failing_)
    PS_LOG(Warning) << "TensorBoard " << run_ << " events: " << st.message();
  events_failing_ = !st.ok();
}

}  // namespace ps::obs
