// What a user sees of a run of the README's demo job (configs/job-fmnist-mlp.json on
// configs/cluster-local.json, shortened): `pstrain status --watch` with its output piped
// (one line per poll, until the job ends), the default placement keeping the hot-ps hint
// quiet on every progress line, TensorBoard getting every figure (decoded from the event
// files), and the report reading our own metrics file without a single note.
#include <algorithm>
#include <set>

#include <catch2/catch.hpp>

#include "libps/obs/events.h"
#include "libps/obs/figures.h"
#include "libps/obs/metrics.h"
#include "libps/obs/report.h"
#include "libps/obs/status.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr int64_t kSteps = 1500;

std::set<std::string> Tags(const std::filesystem::path& dir) {
  std::set<std::string> tags;
  for (const auto& f : obs::ListEventFiles(dir.string())) {
    auto events = obs::ReadEvents(f);
    INFO(f << ": " << events.status().ToString());
    REQUIRE(events.ok());
    for (const auto& e : *events) tags.insert(e.tag);
  }
  return tags;
}

std::vector<obs::ScalarEvent> Scalars(const std::filesystem::path& dir, const std::string& tag) {
  std::vector<obs::ScalarEvent> out;
  for (const auto& f : obs::ListEventFiles(dir.string())) {
    auto events = obs::ReadEvents(f);
    REQUIRE(events.ok());
    for (const auto& e : *events) {
      if (e.tag == tag) out.push_back(e);
    }
  }
  return out;
}

TEST_CASE(
    "the demo job: status --watch lines, no hot-ps hint, every figure in TensorBoard, a clean report") {
  TempDir tmp;
  auto spec = LocalCluster();
  const auto model = tmp / "model";
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 250, model);
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  REQUIRE(chief.WaitForLine("control on", 60s));
  // stdout is a pipe here: periodic lines, not screens.
  auto watch = StartLauncher({"status", "--chief", spec.address(kChief).ToString(), "--watch", "1"},
                             "pstrain status --watch");
  tasks.ExpectAllExit(0, 180s);
  CHECK(watch->WaitExit(60s) == std::optional<int>(0));
  const auto lines = watch->Lines();
  const auto polls = std::count_if(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find(" state ") != std::string::npos;
  });
  CHECK(polls >= 2);
  CHECK(std::none_of(lines.begin(), lines.end(),
                     [](const std::string& l) { return l.find("\x1b[") != std::string::npos; }));
  REQUIRE(!lines.empty());
  CHECK(lines.back().find("no longer answers: the job has ended") != std::string::npos);

  // The balanced default placement: no progress line of the demo has a hot ps.
  auto history = obs::ReadMetrics(model.string());
  REQUIRE(history.ok());
  CHECK(history->notes.empty());  // our own file, read without a single skipped line
  int with_ps = 0;
  for (const auto& p : history->train) {
    if (p.ps.size() == 2) ++with_ps;
    for (const auto& hint : obs::LoadHints(p.workers, p.ps)) {
      INFO("step " << p.step << ": " << hint);
      CHECK(hint.find("carries more load") == std::string::npos);
    }
  }
  CHECK(with_ps >= 3);
  CHECK(history->checkpoints.size() >= 2);  // ckpt-0 and the final one
  REQUIRE(!history->events.empty());
  CHECK(history->events.front().kind == "chief_start");
  REQUIRE(history->final_eval);

  // TensorBoard, run ".": training scalars, the step-time shares, the ps load, checkpoints.
  const auto tags = Tags(model);
  for (const char* tag : {"loss", "accuracy", "examples_per_sec", "step_time/worker:0/compute",
                          "step_time/worker:1/pull", "step_time/worker:0/step_ms",
                          "ps_load/ps:0/requests_per_s", "ps_load/ps:1/bytes_in_per_s",
                          "ps_load/ps:1/max_queue_depth", "checkpoint/seconds", "checkpoint/mib"}) {
    INFO(tag);
    CHECK(tags.count(tag) == 1);
  }
  // Run "eval_inline": the chief's final evaluation (the evaluator's run is "eval").
  auto acc = Scalars(model / "eval_inline", "accuracy");
  REQUIRE(acc.size() == 1);
  CHECK(acc[0].step == kSteps);
  CHECK(acc[0].value == Approx(*history->final_eval->accuracy).margin(1e-6));
  CHECK(Scalars(model / "eval_inline", "loss").size() == 1);

  // The report: where the time goes and the ps load, finished (no reload).
  const std::string html = obs::RenderReportHtml(*history, model.string());
  for (const char* id :
       {"step-time-worker:0", "step-time-worker:1", "ps-requests", "ps-bytes", "ps-queue"}) {
    INFO(id);
    CHECK(html.find("id=\"" + std::string(id) + "\"") != std::string::npos);
  }
  CHECK(html.find("no data") == std::string::npos);
  CHECK(html.find("http-equiv") == std::string::npos);
}

}  // namespace
}  // namespace ps::integ
