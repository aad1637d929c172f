// The chief's run: the event loop around the ChiefMachine, and the actions it returns.
#include "libps/chief/chief.h"

#include <signal.h>

#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/data/dataset.h"

namespace ps::chief {

namespace {
// The loop's wake-up when nothing happens: the machine's clock for checkpoints by time
// and the watchdog.
constexpr std::chrono::milliseconds kTick{100};

// The event that answers an I/O action: `Ok` when `st` is OK, else `Failed{st}`.
template <typename Ok, typename Failed>
Event Outcome(const Status& st) {
  if (st.ok()) return Ok{};
  return Failed{st};
}
}  // namespace

void Inbox::Post(Event e) {
  std::lock_guard lock(mu_);
  events_.push_back(std::move(e));
  cv_.notify_one();
}

std::optional<Event> Inbox::Wait(Clock::duration timeout) {
  std::unique_lock lock(mu_);
  if (!cv_.wait_for(lock, timeout, [&] { return !events_.empty(); })) return std::nullopt;
  Event e = std::move(events_.front());
  events_.pop_front();
  return e;
}

Chief::~Chief() {
  StopFollowing();
  if (io_.joinable()) io_.join();
  if (rejoiner_.joinable()) {
    {
      std::lock_guard lock(mu_);
      rejoin_stop_ = true;
      cv_.notify_all();
    }
    rejoiner_.join();
  }
}

Status Chief::Run(daemon::SignalWatcher& signals) {
  start_ = Clock::now();
  auto watching_signals = signals.Start(
      [this](int sig) { RequestStop(std::string(sig == SIGINT ? "SIGINT" : "SIGTERM")); });
  job_.update.num_workers = ctx_.tf.cluster.count(cluster::TaskType::kWorker);
  PS_RETURN_IF_ERROR(ps::server::ValidateUpdate(job_.update, "job.update"));
  // A data set that cannot be read fails the start once the tasks are reached, so that
  // they are shut down (Connect below).
  plan_error_ = PlanData();
  PS_RETURN_IF_ERROR(PrepareModelDir());
  PS_RETURN_IF_ERROR(StartControl());
  auto rpc_metrics = daemon::ExportServerStats(*ctx_.metrics.registry, *control_);
  auto chief_metrics =
      ctx_.metrics.registry->AddCollector([this](prom::Writer& w) { WriteMetrics(w); });
  machine_.emplace(MachineConfigFor());
  Status outcome = Drive();
  StopFollowing();
  control_->Close();
  return outcome;
}

MachineConfig Chief::MachineConfigFor() const {
  MachineConfig c;
  c.total_steps = job_.steps;
  c.steps_per_dispatch = job_.steps_per_dispatch;
  c.dispatches_per_worker = job_.dispatches_per_worker;
  c.num_workers = ctx_.tf.cluster.count(cluster::TaskType::kWorker);
  c.sync = job_.update.StepMode() == ps::server::UpdateMode::kSync;
  c.replicas = job_.update.replicas();
  c.checkpoint_every_steps = job_.checkpoint.every_steps;
  c.max_checkpoint_failures = job_.checkpoint.max_consecutive_failures;
  c.checkpoint_every_seconds = job_.checkpoint.every_seconds;
  c.checkpoint_delta_every_seconds = job_.checkpoint.delta_every_seconds;
  c.log_every_steps = job_.log_every_steps;
  c.watchdog = options_.watchdog;
  c.ps_recovery_timeout = options_.ps_recovery_timeout;
  c.evaluate_final = !job_.eval_data.is_null();
  c.eval_every_steps = job_.eval_every_steps;
  return c;
}

Status Chief::PlanData() {
  if (job_.train_data.is_object() && job_.train_data.contains("files")) {
    // Sync mode: every worker streams its own share of the files (data/stream.h).
    if (job_.update.StepMode() == ps::server::UpdateMode::kSync) return Status::Ok();
    return PlanStreamed();
  }
  PS_ASSIGN_OR_RETURN(data::ExampleTable table,
                      data::LoadExamples(job_.train_data, "job.train_data", job_.base_dir));
  data::StepOrder::Options o;
  o.examples = table.size();
  o.batch_size = job_.batch_size;
  o.slots = job_.update.StepMode() == ps::server::UpdateMode::kSync
                ? std::max(1, job_.update.num_workers)
                : 1;
  o.seed = job_.seed;
  if (job_.epochs) o.limit = *job_.epochs * table.size();
  auto order = data::StepOrder::Create(o);
  if (!order.ok()) return order.status().WithContext("job.train_data");
  order_ = std::move(*order);
  if (!job_.epochs) return Status::Ok();
  const int64_t steps = order_->StepsFor(*job_.epochs);
  if (job_.steps == 0 || steps < job_.steps) job_.steps = steps;
  job_.raw["steps"] = job_.steps;  // workers, job.json and the evaluator see the steps
  PS_LOG(Info) << "job.train_data: " << table.size() << " examples; " << *job_.epochs
               << " epoch(s) of batch " << job_.batch_size << " are " << steps << " steps"
               << (job_.steps < steps ? " (job.steps " + std::to_string(job_.steps) + " ends first)"
                                      : "");
  return Status::Ok();
}

Time Chief::Now() const { return std::chrono::duration_cast<Time>(Clock::now() - start_); }

void Chief::SetState(std::string s) {
  std::lock_guard lock(mu_);
  state_ = std::move(s);
}

void Chief::RequestStop(std::string reason) { inbox_.Post(ev::StopRequested{std::move(reason)}); }

Status Chief::Drive() {
  Deliver(ev::Start{});
  while (!exit_) {
    auto e = inbox_.Wait(kTick);
    Deliver(e ? *e : Event{ev::Tick{}});
  }
  if (io_.joinable()) io_.join();
  return *exit_;
}

void Chief::Deliver(const Event& e) {
  // What the connections show comes first: a save or a pack that failed because a ps
  // went away is then seen with the ps already lost.
  for (const auto& seen : ObserveCluster()) Apply(seen);
  Apply(e);
  if (DataGivenOut()) Apply(ev::DataEnd{});
  // Followed data: a checkpoint or an evaluation waits for every range scheduled; the
  // packs waiting for data end with no step run, so it need not wait for data to arrive.
  if (follower_ && coordinator_ && !exit_ &&
      (machine_->phase() == Phase::kCheckpointing || machine_->phase() == Phase::kEvaluating))
    coordinator_->ReturnWaiting();
}

void Chief::Apply(const Event& e) {
  if (exit_) return;
  if (const auto* back = std::get_if<ev::PsBack>(&e))
    reported_lost_ps_.erase(static_cast<size_t>(back->ps));
  CountEvent(e);
  auto actions = machine_->Step(Now(), e);
  global_step_ = machine_->step();
  {
    std::lock_guard lock(mu_);
    stop_reason_ = machine_->stop_reason();
    if (machine_->dispatching() && !machine_->busy()) state_ = "training";
  }
  for (const auto& a : actions) Execute(a);
}

std::vector<Event> Chief::ObserveCluster() {
  std::vector<Event> out;
  for (size_t i : LostPs()) {
    if (reported_lost_ps_.insert(i).second) out.emplace_back(ev::PsLost{static_cast<int>(i)});
  }
  std::vector<obs::WorkerSnapshot> workers;
  {
    std::lock_guard lock(mu_);
    if (coordinator_) workers = coordinator_->Snapshot();
  }
  for (size_t w = 0; w < workers.size() && w < reported_alive_.size(); ++w) {
    if (workers[w].alive == reported_alive_[w]) continue;
    reported_alive_[w] = workers[w].alive;
    if (workers[w].alive)
      out.emplace_back(ev::WorkerBack{static_cast<int>(w)});
    else
      out.emplace_back(ev::WorkerLost{static_cast<int>(w)});
  }
  return out;
}

void Chief::RunIo(std::function<Event(std::stop_token)> op) {
  if (io_.joinable()) io_.join();  // it has posted its event: it is ending
  io_stop_ = std::stop_source();
  io_ = std::thread(
      [this, op = std::move(op), stop = io_stop_.get_token()] { inbox_.Post(op(stop)); });
}

void Chief::Execute(const Action& action) {
  std::visit(
      [this](const auto& a) {
        using A = std::decay_t<decltype(a)>;
        if constexpr (std::is_same_v<A, act::Connect>) {
          RunIo([this](std::stop_token stop) {
            Status st = Connect(stop);
            if (st.ok()) st = plan_error_;
            if (st.ok())
              st = data::CheckStreamedData(job_.eval_data, "job.eval_data", job_.base_dir);
            if (st.ok()) st = CreateVariables(stop);
            return Outcome<ev::Connected, ev::StartFailed>(st);
          });
        } else if constexpr (std::is_same_v<A, act::RestoreNewest>) {
          RunIo([this](std::stop_token stop) -> Event {
            last_saved_.reset();
            Status st = RestoreNewest(stop);
            if (!st.ok()) return ev::RestoreFailed{st};
            RecordEvent(started_ ? "restored" : "chief_start", "",
                        last_saved_ ? "restored ckpt-" + std::to_string(last_saved_->global_step)
                        : warm_started_ ? "warm-started from " + job_.checkpoint.init_from +
                                              "/ckpt-" + std::to_string(global_step_.load())
                                        : "fresh");
            started_ = true;
            if (warm_started_) return ev::Restored{true, global_step_, false, true};
            if (!last_saved_) return ev::Restored{false, 0, false};
            return ev::Restored{true, last_saved_->global_step, last_saved_->final};
          });
        } else if constexpr (std::is_same_v<A, act::SaveCheckpoint>) {
          RunIo([this, a](std::stop_token) -> Event {
            Status st = SaveCheckpoint(a.final, a.delta);
            if (!st.ok()) return ev::CheckpointFailed{st};
            return ev::CheckpointCommitted{a.step, a.final,
                                           last_saved_ && last_saved_->base.has_value()};
          });
        } else if constexpr (std::is_same_v<A, act::StartWorkers>) {
          RunIo([this](std::stop_token stop) {
            return Outcome<ev::WorkersStarted, ev::StartFailed>(StartWorkers(stop));
          });
        } else if constexpr (std::is_same_v<A, act::ReconnectPs>) {
          RunIo([this, a](std::stop_token stop) { return ReconnectPs(a.ps, a.deadline, stop); });
        } else if constexpr (std::is_same_v<A, act::CloseDispatch>) {
          RunIo([this](std::stop_token) -> Event {
            CloseDispatch();
            return ev::DispatchClosed{};
          });
        } else if constexpr (std::is_same_v<A, act::AbortIo>) {
          io_stop_.request_stop();
        } else if constexpr (std::is_same_v<A, act::Evaluate>) {
          RunIo([this](std::stop_token stop) {
            return Outcome<ev::Evaluated, ev::EvaluationFailed>(FinalEvaluation(stop));
          });
        } else if constexpr (std::is_same_v<A, act::EvaluateOnWorkers>) {
          RunIo([this, a](std::stop_token stop) { return EvaluateOnWorkers(a.step, stop); });
        } else if constexpr (std::is_same_v<A, act::Shutdown>) {
          if (a.group == TaskGroup::kWorkers) SetState("shutting down");
          RunIo([this, a](std::stop_token) -> Event {
            return ShutdownTasks(
                a.group, proto::Shutdown{a.reason,
                                         daemon::ExitCodeFor(a.outcome) == daemon::kExitRetryable});
          });
        } else if constexpr (std::is_same_v<A, act::OpenDispatch>) {
          OpenDispatch();
        } else if constexpr (std::is_same_v<A, act::ScheduleRange>) {
          Schedule(a);
        } else if constexpr (std::is_same_v<A, act::CancelQueued>) {
          coordinator_->CancelQueued(a.why);
        } else if constexpr (std::is_same_v<A, act::PauseDispatch>) {
          coordinator_->Pause(a.why);
          ReleasePulls(a.why);
        } else if constexpr (std::is_same_v<A, act::ResumeDispatch>) {
          coordinator_->Resume();
        } else if constexpr (std::is_same_v<A, act::Report>) {
          Report(a.window, a.total);
        } else if constexpr (std::is_same_v<A, act::Watchdog>) {
          Watchdog(a.silent_for);
        } else if constexpr (std::is_same_v<A, act::Log>) {
          if (log::Enabled(a.level)) log::Write(a.level, a.text);
        } else if constexpr (std::is_same_v<A, act::Exit>) {
          exit_ = a.status;
        } else {
          static_assert(sizeof(A) == 0, "an action the shell does not carry out");
        }
      },
      action);
}

void Chief::OpenDispatch() {
  Coordinator::Options copts;
  copts.max_in_flight_per_worker = job_.dispatches_per_worker;
  copts.worker_recovery_timeout = options_.worker_recovery_timeout;
  if (shard_queue_) {
    copts.lease = [this](int worker, int count) { return LeaseFor(worker, count); };
    copts.lease_done = [this](const proto::DataLease& l, const proto::RunStepsReply* r) {
      LeaseDone(l, r);
    };
    if (follower_) copts.lease_ready = [this] { return DataReady(); };
  }
  {
    std::lock_guard lock(mu_);  // the status thread reads coordinator_
    coordinator_ = std::make_unique<Coordinator>(workers_, copts);
  }
  reported_alive_.assign(workers_.size(), true);
  {
    std::lock_guard lock(mu_);
    rejoin_stop_ = false;  // reopened after a ps lost during the final checkpoint
  }
  for (size_t w = 0; w < workers_.size(); ++w) {
    workers_[w]->OnBroken([this, w, name = workers_[w]->peer_name()](const Status& why) {
      coordinator_->MarkLost(static_cast<int>(w), why);
      RecordEvent("worker_lost", name, why.message());
      inbox_.Post(ev::Tick{});  // the loop looks at the workers again
    });
  }
  rejoiner_ = std::thread([this] { RejoinLoop(); });
  StartFollowing();
  if (dispatch_opened_) {
    PS_LOG(Info) << "dispatch reopened";
    return;
  }
  dispatch_opened_ = true;
  PS_LOG(Info) << "training "
               << (steps_from_data_ ? std::to_string(*job_.epochs) + " epoch(s)"
                   : follower_      ? std::string("the files as they arrive")
                                    : std::to_string(job_.steps) + " steps")
               << " of batch " << job_.batch_size << " on " << workers_.size() << " worker(s), "
               << job_.steps_per_dispatch << " steps per dispatch";
}

void Chief::Schedule(const act::ScheduleRange& a) {
  auto done = [this, id = a.id](Result<PackResult> r) {
    ev::PackDone e{id, r.status(), {}};
    if (r.ok()) {
      const auto& reply = r->reply;
      e.stats = {.examples = reply.examples,
                 .correct = reply.correct,
                 .stale = reply.stale,
                 .loss_sum = reply.loss_sum,
                 .skipped_records = reply.skipped_records};
      e.status = DataHoldsRecords();
    }
    inbox_.Post(std::move(e));
  };
  if (a.workers.empty()) {
    coordinator_->Schedule(a.first, a.count, -1, done);
    return;
  }
  for (int w : a.workers) coordinator_->Schedule(a.first, a.count, w, done);
}

void Chief::CloseDispatch() {
  // Packs of backups (or of a lost worker) for ranges already decided are not needed any
  // more (sync mode; in the other modes nothing is queued by now).
  coordinator_->CancelQueued(Aborted("the job's steps are done"));
  coordinator_->Join().ok();  // errors were taken from the packs' results
  {
    std::lock_guard lock(mu_);
    rejoin_stop_ = true;
    cv_.notify_all();
  }
  rejoiner_.join();
}

void Chief::Watchdog(Time silent_for) {
  if (follower_ && !DataReady()) return;  // no data has arrived: nothing to train
  std::string waiting;
  for (const auto& s : coordinator_->Snapshot()) {
    if (s.in_flight > 0)
      waiting +=
          (waiting.empty() ? "" : ", ") + s.name + " (" + std::to_string(s.in_flight) + " pack(s))";
    else if (!s.alive)
      waiting += (waiting.empty() ? "" : ", ") + s.name + " (lost)";
  }
  std::vector<std::shared_ptr<net::Client>> ps;
  {
    std::lock_guard lock(mu_);
    ps = ps_;
  }
  for (const auto& p : ps) {
    if (!p->health().ok()) waiting += (waiting.empty() ? "" : ", ") + p->peer_name() + " (lost)";
  }
  PS_LOG(Warning) << "watchdog: no step completed for "
                  << std::chrono::duration_cast<std::chrono::seconds>(silent_for).count()
                  << " s; waiting on " << (waiting.empty() ? "nothing in flight" : waiting);
}

Status RunChief(const daemon::DaemonContext& ctx, job::JobSpec job, const ChiefOptions& options,
                daemon::SignalWatcher& signals) {
  Chief chief(ctx, std::move(job), options);
  return chief.Run(signals);
}

}  // namespace ps::chief
