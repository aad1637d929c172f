// The model dir, restoring from and saving checkpoints, and the final evaluation.
#include <algorithm>
#include <filesystem>

#include "libps/chief/shell.h"
#include "libps/client/param_fetcher.h"
#include "libps/client/ps_link.h"
#include "libps/core/files.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/obs/status.h"
#include "libps/scoring/scoring.h"

namespace ps::chief {

namespace {
uint64_t ManifestBytes(const ckpt::Manifest& m) {
  uint64_t n = 0;
  for (const auto& s : m.shards) n += s.bytes;
  return n;
}
}  // namespace

Status Chief::PrepareModelDir() {
  if (job_.model_dir.empty())
    return InvalidArgument("job.model_dir: not set (or pass --model-dir DIR)");
  std::error_code ec;
  // The ps tasks write into model_dir from their own working directories: send them an
  // absolute path.
  job_.model_dir = std::filesystem::absolute(job_.model_dir, ec).lexically_normal().string();
  if (ec) return IoError("model_dir " + job_.model_dir + ": " + ec.message());
  if (!job_.checkpoint.init_from.empty()) {
    job_.checkpoint.init_from =
        std::filesystem::absolute(job_.checkpoint.init_from, ec).lexically_normal().string();
    if (ec)
      return IoError("checkpoint.init_from " + job_.checkpoint.init_from + ": " + ec.message());
  }
  std::filesystem::create_directories(job_.model_dir, ec);
  if (ec) return IoError("model_dir " + job_.model_dir + ": " + ec.message());
  PS_RETURN_IF_ERROR(WriteFileAtomic(job_.model_dir + "/job.json", job_.raw.dump(2) + "\n"));
  // Only the chief at start-up may do this: a save in progress looks uncommitted.
  std::vector<std::string> removed;
  PS_RETURN_IF_ERROR(ckpt::CleanUncommitted(job_.model_dir, &removed));
  for (const auto& r : removed) PS_LOG(Warning) << "removed uncommitted " << r;
  PS_ASSIGN_OR_RETURN(metrics_, AppendOnlyFile::Open(job_.model_dir + "/train_metrics.jsonl"));
  auto events = obs::EventWriter::Open(job_.model_dir);
  if (events.ok()) {
    events_.emplace(std::move(*events));
  } else {
    PS_LOG(Warning) << "no TensorBoard events: " << events.status().message();
  }
  return Status::Ok();
}

Json Chief::PlanJson() const {
  Json vars = Json::array();
  for (const auto& v : plan_.variables) {
    Json shards = Json::array();
    for (const auto& s : plan_.shards) {
      const cluster::ShardLayout& l = s.layout;
      if (l.var == v.name)
        shards.push_back(
            {{"shard", l.shard}, {"ps", s.ps}, {"row_begin", l.row_begin}, {"rows", l.rows}});
    }
    vars.push_back(
        {{"name", v.name}, {"shape", v.shape}, {"sparse", v.sparse}, {"shards", shards}});
  }
  return vars;
}

Status Chief::CheckVariablesMatch(const ckpt::CheckpointInfo& c) const {
  auto written = c.manifest.extra.find("variables");
  // Written before the plan was recorded: the ps tasks still check every record they read.
  if (written == c.manifest.extra.end() || !written->is_array()) return Status::Ok();
  auto find = [](const Json& list, const Json& name) -> const Json* {
    for (const auto& v : list) {
      if (v.is_object() && v.contains("name") && v["name"] == name) return &v;
    }
    return nullptr;
  };
  auto sparse = [](const Json& v) {  // a MANIFEST is read, not trusted: no type assumed
    auto it = v.find("sparse");
    return it != v.end() && it->is_boolean() && it->get<bool>();
  };
  auto text = [&sparse](const Json& v) {
    return v.value("shape", Json::array()).dump() + (sparse(v) ? " sparse" : " dense");
  };
  const Json mine = PlanJson();
  for (const auto& v : mine) {
    const Json* w = find(*written, v["name"]);
    if (w == nullptr) {
      return FailedPrecondition(c.dir + " has no variable " + v["name"].dump() +
                                " (was it added to the job's model since?)");
    }
    if (w->value("shape", Json()) != v["shape"] || sparse(*w) != sparse(v)) {
      return FailedPrecondition(c.dir + ": variable " + v["name"].dump() + " is " + text(*w) +
                                " in the checkpoint and " + text(v) +
                                " in this job (was the model changed?)");
    }
  }
  for (const auto& w : *written) {
    if (w.is_object() && w.contains("name") && find(mine, w["name"]) == nullptr) {
      return FailedPrecondition(c.dir + " holds variable " + w["name"].dump() +
                                ", which the job's model lacks (was it removed from the model?)");
    }
  }
  return Status::Ok();
}

Status Chief::RestoreNewest(std::stop_token stop) {
  warm_started_ = false;
  std::string dir = job_.model_dir;
  std::vector<std::string> warnings;
  auto found = ckpt::FindRestorable(dir, &warnings);
  for (const auto& w : warnings) PS_LOG(Warning) << w;
  if (!found.ok()) return found.status();
  const bool warm = !found->has_value() && !job_.checkpoint.init_from.empty();
  if (warm) {
    dir = job_.checkpoint.init_from;
    warnings.clear();
    found = ckpt::FindRestorable(dir, &warnings);
    for (const auto& w : warnings) PS_LOG(Warning) << w;
    if (!found.ok()) return found.status().WithContext("job.checkpoint.init_from");
    if (!found->has_value()) {
      return FailedPrecondition("job.checkpoint.init_from: " + dir +
                                " holds no checkpoint to start from");
    }
  }
  if (!found->has_value()) {
    PS_LOG(Info) << "no checkpoint in " << job_.model_dir << ": starting at step 0";
    RestoreDataPosition(nullptr);
    return Status::Ok();
  }
  // Newest first: the chain found (base + deltas), then shorter ones (a delta whose data
  // turns out corrupt while the ps tasks read it), then the older full checkpoints.
  std::vector<ckpt::CheckpointInfo> candidates;
  for (ckpt::CheckpointInfo c = **found;;) {
    candidates.push_back(c);
    if (c.deltas.empty()) break;
    c.deltas.pop_back();
  }
  PS_ASSIGN_OR_RETURN(auto all, ckpt::ListCheckpoints(dir));
  std::reverse(all.begin(), all.end());  // newest first
  for (auto& c : all) {
    if (c.global_step < (**found).global_step)
      candidates.push_back(std::move(c));  // newer ones failed verification
  }
  for (const auto& c : candidates) {
    const int64_t step = c.restored_step();
    const std::string name =
        c.dir + (c.deltas.empty() ? std::string()
                                  : " + " + std::to_string(c.deltas.size()) + " delta(s) to step " +
                                        std::to_string(step));
    // Any ps count and partitioning: each ps reads the rows of its shards from whichever
    // shard files hold them (ckpt::RestoreStore).
    PS_RETURN_IF_ERROR(CheckVariablesMatch(c));
    SetState("restoring");
    std::vector<std::string> failed;
    Status st = CallAll(ps_, proto::Restore{dir, step}, net::Millis(std::chrono::minutes(30)),
                        &failed, stop);
    if (stop.stop_requested()) {
      return Aborted("stopped while restoring " + name + "; " + job_.model_dir + " is unchanged");
    }
    if (st.ok()) {
      global_step_ = step;
      // A warm start has no checkpoint in model_dir yet: the state machine saves one.
      // Its data position is another job's: the data starts at its first epoch.
      RestoreDataPosition(warm               ? nullptr
                          : c.deltas.empty() ? &c.manifest
                                             : &c.deltas.back().manifest);
      if (warm) {
        warm_started_ = true;
      } else {
        last_saved_ = c.deltas.empty() ? c.manifest : c.deltas.back().manifest;
        chain_ = Chain{ManifestBytes(c.manifest), static_cast<int>(c.deltas.size()), 0};
        for (const auto& d : c.deltas) chain_.delta_bytes += ManifestBytes(d.manifest);
      }
      PS_LOG(Info) << (warm ? "warm-started from " : "restored ") << name
                   << ((c.deltas.empty() ? c.manifest : c.deltas.back().manifest).final ? " (final)"
                                                                                        : "")
                   << (c.manifest.num_ps != static_cast<int>(ps_.size())
                           ? " (written by " + std::to_string(c.manifest.num_ps) +
                                 " ps task(s), resharded onto " + std::to_string(ps_.size()) + ")"
                           : std::string())
                   << ": resuming at step " << step;
      return Status::Ok();
    }
    if (st.code() != Code::kDataLoss && st.code() != Code::kNotFound) return st;
    for (const auto& f : failed) PS_LOG(Error) << "cannot restore " << name << ": " << f;
    PS_LOG(Warning) << "falling back to the checkpoint before " << name;
  }
  if (warm) {
    return DataLoss(
        "job.checkpoint.init_from: no checkpoint in " + dir +
        " could be restored; refusing to start from scratch (fix or remove checkpoint.init_from to do that)");
  }
  return DataLoss(
      "no checkpoint in " + dir +
      " could be restored; refusing to start from scratch (move the directory away to do that)");
}

Status Chief::SaveCheckpoint(bool final, bool delta) {
  const int64_t step = global_step_;
  if (last_saved_ && last_saved_->global_step == step) {
    if (!final || last_saved_->final) return Status::Ok();
    last_saved_->final = true;  // nothing trained since: the same shards, now marked final
    last_saved_->unix_time = UnixTime();
    PS_RETURN_IF_ERROR(ckpt::CommitCheckpoint(job_.model_dir, *last_saved_));
    PS_LOG(Info) << "checkpoint " << ckpt::CheckpointDirName(step) << " marked final";
    return Status::Ok();
  }
  // A delta extends the chain last_saved_ ends, within its bounds; else a full checkpoint.
  const job::CheckpointSpec& spec = job_.checkpoint;
  delta = delta && !final && last_saved_ && last_saved_->global_step < step &&
          chain_.deltas < spec.max_deltas &&
          static_cast<double>(chain_.delta_bytes) <=
              spec.delta_max_fraction * static_cast<double>(chain_.base_bytes);
  const std::optional<int64_t> base =
      delta ? std::optional<int64_t>(last_saved_->base.value_or(last_saved_->global_step))
            : std::nullopt;
  const std::string name = ckpt::CheckpointRelPath(base.value_or(step), step);
  SetState("checkpointing");
  auto t0 = Clock::now();
  std::vector<std::future<Result<net::Reply>>> futs;
  for (const auto& p : ps_) {
    futs.push_back(p->Call(
        proto::Save{job_.model_dir, step, base.value_or(-1), delta ? last_saved_->global_step : -1},
        {}, {}, net::Millis(std::chrono::minutes(30))));
  }
  ckpt::Manifest m;
  m.global_step = step;
  m.final = final;
  m.base = base;
  if (delta) m.parent = last_saved_->global_step;
  m.num_ps = static_cast<int>(ps_.size());
  uint64_t bytes = 0;
  Status failed;  // the first ps that failed; every reply is awaited
  for (size_t p = 0; p < ps_.size(); ++p) {
    auto r = futs[p].get();
    const proto::SaveReply* reply =
        r.ok() ? std::get_if<proto::SaveReply>(&r->envelope.body) : nullptr;
    if (!failed.ok()) continue;
    if (!r.ok()) {
      failed = r.status().WithContext("checkpoint " + std::to_string(step) + " on " +
                                      ps_[p]->peer_name());
    } else if (reply == nullptr) {
      failed = ProtocolError(ps_[p]->peer_name() + " answered Save with " +
                             proto::BodyName(r->envelope.body));
    } else {
      m.shards.push_back({reply->file, reply->bytes, reply->digest});
      bytes += reply->bytes;
    }
  }
  m.extra = {{"variables", PlanJson()}, {"total_steps", job_.steps}};
  // Taken with no pack in flight (the machine saves between ranges): the position of
  // exactly the steps before `step`.
  if (auto position = DataPosition()) m.extra["data_position"] = std::move(*position);
  m.unix_time = UnixTime();
  if (failed.ok()) failed = ckpt::CommitCheckpoint(job_.model_dir, m);
  if (!failed.ok()) {
    RemoveFailedCheckpoint();
    if (delta && failed.code() == Code::kFailedPrecondition) {
      // A ps cannot write this delta (it holds no record of the parent): a full one instead.
      PS_LOG(Warning) << "delta checkpoint " << name << " not written (" << failed.message()
                      << "): saving in full";
      return SaveCheckpoint(final, false);
    }
    return failed;
  }
  last_saved_ = m;
  if (delta) {
    ++chain_.deltas;
    chain_.delta_bytes += bytes;
  } else {
    chain_ = Chain{bytes, 0, 0};
  }
  std::vector<std::string> removed;
  // The checkpoint is committed whatever happens to the older ones.
  Status kept = ckpt::ApplyMaxToKeep(job_.model_dir, job_.checkpoint.max_to_keep, &removed);
  if (!kept.ok()) PS_LOG(Warning) << "max_to_keep: " << kept.message();
  double sec = std::chrono::duration<double>(Clock::now() - t0).count();
  PS_LOG(Info) << (delta ? "delta checkpoint " : "checkpoint ") << name << (final ? " (final)" : "")
               << " committed: " << Fixed(bytes / 1048576.0, 1) << " MiB in " << Fixed(sec, 2)
               << " s"
               << (removed.empty() ? ""
                                   : ", deleted the oldest (max_to_keep " +
                                         std::to_string(job_.checkpoint.max_to_keep) + ")");
  WriteMetricsLine(
      {{"checkpoint",
        {{"step", step}, {"final", final}, {"delta", delta}, {"bytes", bytes}, {"seconds", sec}}}});
  std::lock_guard lock(events_mu_);
  if (events_) {
    Status st =
        obs::AddCheckpointScalars(*events_, step, sec, static_cast<int64_t>(bytes), UnixTime());
    EventsWritten(st);
  }
  return Status::Ok();
}

void Chief::RemoveFailedCheckpoint() {
  // A ps that is not connected may still be writing: its files are removed at the next
  // chief start. Otherwise no save is in progress, and what the failed one left (shards
  // of the ps tasks that succeeded, on a disk that may be full) goes now.
  for (const auto& p : ps_) {
    if (!p->health().ok()) return;
  }
  Status st = ckpt::CleanUncommitted(job_.model_dir);  // logs what it removes
  if (!st.ok()) PS_LOG(Warning) << "cannot remove the failed checkpoint's files: " << st.message();
}

namespace {
// A link that starts no pull or push once `stop` is requested (they fail Aborted); those
// already sent finish as they would.
class StoppableLink : public client::PsLink {
 public:
  StoppableLink(std::unique_ptr<client::PsLink> link, std::stop_token stop)
      : link_(std::move(link)), stop_(std::move(stop)) {}
  void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(Status, int64_t)> done) override {
    if (stop_.stop_requested()) return done(Stopped(), INT64_MAX);
    link_->Pull(std::move(req), std::move(into), std::move(done));
  }
  void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) override {
    if (stop_.stop_requested()) return done(Stopped());
    link_->Push(std::move(req), std::move(grads), std::move(done));
  }

 private:
  static Status Stopped() { return Aborted("stopped"); }
  std::unique_ptr<client::PsLink> link_;
  std::stop_token stop_;
};
}  // namespace

Status Chief::FinalEvaluation(std::stop_token stop) {
  SetState("evaluating");
  PS_ASSIGN_OR_RETURN(auto model, model::BuildModel(job_.model, "job.model"));
  std::vector<std::unique_ptr<client::PsLink>> links;
  for (const auto& p : ps_)
    links.push_back(std::make_unique<StoppableLink>(client::RemotePsLink(p), stop));
  PS_ASSIGN_OR_RETURN(auto fetcher, client::ParamFetcher::Create(plan_, std::move(links)));
  PS_ASSIGN_OR_RETURN(scoring::EvalMetrics m,
                      scoring::Evaluate(job_, job_.eval_data, *model, *fetcher));
  PS_LOG(Info) << "final evaluation at step " << global_step_ << " on " << m.examples
               << " examples: accuracy " << Fixed(m.accuracy, 4) << "  loss " << Fixed(m.loss, 4)
               << (m.auc >= 0 ? "  auc " + Fixed(m.auc, 4) : std::string());
  Json final_eval = {{"step", global_step_.load()}};
  final_eval.update(scoring::EvalMetricsToJson(m));  // the keys of eval/metrics.jsonl
  WriteMetricsLine({{"final_eval", final_eval}});
  // The chief's own evaluation records and TensorBoard run (the evaluator keeps its own).
  Json line = final_eval;
  line["source"] = "chief";
  line["final"] = true;
  line["unix_time"] = UnixTime();
  if (!eval_log_) eval_log_.emplace(job_.model_dir, obs::kInlineRun);
  Status logged = eval_log_->Append(line);
  if (!logged.ok()) PS_LOG(Warning) << "final evaluation results: " << logged.message();
  return Status::Ok();
}

}  // namespace ps::chief
