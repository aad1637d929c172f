// Inline distributed evaluation: the workers evaluate their shards, the chief merges.
#include <future>

#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/scoring/inline_eval.h"
#include "libps/scoring/scoring.h"

namespace ps::chief {

namespace {
// An evaluation pass over a large eval set may take long; the job still has a deadline.
constexpr net::Millis kEvalTimeout{std::chrono::minutes(30)};

std::optional<double> MetricOf(const scoring::EvalMetrics& m, const std::string& metric) {
  if (metric == "auc") return m.auc >= 0 ? std::optional<double>(m.auc) : std::nullopt;
  if (metric == "accuracy") return m.accuracy;
  return m.loss;
}
}  // namespace

Event Chief::EvaluateOnWorkers(int64_t step, std::stop_token stop) {
  SetState("evaluating");
  const auto t0 = Clock::now();
  std::vector<std::shared_ptr<net::Client>> live;
  for (const auto& w : workers_) {
    if (w->health().ok()) live.push_back(w);
  }
  if (live.empty()) return ev::EvaluationFailed{Unavailable("no live worker to evaluate on")};
  auto model = model::BuildModel(job_.model, "job.model");
  if (!model.ok()) return ev::EvaluationFailed{model.status()};
  // One shard per live worker: together they cover the eval data exactly once.
  const int n = static_cast<int>(live.size());
  std::vector<proto::Body> msgs;
  msgs.reserve(live.size());
  for (int i = 0; i < n; ++i)
    msgs.emplace_back(proto::EvaluateShard{.step = step, .shard = i, .num_shards = n});
  auto replies = CallEach(live, std::move(msgs), kEvalTimeout, stop);
  if (stop.stop_requested()) {
    return ev::EvaluationFailed{Aborted("stopped while the workers evaluated")};
  }
  model::HeadMetrics merged((*model)->heads());
  Status failed;
  for (int i = 0; i < n; ++i) {
    auto& r = replies[static_cast<size_t>(i)];
    if (!failed.ok()) continue;
    const std::string& who = live[static_cast<size_t>(i)]->peer_name();
    if (!r.ok()) {
      failed = r.status().WithContext("evaluation on " + who);
      continue;
    }
    const auto* reply = std::get_if<proto::EvaluateShardReply>(&r->envelope.body);
    if (reply == nullptr) {
      failed =
          ProtocolError(who + " answered EvaluateShard with " + proto::BodyName(r->envelope.body));
      continue;
    }
    auto sums = scoring::SumsFromWire(*reply, r->payload.bytes());
    failed = sums.ok() ? merged.Merge(*sums) : sums.status();
    if (!failed.ok()) failed = failed.WithContext("evaluation on " + who);
  }
  if (!failed.ok()) return ev::EvaluationFailed{failed};
  auto m = scoring::EvalFigures(**model, merged.sums());
  if (!m.ok()) return ev::EvaluationFailed{m.status()};
  const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  PS_LOG(Info) << "evaluation at step " << step << " on " << m->examples << " examples (" << n
               << " worker(s), " << Fixed(sec, 1) << " s): accuracy " << Fixed(m->accuracy, 4)
               << "  loss " << Fixed(m->loss, 4)
               << (m->auc >= 0 ? "  auc " + Fixed(m->auc, 4) : std::string());
  Json figures = {{"step", step},    {"examples", m->examples}, {"accuracy", m->accuracy},
                  {"loss", m->loss}, {"seconds", sec},          {"workers", n}};
  if (m->auc >= 0) figures["auc"] = m->auc;
  if (!m->heads.is_null()) figures["heads"] = m->heads;
  WriteMetricsLine({{"eval", figures}});
  Json line = figures;
  line["source"] = "workers";
  line["unix_time"] = UnixTime();
  if (!eval_log_) eval_log_.emplace(job_.model_dir, obs::kInlineRun);
  Status logged = eval_log_->Append(line);
  if (!logged.ok()) PS_LOG(Warning) << "evaluation results: " << logged.message();
  std::string early = early_stopper_.Observe(step, MetricOf(*m, job_.early_stopping.metric));
  return ev::WorkersEvaluated{.step = step, .early_stop = std::move(early)};
}

}  // namespace ps::chief
