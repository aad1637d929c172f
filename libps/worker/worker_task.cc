#include "libps/worker/worker_task.h"

#include <signal.h>
#include <algorithm>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <optional>

#include "libps/client/param_fetcher.h"
#include "libps/client/ps_link.h"
#include "libps/core/log.h"
#include "libps/daemon/fault_hold.h"
#include "libps/job/job.h"
#include "libps/model/blas.h"
#include "libps/scoring/inline_eval.h"
#include "libps/scoring/scoring.h"
#include "libps/worker/trainer.h"

namespace ps::worker {

namespace {

// The worker's Prometheus metrics: totals of the packs it ran (their StepStats, as
// reported to the chief) and the round trips of its pulls and pushes per ps.
class WorkerMetrics {
 public:
  explicit WorkerMetrics(prom::Registry& r)
      : registry_(r),
        steps_(r.Counter("pstrain_worker_steps_total", "Steps this worker ran.")),
        examples_(r.Counter("pstrain_worker_examples_total", "Examples this worker trained on.")),
        stale_(
            r.Counter("pstrain_worker_stale_steps_total", "Sync mode: steps skipped as stale.")) {
    static constexpr const char* kPhases[] = {"data", "pull", "compute", "push"};
    for (int i = 0; i < 4; ++i) {
      phase_[i] = &r.Counter("pstrain_worker_step_phase_seconds_total",
                             "Seconds the step loop spent per phase (data, pull, compute, push).",
                             {{"phase", kPhases[i]}});
    }
  }
  void AddPack(const StepStats& s) {
    steps_.Add(static_cast<double>(s.steps));
    examples_.Add(static_cast<double>(s.examples));
    stale_.Add(static_cast<double>(s.stale));
    const double sec[4] = {s.data_seconds, s.pull_seconds, s.compute_seconds, s.push_seconds};
    for (int i = 0; i < 4; ++i) phase_[i]->Add(sec[i]);
  }
  client::LinkTimers TimersFor(int ps) {
    const prom::Labels labels{{"ps", std::to_string(ps)}};
    return {&registry_.Histogram("pstrain_worker_pull_duration_seconds",
                                 "Round trip of a pull to one ps, from the call to the reply.",
                                 prom::LatencyBuckets(), labels),
            &registry_.Histogram("pstrain_worker_push_duration_seconds",
                                 "Round trip of a push to one ps, from the call to the reply.",
                                 prom::LatencyBuckets(), labels)};
  }

 private:
  prom::Registry& registry_;
  prom::Counter& steps_;
  prom::Counter& examples_;
  prom::Counter& stale_;
  prom::Counter* phase_[4];
};

class Worker {
 public:
  Worker(const daemon::DaemonContext& ctx, net::Runtime& runtime)
      : ctx_(ctx), runtime_(runtime), metrics_(*ctx.metrics.registry) {}

  void Handle(net::Request req, net::Responder resp) {
    auto& body = req.envelope.body;
    // Only the newest chief is obeyed; its generation is stamped on our ps requests.
    const uint64_t gen = req.envelope.generation;
    uint64_t cur = generation_.load();
    while (gen > cur && !generation_.compare_exchange_weak(cur, gen)) {}
    if (gen < cur) {
      return resp.Fail(
          Aborted("stale chief: generation " + std::to_string(gen) + " < " + std::to_string(cur)));
    }
    if (auto* m = std::get_if<proto::StartJob>(&body)) {
      Status st = StartJob(*m, gen);
      if (!st.ok()) {
        PS_LOG(Error) << "cannot start the job: " << st.ToString();
        return resp.Fail(st);
      }
      return resp.Reply(proto::Ack{});
    }
    if (auto* m = std::get_if<proto::RunSteps>(&body)) {
      auto r = RunSteps(*m);
      if (!r.ok()) return resp.Fail(r.status());
      return resp.Reply(*r);
    }
    if (auto* m = std::get_if<proto::EvaluateShard>(&body)) {
      auto r = EvaluateShard(*m);
      if (!r.ok()) return resp.Fail(r.status());
      scoring::EvalShardWire w = scoring::SumsToWire(std::move(*r));
      return resp.Reply(std::move(w.reply), std::move(w.payload));
    }
    if (auto* m = std::get_if<proto::Shutdown>(&body)) {
      resp.Reply(proto::Ack{});
      Stop({m->reason.empty() ? "Shutdown from " + req.peer.Name() : m->reason, m->retryable});
      return;
    }
    resp.Fail(ProtocolError(std::string("a worker does not handle ") + proto::BodyName(body)));
  }

  void Stop(proto::Shutdown why) {
    stopping_ = true;
    std::lock_guard lock(stop_mu_);
    if (!stop_reason_) stop_reason_ = std::move(why);
    stop_cv_.notify_all();
  }
  proto::Shutdown WaitForStop() {
    std::unique_lock lock(stop_mu_);
    stop_cv_.wait(lock, [&] { return stop_reason_.has_value(); });
    return *stop_reason_;
  }
  void Close() {
    std::lock_guard lock(mu_);
    trainer_.reset();
    for (auto& c : ps_) c->Close();
  }

 private:
  // `generation`: the chief's; stamped on every request to the ps tasks from now on.
  Status StartJob(const proto::StartJob& m, uint64_t generation) {
    std::lock_guard lock(mu_);  // waits for a pack of the previous chief to finish
    if (stopping_) return Draining(ctx_.name() + " is stopping");
    if (trainer_ != nullptr) {
      if (m.job_json != job_json_)
        return FailedPrecondition(ctx_.name() + " already runs another job");
      // The same job from a restarted chief (or a retried StartJob): carry on.
      for (auto& c : ps_) c->SetGeneration(generation);
      return Status::Ok();
    }
    PS_ASSIGN_OR_RETURN(Json json, ParseJson(m.job_json, "StartJob.job"));
    PS_ASSIGN_OR_RETURN(job::JobSpec job, job::ParseJob(json, ""));
    const int num_ps = ctx_.tf.cluster.count(cluster::TaskType::kPs);
    std::vector<std::unique_ptr<client::PsLink>> links;
    ps_.clear();
    for (int p = 0; p < num_ps; ++p) {
      PS_ASSIGN_OR_RETURN(auto link, ConnectPs(p, ctx_.connect_timeout, generation));
      links.push_back(std::move(link));
    }
    PS_ASSIGN_OR_RETURN(trainer_,
                        MakeTrainer(job, m.worker_index, m.num_workers, num_ps, std::move(links)));
    job_json_ = m.job_json;
    job_ = std::move(job);
    PS_LOG(Info) << "job started: shard " << m.worker_index << " of " << m.num_workers << ", "
                 << num_ps << " ps task(s)";
    return Status::Ok();
  }

  Result<proto::RunStepsReply> RunSteps(const proto::RunSteps& m) {
    queued_packs_ += 1;
    std::lock_guard lock(mu_);  // one pack at a time; a second one queues here
    queued_packs_ -= 1;
    // Told to stop (SIGTERM): the chief gives this pack to another worker.
    if (stopping_) return Draining(ctx_.name() + " is stopping");
    if (trainer_ == nullptr) return FailedPrecondition("RunSteps before StartJob");
    PS_RETURN_IF_ERROR(ReconnectPs());
    StepStats s;
    data::PackEnd end;
    Status ran;
    if (m.lease) {
      if (!trainer_->by_lease())
        return FailedPrecondition("RunSteps with a data lease for a job not read by lease");
      const proto::DataLease& l = *m.lease;
      const data::LeaseSpec spec{
          l.file, data::Shard{0, l.begin, l.end, l.lines},
          data::Lease{l.seq, 0, l.base_byte, l.base_record, l.start, l.take, l.generation}};
      // No records left to lease (the last epoch's tail is in flight elsewhere): no step.
      if (l.take > 0) ran = trainer_->RunLease(m.first_step, m.count, spec, &s, &end);
    } else if (trainer_->by_lease()) {
      return FailedPrecondition("RunSteps without a data lease for a job read by lease");
    } else {
      ran = trainer_->RunSteps(m.first_step, m.count, &s);
    }
    metrics_.AddPack(s);
    // Bounded staleness: with no pack waiting here, this worker is out of work (at a
    // checkpoint or the end of the job there may be none for it) and must not hold the
    // others back. Best effort: a ps that does not answer is being recovered anyway.
    if (queued_packs_.load() == 0) {
      Status idle = trainer_->Idle();
      if (!idle.ok())
        PS_LOG(Warning) << "could not tell the ps tasks this worker is idle: " << idle.message();
    }
    PS_RETURN_IF_ERROR(ran);
    return proto::RunStepsReply{.steps = static_cast<int32_t>(s.steps),
                                .examples = s.examples,
                                .loss_sum = s.loss_sum,
                                .correct = s.correct,
                                .data_seconds = s.data_seconds,
                                .pull_seconds = s.pull_seconds,
                                .compute_seconds = s.compute_seconds,
                                .push_seconds = s.push_seconds,
                                .stale = static_cast<int32_t>(s.stale),
                                .skipped_records = s.skipped_records,
                                .data_records = end.records,
                                .data_end_byte = end.end_byte,
                                .data_end = end.end_of_shard,
                                .data_total = end.total};
  }

  // Inline evaluation: the chief has paused training; this worker's shard of the eval
  // data with the parameters on the ps now, through the trainer's connections.
  Result<std::vector<model::HeadMetrics::Sums>> EvaluateShard(const proto::EvaluateShard& m) {
    std::lock_guard lock(mu_);
    if (trainer_ == nullptr) return FailedPrecondition("EvaluateShard before StartJob");
    if (job_.eval_data.is_null())
      return FailedPrecondition("EvaluateShard: the job has no eval_data");
    PS_RETURN_IF_ERROR(ReconnectPs());
    PS_ASSIGN_OR_RETURN(auto model, model::BuildModel(job_.model, "job.model"));
    const int num_ps = static_cast<int>(ps_.size() / 2);
    PS_ASSIGN_OR_RETURN(job::VariablePlan plan, job::PlanVariables(job_, *model, num_ps));
    std::vector<std::unique_ptr<client::PsLink>> links;
    links.reserve(static_cast<size_t>(num_ps));
    for (int p = 0; p < num_ps; ++p)
      links.push_back(client::RemotePsLink(ps_[2 * static_cast<size_t>(p)]));
    PS_ASSIGN_OR_RETURN(auto fetcher, client::ParamFetcher::Create(plan, std::move(links)));
    return scoring::EvaluateShard(job_, job_.eval_data, *model, *fetcher, m.shard, m.num_shards);
  }

  // A ps whose connection broke (it was restarted) is dialled again before the next
  // pack; the chief restores it before sending more work. mu_ held.
  Status ReconnectPs() {
    for (size_t p = 0; p < ps_.size() / 2; ++p) {
      if (ps_[2 * p]->health().ok() && ps_[2 * p + 1]->health().ok()) continue;
      ps_[2 * p]->Close();
      ps_[2 * p + 1]->Close();
      // Short: the chief retries the pack later.
      PS_ASSIGN_OR_RETURN(
          auto link, ConnectPs(static_cast<int>(p), std::chrono::seconds(2), generation_.load()));
      PS_LOG(Info) << "reconnected to ps:" << p;
      trainer_->fetcher().ReplaceLink(p, std::move(link));
    }
    return Status::Ok();
  }

  // Two connections to ps `p` (pulls, pushes), kept in ps_[2p] and ps_[2p+1]. mu_ held.
  Result<std::unique_ptr<client::PsLink>> ConnectPs(int p, net::Millis deadline,
                                                    uint64_t generation) {
    auto options = ctx_.ClientFor({cluster::TaskType::kPs, p});
    options.generation = generation;
    PS_ASSIGN_OR_RETURN(auto pulls, ConnectUntil(options, deadline));
    PS_ASSIGN_OR_RETURN(auto pushes, ConnectUntil(options, deadline));
    const size_t at = 2 * static_cast<size_t>(p);
    if (ps_.size() < at + 2) ps_.resize(at + 2);
    ps_[at] = pulls;
    ps_[at + 1] = pushes;
    return client::RemotePsLink(std::move(pulls), std::move(pushes), metrics_.TimersFor(p));
  }

  // Dials with backoff until `deadline` passes or the worker is told to stop (a Shutdown
  // while a StartJob is still connecting must not wait out the whole deadline).
  Result<std::shared_ptr<net::Client>> ConnectUntil(net::ClientOptions options,
                                                    net::Millis deadline) {
    const auto end = std::chrono::steady_clock::now() + deadline;
    for (;;) {
      const auto left =
          std::chrono::duration_cast<net::Millis>(end - std::chrono::steady_clock::now());
      options.connect_deadline = std::clamp(left, net::Millis(1), net::Millis(1000));
      auto client = net::Client::Connect(runtime_, options);
      if (client.ok() || left <= net::Millis(1000)) return client;
      if (stopping_) return Aborted("stopping: " + client.status().message());
    }
  }

  const daemon::DaemonContext& ctx_;
  net::Runtime& runtime_;
  WorkerMetrics metrics_;
  std::atomic<uint64_t> generation_{0};  // the newest chief's
  std::atomic<int> queued_packs_{0};     // RunSteps waiting for mu_
  std::atomic<bool> stopping_{false};    // Stop() was called
  std::mutex mu_;
  std::string job_json_;                          // guarded by mu_
  job::JobSpec job_;                              // guarded by mu_; parsed job_json_
  std::vector<std::shared_ptr<net::Client>> ps_;  // [2 * ps]: pulls, pushes; guarded by mu_
  std::unique_ptr<Trainer> trainer_;              // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::optional<proto::Shutdown> stop_reason_;  // guarded by stop_mu_
};

}  // namespace

Status RunWorkerTask(const daemon::DaemonContext& ctx, const WorkerOptions& options,
                     daemon::SignalWatcher& signals) {
  model::SetBlasThreads(options.blas_threads);
  net::Runtime runtime(ctx.io_threads);
  Worker worker(ctx, runtime);
  auto server_options = ctx.ServerFor({proto::Role::kChief});
  PS_ASSIGN_OR_RETURN(auto fault_hold,
                      daemon::FaultHold::FromEnv([&worker](net::Request req, net::Responder resp) {
                        worker.Handle(std::move(req), std::move(resp));
                      }));
  PS_ASSIGN_OR_RETURN(
      auto server,
      net::Server::Start(runtime, server_options, [&](net::Request req, net::Responder resp) {
        if (fault_hold && fault_hold->Hold(req, resp)) return;
        worker.Handle(std::move(req), std::move(resp));
      }));
  auto rpc_metrics = daemon::ExportServerStats(*ctx.metrics.registry, *server);
  // SIGTERM/SIGINT: the pack in flight runs to its end and its reply goes out (Close
  // below waits for it), later packs are refused (the chief gives them to other workers),
  // and the worker exits 0: an orchestrator that stops a worker stops it for good.
  auto watching_signals = signals.Start([&](int sig) {
    const char* name = sig == SIGINT ? "SIGINT" : "SIGTERM";
    PS_LOG(Warning) << "received " << name << ": finishing the steps in flight, then exiting 0";
    worker.Stop({std::string("stopped by ") + name});
  });
  auto chief_watch =
      daemon::WatchChief(ctx, *server, [&](proto::Shutdown why) { worker.Stop(std::move(why)); });
  PS_LOG(Info) << "waiting for the chief on " << ctx.listen_host << ":" << server->port()
               << " (BLAS threads: " << model::BlasThreads() << ")";
  const proto::Shutdown shutdown = worker.WaitForStop();
  server->Close();
  worker.Close();
  PS_LOG(Info) << "shut down (" << shutdown.reason << ")";
  return daemon::ShutdownStatus(shutdown);
}

}  // namespace ps::worker
