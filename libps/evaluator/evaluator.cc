#include "libps/evaluator/evaluator.h"

#include <signal.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/core/files.h"
#include "libps/core/json.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/model/blas.h"
#include "libps/obs/eval_log.h"
#include "libps/scoring/loaded_model.h"
#include "libps/scoring/scoring.h"

namespace ps::evaluator {

namespace {

class Evaluator {
 public:
  explicit Evaluator(EvaluatorOptions o) : options_(std::move(o)) {}

  // The first call with `grace` > 0 lets the evaluator go on for that long; otherwise it
  // stops at its next wait.
  void Stop(double grace) {
    std::lock_guard lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (grace > 0 && !stop_at_) {
      stop_at_ = now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                           std::chrono::duration<double>(grace));
    } else {
      stop_at_ = now;
    }
    cv_.notify_all();
  }
  bool Stopping() {
    std::lock_guard lock(mu_);
    return stop_at_.has_value();
  }

  Status Run() {
    PS_RETURN_IF_ERROR(LoadJob());
    if (options_.once) return EvaluateOnce();
    PS_RETURN_IF_ERROR(ReadDone());
    for (;;) {
      // The committed ones first: one committed after the listing is not taken as deleted.
      ReadCommitted();
      PS_ASSIGN_OR_RETURN(auto all, ckpt::ListCheckpoints(options_.model_dir));
      NoteDeleted(all);
      for (const auto& c : all) {
        auto done = done_.find(c.global_step);
        // A checkpoint evaluated before the chief marked it final (same shards): once more,
        // so that the last line says final and the evaluator exits.
        if (done != done_.end() && (done->second || !c.manifest.final)) {
          if (done->second && &c == &all.back() && EndsJob(c)) {
            PS_LOG(Info) << "the final checkpoint " << c.dir << " was evaluated before; exiting";
            return Status::Ok();
          }
          continue;
        }
        auto m = EvaluateCheckpoint(c);
        if (!m.ok()) {
          if (!std::filesystem::exists(c.dir)) {
            Skipped(c.global_step, "deleted while it was read");
            done_[c.global_step] = c.manifest.final;
            continue;
          }
          return m.status();
        }
        PS_RETURN_IF_ERROR(Append(c, *m));
        done_[c.global_step] = c.manifest.final;
        if (EndsJob(c)) {
          PS_LOG(Info) << "evaluated the final checkpoint; exiting";
          return Status::Ok();
        }
      }
      if (Wait()) return Aborted("stopped by a signal before the final checkpoint");
    }
  }

 private:
  // True when stopped. Waits for the job file or new checkpoints by polling model_dir.
  bool Wait() {
    std::unique_lock lock(mu_);
    auto due = [&] { return stop_at_ && std::chrono::steady_clock::now() >= *stop_at_; };
    const auto next = std::chrono::steady_clock::now() +
                      std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                          std::chrono::duration<double>(options_.poll_seconds));
    // A deadline set or moved by a signal meanwhile wakes this wait; the next one honours it.
    const auto seen = stop_at_;
    cv_.wait_until(lock, stop_at_ ? std::min(next, *stop_at_) : next,
                   [&] { return due() || stop_at_ != seen; });
    return due();
  }

  Status LoadJob() {
    const std::string path = options_.model_dir + "/job.json";
    bool told = false;
    while (!std::filesystem::exists(path)) {
      if (options_.once) return NotFound(path + ": no job file (is this a pstrain model dir?)");
      if (!told) PS_LOG(Info) << "waiting for " << path;
      told = true;
      if (Wait()) return Aborted("stopped by a signal before the job started");
    }
    PS_ASSIGN_OR_RETURN(job_, scoring::ReadModelDirJob(options_.model_dir));
    if (job_.eval_data.is_null())
      return InvalidArgument(path + ": job.eval_data: the job has no eval data");
    PS_ASSIGN_OR_RETURN(model_, model::BuildModel(job_.model, "job.model"));
    return Status::Ok();
  }

  // The final checkpoint of the job in model_dir now: a final one of an earlier run that
  // was resumed with more steps (its MANIFEST's total_steps differs) is not the end.
  bool EndsJob(const ckpt::CheckpointInfo& c) {
    if (!c.manifest.final) return false;
    const Json& extra = c.manifest.extra;
    if (!extra.contains("total_steps") || !extra["total_steps"].is_number_integer()) return true;
    int64_t steps = job_.steps;
    auto json = ReadJsonFile(options_.model_dir + "/job.json");  // the chief rewrites it on resume
    if (json.ok() && json->contains("steps") && (*json)["steps"].is_number_integer()) {
      steps = (*json)["steps"].get<int64_t>();
    }
    return extra["total_steps"].get<int64_t>() == steps;
  }

  // Steps already in eval/metrics.jsonl (a restarted evaluator does not repeat them). Lines
  // of the chief's inline evaluation that older runs wrote there ("source") are not its.
  Status ReadDone() {
    std::ifstream in(options_.model_dir + "/eval/metrics.jsonl");
    std::string line;
    while (std::getline(in, line)) {
      auto j = ParseJson(line, "eval/metrics.jsonl");
      if (j.ok() && j->is_object() && j->contains("source")) continue;
      if (j.ok() && j->contains("step") && (*j)["step"].is_number_integer()) {
        const bool final =
            j->contains("final") && (*j)["final"].is_boolean() && (*j)["final"].get<bool>();
        bool& was_final = done_[(*j)["step"].get<int64_t>()];
        was_final = was_final || final;
      }
    }
    // Checkpoints up to the newest one evaluated were handled (evaluated or skipped) by an
    // earlier run: they are not reported as skipped again.
    if (!done_.empty()) handled_up_to_ = done_.rbegin()->first;
    return Status::Ok();
  }

  // The full checkpoints the chief committed (train_metrics.jsonl's checkpoint lines), read
  // on from where the last call stopped; a line still being written is read next time.
  void ReadCommitted() {
    std::ifstream in(options_.model_dir + "/train_metrics.jsonl", std::ios::binary);
    if (!in) return;
    in.seekg(static_cast<std::streamoff>(train_offset_));
    std::string line;
    while (std::getline(in, line)) {
      if (in.eof()) break;  // no newline yet
      train_offset_ += line.size() + 1;
      if (line.find("\"checkpoint\"") == std::string::npos) continue;
      auto j = ParseJson(line, "train_metrics.jsonl");
      if (!j.ok() || !j->is_object()) continue;
      auto c = j->find("checkpoint");
      if (c == j->end() || !c->is_object()) continue;
      auto step = c->find("step");
      auto delta = c->find("delta");
      if (step == c->end() || !step->is_number_integer()) continue;
      if (delta != c->end() && delta->is_boolean() && delta->get<bool>()) continue;
      committed_.insert(step->get<int64_t>());
    }
  }

  // Committed full checkpoints gone from `listed` before they were evaluated.
  void NoteDeleted(const std::vector<ckpt::CheckpointInfo>& listed) {
    std::set<int64_t> present;
    for (const auto& c : listed) present.insert(c.global_step);
    for (int64_t step : committed_) {
      if (step <= handled_up_to_ || done_.count(step) > 0 || present.count(step) > 0) continue;
      Skipped(step, "deleted (max_to_keep) before it could be evaluated");
      done_[step] = false;
    }
  }

  void Skipped(int64_t step, const std::string& why) {
    ++skipped_;
    PS_LOG(Warning) << "skipped " << ckpt::CheckpointDirName(step) << ": " << why << " ("
                    << skipped_ << " skipped so far)";
    if (options_.metrics) {
      options_.metrics
          ->Counter("pstrain_evaluator_skipped_checkpoints_total",
                    "Committed checkpoints deleted (max_to_keep) before they could be evaluated.")
          .Add();
    }
  }

  Status EvaluateOnce() {
    PS_ASSIGN_OR_RETURN(auto all, ckpt::ListCheckpoints(options_.model_dir));
    for (auto it = all.rbegin(); it != all.rend(); ++it) {
      const auto& c = *it;
      if (options_.step >= 0 && c.global_step != options_.step) continue;
      PS_ASSIGN_OR_RETURN(scoring::EvalMetrics m, EvaluateCheckpoint(c));
      return Append(c, m);
    }
    return NotFound(options_.step >= 0
                        ? "no committed checkpoint at step " + std::to_string(options_.step)
                        : "no committed checkpoint in " + options_.model_dir);
  }

  static void RecordMetrics(prom::Registry& r, int64_t step, const scoring::EvalMetrics& m,
                            double sec) {
    r.Counter("pstrain_evaluator_evaluations_total", "Checkpoints evaluated.").Add();
    r.Gauge("pstrain_evaluator_step", "Global step of the newest checkpoint evaluated.")
        .Set(static_cast<double>(step));
    r.Gauge("pstrain_evaluator_accuracy", "Accuracy of the newest evaluation.").Set(m.accuracy);
    r.Gauge("pstrain_evaluator_loss", "Mean loss of the newest evaluation.").Set(m.loss);
    r.Gauge("pstrain_evaluator_duration_seconds", "How long the newest evaluation took.").Set(sec);
  }

  // Loads checkpoint `c` into an in-process store laid out like the cluster was, and
  // scores the eval data: the loading and scoring path `pstrain predict` and the serving
  // API share (libps/scoring/loaded_model.h).
  Result<scoring::EvalMetrics> EvaluateCheckpoint(const ckpt::CheckpointInfo& c) {
    auto t0 = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(scoring::LoadedModel loaded, scoring::LoadCheckpoint(job_, *model_, c));
    PS_ASSIGN_OR_RETURN(
        scoring::PassResult pass,
        scoring::ScoreData(loaded, *model_, job_.eval_data, job_.base_dir, "job.eval_data"));
    const scoring::EvalMetrics& m = *pass.metrics;
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (options_.metrics) RecordMetrics(*options_.metrics, c.global_step, m, sec);
    char buf[256];
    std::snprintf(
        buf, sizeof buf, "step %lld%s: accuracy %.4f  loss %.4f%s  (%lld examples, %.1f s)",
        static_cast<long long>(c.global_step), c.manifest.final ? " (final)" : "", m.accuracy,
        m.loss, m.auc >= 0 ? ("  auc " + std::to_string(m.auc).substr(0, 6)).c_str() : "",
        static_cast<long long>(m.examples), sec);
    PS_LOG(Info) << buf;
    return m;
  }

  Status Append(const ckpt::CheckpointInfo& c, const scoring::EvalMetrics& m) {
    Json line = {{"step", c.global_step}};
    line.update(scoring::EvalMetricsToJson(m));
    line["final"] = c.manifest.final;
    line["checkpoint"] = ckpt::CheckpointDirName(c.global_step);
    line["unix_time"] =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    return eval_log_.Append(line);
  }

  EvaluatorOptions options_;
  job::JobSpec job_;
  std::unique_ptr<model::Model> model_;
  std::map<int64_t, bool> done_;       // evaluated (or skipped) steps -> whether final then
  int64_t handled_up_to_ = INT64_MIN;  // an earlier run handled every checkpoint up to it
  std::set<int64_t> committed_;        // full checkpoints the chief committed
  uint64_t train_offset_ = 0;          // train_metrics.jsonl read up to here
  int64_t skipped_ = 0;
  obs::EvalLog eval_log_{options_.model_dir, obs::kEvaluatorRun};  // after options_
  std::mutex mu_;
  std::condition_variable cv_;
  // When to stop (set by a signal); guarded by mu_.
  std::optional<std::chrono::steady_clock::time_point> stop_at_;
};

}  // namespace

Status CheckOptions(const EvaluatorOptions& options) {
  if (options.model_dir.empty()) return InvalidArgument("--model-dir: required");
  if (!(options.poll_seconds > 0 && options.poll_seconds <= 1e6))
    return InvalidArgument("--poll-seconds: must be > 0 and at most 1000000");
  if (!(options.stop_grace_seconds >= 0 && options.stop_grace_seconds <= 1e6))
    return InvalidArgument("--stop-grace: must be in 0..1000000 seconds");
  if (options.step >= 0 && !options.once) return InvalidArgument("--step: needs --once");
  return Status::Ok();
}

Status RunEvaluator(const EvaluatorOptions& options, daemon::SignalWatcher& signals) {
  PS_RETURN_IF_ERROR(CheckOptions(options));
  model::SetBlasThreads(1);
  Evaluator evaluator(options);
  auto watching_signals = signals.Start([&](int sig) {
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (options.stop_grace_seconds > 0 && !evaluator.Stopping()) {
      PS_LOG(Info) << name << ": going on until the final checkpoint is evaluated, at most "
                   << FormatDuration(options.stop_grace_seconds);
      evaluator.Stop(options.stop_grace_seconds);
    } else {
      PS_LOG(Info) << name << ": stopping";
      evaluator.Stop(0);
    }
  });
  return evaluator.Run();
}

}  // namespace ps::evaluator
