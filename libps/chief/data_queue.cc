#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/core/text.h"
#include "libps/data/lease_reader.h"

namespace ps::chief {

namespace {
// job.epochs with streamed data and no job.steps: the job's steps are not known before
// the data has been read; the machine's bound until the data ends it (ev::DataEnd).
constexpr int64_t kStepsUntilDataEnds = int64_t{1} << 50;
}  // namespace

Status Chief::PlanStreamed() {
  PS_ASSIGN_OR_RETURN(
      data::StreamedData d,
      data::PlanStreamedData(job_.train_data, "job.train_data", job_.base_dir, true));
  data::ShardQueue::Options o;
  o.seed = job_.seed;
  o.shuffle = d.options.shuffle_buffer > 1;
  o.epochs = job_.epochs;
  if (d.follow) {
    o.follow = true;
    follow_text_ = d.text;
    follow_shard_bytes_ = d.shard_bytes;
    {
      std::lock_guard lock(follow_mu_);
      follower_.emplace(d.patterns, *d.follow);
    }
    std::lock_guard lock(data_mu_);
    shard_queue_.emplace(std::move(o));
    if (job_.steps == 0) {
      follow_endless_ = true;
      job_.steps = kStepsUntilDataEnds;
      job_.raw["steps"] = job_.steps;  // the workers parse the job: it needs steps
    }
    std::string patterns;
    for (const auto& p : d.patterns) patterns += (patterns.empty() ? "" : ", ") + p;
    PS_LOG(Info) << "job.train_data: following " << patterns << " (a file is taken "
                 << (d.follow->done_marker.empty()
                         ? "once unchanged for " + Fixed(d.follow->quiet_seconds, 0) + " s"
                         : "when its directory holds " + d.follow->done_marker)
                 << "; looked for every " << Fixed(d.follow->poll_seconds, 1) << " s)";
    return Status::Ok();
  }
  o.shards = d.shards;
  o.files = d.files;
  data_files_ = std::move(d.files);
  data_shards_ = std::move(d.shards);
  {
    std::lock_guard lock(data_mu_);
    shard_queue_.emplace(std::move(o));
  }
  PS_LOG(Info) << "job.train_data: " << data_files_.size() << " file(s) in " << data_shards_.size()
               << " shard(s), leased to the workers"
               << (job_.epochs ? "; " + std::to_string(*job_.epochs) + " epoch(s)" : "");
  if (job_.epochs && job_.steps == 0) {
    steps_from_data_ = true;
    job_.steps = kStepsUntilDataEnds;
    job_.raw["steps"] = job_.steps;  // the workers parse the job: it needs steps
  }
  return Status::Ok();
}

proto::DataLease Chief::LeaseFor(int worker, int count) {
  std::lock_guard lock(data_mu_);
  proto::DataLease out;
  out.seq = -1;  // take 0: nothing left to give out, the pack trains nothing
  auto l = shard_queue_->Take(worker, int64_t{count} * job_.batch_size);
  if (!l) return out;
  const data::Shard& s = shard_queue_->shard(l->shard);
  out = proto::DataLease{l->seq,         shard_queue_->file(s.file),
                         s.begin,        s.end,
                         s.lines,        l->base_byte,
                         l->base_record, l->start,
                         l->take,        l->generation};
  return out;
}

void Chief::LeaseDone(const proto::DataLease& lease, const proto::RunStepsReply* reply) {
  if (lease.seq < 0) return;
  std::lock_guard lock(data_mu_);
  data::Lease l{lease.seq,   0,          lease.base_byte, lease.base_record,
                lease.start, lease.take, lease.generation};
  // The queue knows the shard by the sequence number; the lease's shard index is not used.
  if (reply == nullptr) {
    shard_queue_->Release(l);
    return;
  }
  shard_queue_->Ack(l, data::PackEnd{reply->data_records, reply->data_end_byte, reply->data_end,
                                     reply->data_total});
  if (follower_) NoteFilesDone();
}

std::optional<Json> Chief::DataPosition() {
  std::lock_guard follow(follow_mu_);
  std::lock_guard lock(data_mu_);
  if (!shard_queue_) return std::nullopt;
  Json position = shard_queue_->Save();
  if (follower_) position["followed"] = follower_->Save();
  return position;
}

void Chief::RestoreDataPosition(const ckpt::Manifest* manifest) {
  std::lock_guard follow(follow_mu_);
  std::lock_guard lock(data_mu_);
  if (!shard_queue_) return;
  if (follower_) follower_->Reset();  // as the queue: restored below, or from the start
  if (manifest == nullptr) {
    shard_queue_->Reset();
    return;
  }
  auto it = manifest->extra.find("data_position");
  if (it == manifest->extra.end()) {
    PS_LOG(Warning) << "the checkpoint of step " << manifest->global_step
                    << " holds no data position: the streamed training data starts again at "
                       "its first epoch";
    shard_queue_->Reset();
    return;
  }
  Status st = shard_queue_->Restore(*it);
  if (st.ok() && follower_) {
    st = it->contains("followed")
             ? follower_->Restore(it->at("followed"))
             : InvalidArgument("the data position holds no record of the files followed");
  }
  if (!st.ok()) {
    PS_LOG(Warning) << "the checkpoint of step " << manifest->global_step << ": " << st.message()
                    << ": the streamed training data starts again at its first epoch";
    shard_queue_->Reset();
    return;
  }
  if (follower_) {
    PS_LOG(Info) << "data position restored: " << shard_queue_->files_done()
                 << " file(s) followed trained, " << shard_queue_->files_waiting() << " waiting, "
                 << follower_->recorded() << " in the record of what was taken";
    return;
  }
  PS_LOG(Info) << "data position restored: epoch " << Fixed(shard_queue_->EpochsDone(), 2)
               << " done";
}

bool Chief::DataGivenOut() {
  std::lock_guard lock(data_mu_);
  return shard_queue_ && shard_queue_->AllGivenOut();
}

Status Chief::DataHoldsRecords() {
  std::lock_guard lock(data_mu_);
  if (!shard_queue_ || shard_queue_->EpochsDone() < 1 || shard_queue_->records_counted() > 0)
    return Status::Ok();
  return InvalidArgument("job.train_data: its " + std::to_string(data_files_.size()) +
                         " file(s) hold no record");
}

std::optional<double> Chief::EpochNow() {
  if (order_) return order_->EpochsAt(global_step_);
  std::lock_guard lock(data_mu_);
  if (shard_queue_ && !shard_queue_->options().follow) return shard_queue_->EpochsDone();
  return std::nullopt;
}

}  // namespace ps::chief
