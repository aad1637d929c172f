// train_data.follow: the follower thread, which appends the files that arrive to the
// shard queue, and the data lag (a file's arrival to its last record trained).
#include <algorithm>

#include "libps/chief/shell.h"
#include "libps/core/log.h"
#include "libps/core/text.h"

namespace ps::chief {

void Chief::StartFollowing() {
  if (!follower_ || follow_thread_.joinable()) return;
  follow_thread_ = std::thread([this] { FollowLoop(); });
}

void Chief::StopFollowing() {
  {
    std::lock_guard lock(follow_mu_);
    follow_stop_ = true;
    follow_cv_.notify_all();
  }
  if (follow_thread_.joinable()) follow_thread_.join();
}

void Chief::FollowLoop() {
  std::unique_lock lock(follow_mu_);
  const auto poll = std::chrono::duration_cast<Clock::duration>(
      std::chrono::duration<double>(follower_->options().poll_seconds));
  while (!follow_stop_) {
    auto arrived = follower_->Scan(UnixTime());
    if (!arrived.ok()) {
      PS_LOG(Warning) << "job.train_data.follow: " << arrived.status().message()
                      << " (looked for again in " << Fixed(follower_->options().poll_seconds, 1)
                      << " s)";
    } else if (follower_->matched() == 0 && !warned_no_match_) {
      warned_no_match_ = true;
      PS_LOG(Warning) << "job.train_data.files: no file matches yet; waiting for files to arrive";
    }
    int64_t files = 0, skipped = 0;
    if (arrived.ok()) {
      if (follower_->matched() > 0) warned_no_match_ = false;
      for (const data::Arrival& a : *arrived) {
        for (const std::string& file : a.files) {
          auto shards = data::MakeShards({file}, follow_text_, follow_shard_bytes_);
          if (!shards.ok()) {
            // Gone (or unreadable) between the listing and the stat: it is not taken.
            PS_LOG(Warning) << "job.train_data.follow: " << shards.status().message()
                            << ": skipped";
            ++skipped;
            continue;
          }
          std::lock_guard data(data_mu_);
          shard_queue_->Append(file, a.arrival, std::move(*shards));
          ++files;
        }
      }
    }
    if (files > 0) {
      int64_t waiting = 0;
      {
        std::lock_guard data(data_mu_);
        waiting = shard_queue_->files_waiting();
      }
      PS_LOG(Info) << "job.train_data.follow: " << files << " new file(s) to train (" << waiting
                   << " waiting" << (skipped > 0 ? ", " + std::to_string(skipped) + " skipped" : "")
                   << ")";
      std::lock_guard chief(mu_);
      if (coordinator_) coordinator_->Wake();
    }
    follow_cv_.wait_for(lock, poll, [this] { return follow_stop_; });
  }
}

bool Chief::DataReady() {
  std::lock_guard lock(data_mu_);
  return shard_queue_->CanTake();
}

void Chief::NoteFilesDone() {
  const auto done = shard_queue_->TakeFilesDone();
  if (done.empty()) return;
  const double now = UnixTime();
  for (double arrival : done) data_lag_sec_ = std::max(0.0, now - arrival);
  if (shard_queue_->files_waiting() == 0) {
    PS_LOG(Info) << "job.train_data.follow: " << shard_queue_->files_done()
                 << " file(s) followed are trained, none waiting (data lag of the last "
                 << Fixed(data_lag_sec_, 1) << " s)";
  }
}

std::optional<Chief::FollowFigures> Chief::FollowNow() {
  std::lock_guard lock(data_mu_);
  if (!shard_queue_ || !shard_queue_->options().follow) return std::nullopt;
  return FollowFigures{shard_queue_->files_done(), shard_queue_->files_waiting(), data_lag_sec_};
}

}  // namespace ps::chief
