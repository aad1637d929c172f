// The chief's links to the cluster: the control server, connections to every task,
// lost ps tasks and workers coming back, and the orderly shutdown.
#include <condition_variable>
#include <mutex>
#include <thread>

#include "libps/chief/shell.h"
#include "libps/core/log.h"

namespace ps::chief {

Status Chief::StartControl() {
  net::ServerOptions o = ctx_.ServerFor({proto::Role::kClient});
  PS_ASSIGN_OR_RETURN(
      control_, net::Server::Start(runtime_, o, [this](net::Request req, net::Responder resp) {
        if (auto* m = std::get_if<proto::Stop>(&req.envelope.body)) {
          RequestStop(m->reason.empty() ? "stop command from " + req.peer.address : m->reason);
          return resp.Reply(proto::Ack{});
        }
        if (std::holds_alternative<proto::GetStatus>(req.envelope.body)) {
          return resp.Reply(proto::ChiefStatusReply{CurrentStatus()});
        }
        resp.Fail(ProtocolError(std::string("the chief does not handle ") +
                                proto::BodyName(req.envelope.body)));
      }));
  PS_LOG(Info) << "control on " << ctx_.listen_host << ":" << control_->port()
               << " (pstrain stop --chief " << ctx_.tf.cluster.address(ctx_.tf.task).ToString()
               << ")";
  return Status::Ok();
}

Status Chief::Connect(std::stop_token stop) {
  SetState("connecting");
  const auto& cl = ctx_.tf.cluster;
  std::vector<cluster::TaskId> tasks;
  tasks.reserve(static_cast<size_t>(cl.count(cluster::TaskType::kPs)) +
                static_cast<size_t>(cl.count(cluster::TaskType::kWorker)));
  for (int i = 0; i < cl.count(cluster::TaskType::kPs); ++i)
    tasks.push_back({cluster::TaskType::kPs, i});
  for (int i = 0; i < cl.count(cluster::TaskType::kWorker); ++i)
    tasks.push_back({cluster::TaskType::kWorker, i});
  PS_LOG(Info) << "connecting to " << cl.count(cluster::TaskType::kPs) << " ps and "
               << cl.count(cluster::TaskType::kWorker) << " worker task(s)";
  std::vector<std::future<Result<std::shared_ptr<net::Client>>>> futs;
  futs.reserve(tasks.size());
  for (const auto& t : tasks) {
    futs.push_back(std::async(std::launch::async, [this, t, stop] {
      auto o = ClientOptionsFor(t);
      o.stop = stop;
      return net::Client::Connect(runtime_, o);
    }));
  }
  Status first;
  std::vector<std::shared_ptr<net::Client>> ps, workers;
  for (size_t i = 0; i < tasks.size(); ++i) {
    auto c = futs[i].get();
    if (!c.ok()) {
      // A task that failed beats one a stop cut short (it says more).
      if (first.ok() || (first.code() == Code::kAborted && c.status().code() != Code::kAborted))
        first = c.status();
      continue;
    }
    if (tasks[i].type == cluster::TaskType::kPs)
      ps.push_back(*c);
    else
      workers.push_back(*c);
  }
  {
    std::lock_guard lock(mu_);  // the run's thread looks for lost ps tasks meanwhile
    ps_ = std::move(ps);
    workers_ = std::move(workers);
  }
  if (!first.ok()) return first;
  PS_LOG(Info) << "connected to " << ps_.size() << " ps and " << workers_.size()
               << " worker task(s)";
  for (size_t i = 0; i < ps_.size(); ++i) WatchPs(i);
  return Status::Ok();
}

net::ClientOptions Chief::ClientOptionsFor(cluster::TaskId t) const {
  auto o = ctx_.ClientFor(t);
  o.generation = generation_;
  o.heartbeat_interval = std::max(net::Millis(100), options_.heartbeat_timeout / 4);
  o.heartbeat_timeout = options_.heartbeat_timeout;
  return o;
}

void Chief::WatchPs(size_t i) {
  ps_[i]->OnBroken([this, i, name = ps_[i]->peer_name()](const Status& why) {
    {
      std::lock_guard lock(mu_);
      lost_ps_.insert(i);
    }
    PS_LOG(Error) << name << " failed: " << why.message();
    RecordEvent("ps_lost", name, why.message());
    inbox_.Post(ev::Tick{});  // the loop looks at the ps tasks again
  });
}

std::set<size_t> Chief::LostPs() {
  std::lock_guard lock(mu_);
  std::set<size_t> lost = lost_ps_;
  for (size_t i = 0; i < ps_.size(); ++i) {
    if (!ps_[i]->health().ok()) lost.insert(i);
  }
  return lost;
}

void Chief::ReleasePulls(const Status& why) {
  std::vector<std::shared_ptr<net::Client>> live;
  {
    std::lock_guard lock(mu_);
    for (const auto& c : ps_) {
      if (c != nullptr && c->health().ok()) live.push_back(c);
    }
  }
  for (const auto& c : live) {
    c->CallAsync(proto::ReleasePulls{why.message()}, {}, {}, net::Millis{0},
                 [name = c->peer_name()](Result<net::Reply> r) {
                   if (!r.ok())
                     PS_LOG(Warning) << "releasing the waiting pulls of " << name << ": "
                                     << r.status().message();
                 });
  }
}

Event Chief::ReconnectPs(int i, Time deadline, std::stop_token stop) {
  SetState("recovering");
  const auto index = static_cast<size_t>(i);
  auto o = ClientOptionsFor({cluster::TaskType::kPs, i});
  auto left = std::chrono::duration_cast<net::Millis>(deadline - Now());
  if (left.count() <= 0) left = net::Millis(1);
  o.connect_deadline = left;
  o.stop = stop;
  PS_LOG(Warning) << "training paused: waiting up to " << left.count() / 1000 << " s for "
                  << o.peer_name << " (" << o.host << ":" << o.port << ") to come back";
  auto c = net::Client::Connect(runtime_, o);
  if (!c.ok() && c.status().code() == Code::kAborted) return ev::RecoveryFailed{c.status()};
  if (!c.ok()) {
    return ev::RecoveryFailed{
        Unavailable(o.peer_name + " did not come back within " +
                    std::to_string(options_.ps_recovery_timeout.count() / 1000) + " s (" +
                    c.status().message() + "); the committed checkpoints in " + job_.model_dir +
                    " are intact: restart the cluster to resume")};
  }
  {
    std::lock_guard lock(mu_);
    ps_[index] = *c;
    lost_ps_.erase(index);
  }
  WatchPs(index);
  auto r = ps_[index]->CallSync(create_msgs_[index]);
  if (!r.ok())
    return ev::RecoveryFailed{r.status().WithContext("recreating variables on " + o.peer_name)};
  PS_LOG(Info) << o.peer_name << " is back";
  RecordEvent("ps_back", o.peer_name, "");
  return ev::PsBack{i};
}

void Chief::RejoinLoop() {
  std::unique_lock lock(mu_);
  while (!rejoin_stop_) {
    cv_.wait_for(lock, std::chrono::seconds(1), [&] { return rejoin_stop_; });
    if (rejoin_stop_) return;
    auto snapshot = coordinator_->Snapshot();
    lock.unlock();
    for (size_t w = 0; w < snapshot.size(); ++w) {
      if (snapshot[w].alive) continue;
      auto o = ClientOptionsFor({cluster::TaskType::kWorker, static_cast<int>(w)});
      o.connect_deadline = net::Millis(1000);
      o.handshake_timeout = net::Millis(1000);
      auto c = net::Client::Connect(runtime_, o);
      if (!c.ok()) continue;
      auto r = (*c)->CallSync(proto::StartJob{job_.raw.dump(), static_cast<int32_t>(w),
                                              static_cast<int32_t>(snapshot.size())});
      if (!r.ok()) {
        // A worker that is stopping is not back: it exits after its last pack.
        if (r.status().code() == Code::kDraining) continue;
        PS_LOG(Warning) << o.peer_name
                        << " is back but cannot start the job: " << r.status().message();
        continue;
      }
      (*c)->OnBroken([this, w, name = o.peer_name](const Status& why) {
        coordinator_->MarkLost(static_cast<int>(w), why);
        RecordEvent("worker_lost", name, why.message());
      });
      {
        std::lock_guard guard(mu_);
        workers_[w] = *c;
      }
      coordinator_->Rejoin(static_cast<int>(w), *c);
      PS_LOG(Info) << o.peer_name << " rejoined";
      RecordEvent("worker_back", o.peer_name, "");
    }
    lock.lock();
  }
}

std::vector<Result<net::Reply>> Chief::CallEach(
    const std::vector<std::shared_ptr<net::Client>>& clients, const proto::Body& msg,
    net::Millis timeout, std::stop_token stop) {
  return CallEach(clients, std::vector<proto::Body>(clients.size(), msg), timeout, stop);
}

std::vector<Result<net::Reply>> Chief::CallEach(
    const std::vector<std::shared_ptr<net::Client>>& clients, std::vector<proto::Body> msgs,
    net::Millis timeout, std::stop_token stop) {
  struct Replies {
    std::mutex mu;
    std::condition_variable_any cv;
    std::vector<std::optional<Result<net::Reply>>> got;  // [client]; guarded by mu
    size_t left = 0;                                     // guarded by mu
  };
  auto replies = std::make_shared<Replies>();
  replies->got.resize(clients.size());
  replies->left = clients.size();
  for (size_t i = 0; i < clients.size(); ++i) {
    clients[i]->CallAsync(std::move(msgs[i]), {}, {}, timeout, [replies, i](Result<net::Reply> r) {
      std::lock_guard lock(replies->mu);
      replies->got[i] = std::move(r);
      --replies->left;
      replies->cv.notify_all();
    });
  }
  std::vector<Result<net::Reply>> out;
  std::unique_lock lock(replies->mu);
  replies->cv.wait(lock, stop, [&] { return replies->left == 0; });
  for (size_t i = 0; i < clients.size(); ++i) {
    if (replies->got[i])
      out.push_back(std::move(*replies->got[i]));
    else
      out.emplace_back(
          Aborted("stopped while waiting for " + clients[i]->peer_name() + " to answer"));
  }
  return out;
}

Status Chief::CallAll(const std::vector<std::shared_ptr<net::Client>>& clients,
                      const proto::Body& msg, net::Millis timeout, std::vector<std::string>* failed,
                      std::stop_token stop) {
  auto replies = CallEach(clients, msg, timeout, stop);
  Status first;
  for (size_t i = 0; i < clients.size(); ++i) {
    auto& r = replies[i];
    if (!r.ok()) {
      if (failed != nullptr)
        failed->push_back(clients[i]->peer_name() + " (" + r.status().message() + ")");
      if (first.ok()) first = r.status();
    }
  }
  return first;
}

Status Chief::StartWorkers(std::stop_token stop) {
  SetState("starting workers");
  std::vector<proto::Body> msgs;
  msgs.reserve(workers_.size());
  for (size_t w = 0; w < workers_.size(); ++w) {
    msgs.emplace_back(proto::StartJob{job_.raw.dump(), static_cast<int32_t>(w),
                                      static_cast<int32_t>(workers_.size())});
  }
  auto replies = CallEach(workers_, std::move(msgs), net::Millis{0}, stop);
  for (size_t w = 0; w < workers_.size(); ++w) {
    auto& r = replies[w];
    if (!r.ok() && r.status().code() == Code::kAborted && stop.stop_requested()) return r.status();
    if (!r.ok()) {
      Status st = r.status();
      return Status(st.code(), workers_[w]->peer_name() + " cannot start the job: " + st.message());
    }
  }
  return Status::Ok();
}

ev::ShutdownReplied Chief::ShutdownTasks(TaskGroup group, const proto::Shutdown& msg) {
  ev::ShutdownReplied replied{group, 0, {}};
  auto live = [&](const std::vector<std::shared_ptr<net::Client>>& all) {
    std::vector<std::shared_ptr<net::Client>> out;
    for (const auto& c : all) {
      if (c->health().ok()) out.push_back(c);
    }
    return out;
  };
  if (group == TaskGroup::kWorkers) {
    WaitMetrics();  // its sample talks to the ps tasks
    // From here on a task going away is expected: detach the failure callbacks first.
    for (auto& c : workers_) c->OnBroken(nullptr);
    for (auto& c : ps_) c->OnBroken(nullptr);
    std::unique_ptr<Coordinator> gone;
    {
      std::lock_guard lock(mu_);  // the status thread reads coordinator_
      gone = std::move(coordinator_);
    }
    gone.reset();
    auto live_workers = live(workers_);
    shutdown_ps_ = live(ps_);
    replied.asked = static_cast<int>(live_workers.size());
    CallAll(live_workers, msg, options_.shutdown_timeout, &replied.failed).ok();
    return replied;
  }
  replied.asked = static_cast<int>(shutdown_ps_.size());
  CallAll(shutdown_ps_, msg, options_.shutdown_timeout, &replied.failed).ok();
  for (auto& c : workers_) c->Close();
  for (auto& c : ps_) c->Close();
  return replied;
}

}  // namespace ps::chief
