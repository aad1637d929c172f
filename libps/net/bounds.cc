#include "libps/net/bounds.h"

#include <vector>

namespace ps::net {

uint64_t PayloadBudget::in_use() const {
  std::lock_guard lock(mu_);
  return in_use_;
}

size_t PayloadBudget::waiters() const {
  std::lock_guard lock(mu_);
  return waiting_.size();
}

bool PayloadBudget::Acquire(uint64_t bytes, std::function<void()> on_grant, uint64_t* ticket) {
  std::lock_guard lock(mu_);
  if (waiting_.empty() && in_use_ + bytes <= capacity_) {
    in_use_ += bytes;
    return true;
  }
  *ticket = next_ticket_++;
  waiting_.push_back(Waiter{*ticket, bytes, std::move(on_grant)});
  return false;
}

bool PayloadBudget::Cancel(uint64_t ticket) {
  std::vector<std::function<void()>> granted;  // a removed head may let the next ones in
  bool was_queued = false;
  {
    std::lock_guard lock(mu_);
    for (auto it = waiting_.begin(); it != waiting_.end(); ++it) {
      if (it->ticket != ticket) continue;
      waiting_.erase(it);
      was_queued = true;
      break;
    }
    while (!waiting_.empty() && in_use_ + waiting_.front().bytes <= capacity_) {
      in_use_ += waiting_.front().bytes;
      granted.push_back(std::move(waiting_.front().on_grant));
      waiting_.pop_front();
    }
  }
  for (auto& g : granted) g();
  return was_queued;
}

void PayloadBudget::Release(uint64_t bytes) {
  std::vector<std::function<void()>> granted;
  {
    std::lock_guard lock(mu_);
    in_use_ -= std::min(bytes, in_use_);
    while (!waiting_.empty() && in_use_ + waiting_.front().bytes <= capacity_) {
      in_use_ += waiting_.front().bytes;
      granted.push_back(std::move(waiting_.front().on_grant));
      waiting_.pop_front();
    }
  }
  for (auto& g : granted) g();
}

std::unique_ptr<BufferLease> PayloadBudget::Lease(uint64_t bytes) {
  struct Held : BufferLease {
    std::shared_ptr<PayloadBudget> budget;
    uint64_t bytes;
    Held(std::shared_ptr<PayloadBudget> b, uint64_t n) : budget(std::move(b)), bytes(n) {}
    ~Held() override { budget->Release(bytes); }
  };
  return std::make_unique<Held>(shared_from_this(), bytes);
}

bool LogLimiter::Allow(const std::string& key, Clock::time_point now, uint64_t* suppressed) {
  std::lock_guard lock(mu_);
  auto it = entries_.find(key);
  if (it == entries_.end()) {
    if (entries_.size() >= max_keys_) {
      std::erase_if(entries_, [&](const auto& e) { return now - e.second.last >= interval_; });
    }
    // Still full: every new address shares the slot of the empty key.
    const std::string& slot = entries_.size() >= max_keys_ ? std::string() : key;
    it = entries_.find(slot);
    if (it == entries_.end()) {
      *suppressed = 0;
      entries_.emplace(slot, Entry{now, 0});
      return true;
    }
  }
  Entry& e = it->second;
  if (now - e.last < interval_) {
    ++e.suppressed;
    return false;
  }
  *suppressed = e.suppressed;
  e = Entry{now, 0};
  return true;
}

}  // namespace ps::net
