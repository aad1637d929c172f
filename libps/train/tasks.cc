#include "libps/train/tasks.h"

#include <signal.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <set>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/store_io.h"
#include "libps/core/log.h"
#include "libps/model/blas.h"
#include "libps/ps/ps_status.h"
#include "libps/ps/service.h"
#include "libps/train/trainer.h"

namespace ps::train {

namespace {

// Admits only the given roles; names the peer otherwise.
std::function<Status(const proto::Hello&)> AdmitRoles(std::vector<proto::Role> roles, std::string me) {
  return [roles = std::move(roles), me = std::move(me)](const proto::Hello& h) {
    for (auto r : roles) {
      if (h.role == r) return Status::Ok();
    }
    return PermissionDenied(std::string("a ") + proto::RoleName(h.role) + " may not connect to " + me);
  };
}

// A signal before the chief's Shutdown: the task stops at once and says what is lost.
void OnTerminate(int sig, const std::function<void(std::string)>& stop) {
  PS_LOG(Warning) << "received " << (sig == SIGINT ? "SIGINT" : "SIGTERM")
                  << " before the chief's Shutdown; stopping now";
  stop(sig == SIGINT ? "SIGINT" : "SIGTERM");
}

Status SignalStatus(const std::string& reason) {
  return Aborted("terminated by " + reason);
}

// Saves and restores this ps's shard file in the checkpoint directory the chief names.
class PsCheckpointer : public ps::Checkpointer {
 public:
  PsCheckpointer(ps::Store* store, int index) : store_(store), index_(index) {}

  Result<proto::SaveReply> Save(const proto::Save& m) override {
    auto t0 = std::chrono::steady_clock::now();
    PS_ASSIGN_OR_RETURN(ckpt::ShardFileInfo info, ckpt::SaveStore(*store_, m.model_dir, index_, m.global_step));
    store_->SetGlobalStep(m.global_step);
    double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    PS_LOG(Info) << "saved " << ckpt::CheckpointDirName(m.global_step) << "/" << info.name << " ("
                 << info.bytes / 1048576.0 << " MiB in " << sec << " s)";
    return proto::SaveReply{info.name, info.bytes, info.digest};
  }

  Status Restore(const proto::Restore& m) override {
    std::string path = ckpt::CheckpointPath(m.model_dir, m.global_step) + "/" + ckpt::ShardFileName(index_);
    std::set<ps::ShardKey> restored;
    PS_RETURN_IF_ERROR(ckpt::RestoreStore(store_, path, &restored));
    for (const auto& key : store_->Keys()) {
      if (!restored.contains(key)) {
        return FailedPrecondition(path + ": has no record for " + key.ToString() +
                                  " (was it written by another cluster layout?)");
      }
    }
    store_->SetGlobalStep(m.global_step);
    PS_LOG(Info) << "restored " << restored.size() << " shard(s) from " << path;
    return Status::Ok();
  }

 private:
  ps::Store* store_;
  int index_;
};

}  // namespace

Status RunPsTask(const DaemonContext& ctx, SignalWatcher& signals) {
  ps::Store store;
  PsCheckpointer checkpointer(&store, ctx.tf.task.index);
  ps::Service service(&store, &checkpointer);
  net::Runtime runtime(2);
  auto options = ctx.ServerFor();
  options.admit = AdmitRoles({proto::Role::kChief, proto::Role::kWorker}, ctx.name());
  // Testing hook: PSTRAIN_FAULT_IGNORE_SHUTDOWN=1 leaves the chief's Shutdown unanswered
  // (a ps that does not acknowledge), so the chief's timeout path can be tested.
  const bool ignore_shutdown = std::getenv("PSTRAIN_FAULT_IGNORE_SHUTDOWN") != nullptr;
  std::mutex held_mu;
  std::vector<net::Responder> held;  // unanswered Shutdowns; guarded by held_mu
  PS_ASSIGN_OR_RETURN(auto server, net::Server::Start(runtime, options, [&](net::Request req, net::Responder resp) {
    if (ignore_shutdown && std::holds_alternative<proto::Shutdown>(req.envelope.body)) {
      PS_LOG(Warning) << "fault injection: not answering Shutdown";
      std::lock_guard lock(held_mu);
      held.push_back(std::move(resp));
      return;
    }
    service.Handle(std::move(req), std::move(resp));
  }));
  const auto started = std::chrono::steady_clock::now();
  service.SetStatusSource([&store, &service, s = server.get(), started] {
    double uptime = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    Json j = ps::PsStatusJson(store, s->stats(), service.generation(), uptime);
    const auto u = service.update_stats();
    j["update"] = {{"mode", ps::UpdateModeName(u.spec.mode)}, {"stale_dropped", u.stale_dropped},
                   {"waited_pulls", u.waited_pulls}, {"max_lead", u.max_lead},
                   {"min_version", u.min_version}, {"max_version", u.max_version}};
    return j.dump();
  });
  bool by_signal = false;
  signals.Start([&](int sig) {
    by_signal = true;
    OnTerminate(sig, [&](std::string r) { service.RequestStop(std::move(r)); });
  });
  PS_LOG(Info) << "serving on " << ctx.listen_host << ":" << server->port();
  std::string reason = service.WaitForShutdown();
  server->Close();
  service.SetStatusSource(nullptr);
  if (by_signal) return SignalStatus(reason);
  auto stats = store.stats();
  PS_LOG(Info) << "shut down (" << reason << "); served " << stats.pull_requests << " pulls, "
               << stats.push_requests << " pushes, ignored " << service.skipped_pushes()
               << " repeated push item(s)";
  const auto u = service.update_stats();
  if (u.spec.mode == ps::UpdateMode::kSync) {
    PS_LOG(Info) << "sync updates: shards at update " << u.min_version << ".." << u.max_version << ", "
                 << u.stale_dropped << " stale gradient(s) dropped, " << u.waited_pulls << " pull(s) waited";
  } else if (u.spec.mode == ps::UpdateMode::kBoundedStaleness) {
    PS_LOG(Info) << "bounded staleness: largest lead " << u.max_lead << " step(s) (bound " << u.spec.staleness
                 << "), " << u.waited_pulls << " pull(s) waited";
  }
  return Status::Ok();
}

namespace {

class Worker {
 public:
  Worker(const DaemonContext& ctx, net::Runtime& runtime) : ctx_(ctx), runtime_(runtime) {}

  void Handle(net::Request req, net::Responder resp) {
    auto& body = req.envelope.body;
    // Only the newest chief is obeyed; its generation is stamped on our ps requests.
    const uint64_t gen = req.envelope.generation;
    uint64_t cur = generation_.load();
    while (gen > cur && !generation_.compare_exchange_weak(cur, gen)) {
    }
    if (gen < cur) {
      return resp.Fail(Aborted("stale chief: generation " + std::to_string(gen) + " < " + std::to_string(cur)));
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
    if (auto* m = std::get_if<proto::Shutdown>(&body)) {
      resp.Reply(proto::Ack{});
      Stop(m->reason.empty() ? "Shutdown from " + req.peer.Name() : m->reason);
      return;
    }
    resp.Fail(ProtocolError(std::string("a worker does not handle ") + proto::BodyName(body)));
  }

  void Stop(std::string reason) {
    std::lock_guard lock(stop_mu_);
    if (!stop_reason_) stop_reason_ = std::move(reason);
    stop_cv_.notify_all();
  }
  std::string WaitForStop() {
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
    if (trainer_ != nullptr) {
      if (m.job_json != job_json_) return FailedPrecondition(ctx_.name() + " already runs another job");
      // The same job from a restarted chief (or a retried StartJob): carry on.
      for (auto& c : ps_) c->SetGeneration(generation);
      return Status::Ok();
    }
    PS_ASSIGN_OR_RETURN(Json json, ParseJson(m.job_json, "StartJob.job"));
    PS_ASSIGN_OR_RETURN(JobSpec job, ParseJob(json, ""));
    const int num_ps = ctx_.tf.cluster.count(cluster::TaskType::kPs);
    std::vector<std::unique_ptr<PsLink>> links;
    ps_.clear();
    for (int p = 0; p < num_ps; ++p) {
      PS_ASSIGN_OR_RETURN(auto link, ConnectPs(p, ctx_.connect_timeout, generation));
      links.push_back(std::move(link));
    }
    PS_ASSIGN_OR_RETURN(trainer_, MakeTrainer(job, m.worker_index, m.num_workers, num_ps, std::move(links)));
    job_json_ = m.job_json;
    PS_LOG(Info) << "job started: shard " << m.worker_index << " of " << m.num_workers << ", " << num_ps
                 << " ps task(s)";
    return Status::Ok();
  }

  Result<proto::RunStepsReply> RunSteps(const proto::RunSteps& m) {
    queued_packs_ += 1;
    std::lock_guard lock(mu_);  // one pack at a time; a second one queues here
    queued_packs_ -= 1;
    if (trainer_ == nullptr) return FailedPrecondition("RunSteps before StartJob");
    PS_RETURN_IF_ERROR(ReconnectPs());
    StepStats s;
    Status ran = trainer_->RunSteps(m.first_step, m.count, &s);
    // Bounded staleness: with no pack waiting here, this worker is out of work (at a
    // checkpoint or the end of the job there may be none for it) and must not hold the
    // others back. Best effort: a ps that does not answer is being recovered anyway.
    if (queued_packs_.load() == 0) {
      Status idle = trainer_->Idle();
      if (!idle.ok()) PS_LOG(Warning) << "could not tell the ps tasks this worker is idle: " << idle.message();
    }
    PS_RETURN_IF_ERROR(ran);
    return proto::RunStepsReply{static_cast<int32_t>(s.steps), s.examples,        s.loss_sum,
                                s.correct,                     s.data_seconds,    s.pull_seconds,
                                s.compute_seconds,             s.push_seconds,    static_cast<int32_t>(s.stale)};
  }

  // A ps whose connection broke (it was restarted) is dialled again before the next
  // pack; the chief restores it before sending more work. mu_ held.
  Status ReconnectPs() {
    for (size_t p = 0; p < ps_.size() / 2; ++p) {
      if (ps_[2 * p]->health().ok() && ps_[2 * p + 1]->health().ok()) continue;
      ps_[2 * p]->Close();
      ps_[2 * p + 1]->Close();
      // Short: the chief retries the pack later.
      PS_ASSIGN_OR_RETURN(auto link, ConnectPs(static_cast<int>(p), std::chrono::seconds(2), generation_.load()));
      PS_LOG(Info) << "reconnected to ps:" << p;
      trainer_->fetcher().ReplaceLink(p, std::move(link));
    }
    return Status::Ok();
  }

  // Two connections to ps `p` (pulls, pushes), kept in ps_[2p] and ps_[2p+1]. mu_ held.
  Result<std::unique_ptr<PsLink>> ConnectPs(int p, net::Millis deadline, uint64_t generation) {
    auto options = ctx_.ClientFor({cluster::TaskType::kPs, p});
    options.generation = generation;
    options.connect_deadline = deadline;
    PS_ASSIGN_OR_RETURN(auto pulls, net::Client::Connect(runtime_, options));
    PS_ASSIGN_OR_RETURN(auto pushes, net::Client::Connect(runtime_, options));
    const size_t at = 2 * static_cast<size_t>(p);
    if (ps_.size() < at + 2) ps_.resize(at + 2);
    ps_[at] = pulls;
    ps_[at + 1] = pushes;
    return RemotePsLink(std::move(pulls), std::move(pushes));
  }

  const DaemonContext& ctx_;
  net::Runtime& runtime_;
  std::atomic<uint64_t> generation_{0};            // the newest chief's
  std::atomic<int> queued_packs_{0};               // RunSteps waiting for mu_
  std::mutex mu_;
  std::string job_json_;                           // guarded by mu_
  std::vector<std::shared_ptr<net::Client>> ps_;   // [2 * ps]: pulls, pushes; guarded by mu_
  std::unique_ptr<Trainer> trainer_;               // guarded by mu_
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  std::optional<std::string> stop_reason_;         // guarded by stop_mu_
};

}  // namespace

Status RunWorkerTask(const DaemonContext& ctx, const WorkerOptions& options, SignalWatcher& signals) {
  model::SetBlasThreads(options.blas_threads);
  net::Runtime runtime(2);
  Worker worker(ctx, runtime);
  auto server_options = ctx.ServerFor();
  server_options.admit = AdmitRoles({proto::Role::kChief}, ctx.name());
  PS_ASSIGN_OR_RETURN(auto server, net::Server::Start(runtime, server_options, [&](net::Request req, net::Responder resp) {
    worker.Handle(std::move(req), std::move(resp));
  }));
  bool by_signal = false;
  signals.Start([&](int sig) {
    by_signal = true;
    OnTerminate(sig, [&](std::string r) { worker.Stop(std::move(r)); });
  });
  PS_LOG(Info) << "waiting for the chief on " << ctx.listen_host << ":" << server->port()
               << " (BLAS threads: " << model::BlasThreads() << ")";
  std::string reason = worker.WaitForStop();
  server->Close();
  worker.Close();
  if (by_signal) return SignalStatus(reason);
  PS_LOG(Info) << "shut down (" << reason << ")";
  return Status::Ok();
}

}  // namespace ps::train
