#include "libps/daemon/fault_hold.h"

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <sstream>

#include "libps/core/log.h"

namespace ps::daemon {

Result<std::unique_ptr<FaultHold>> FaultHold::FromEnv(Handler handler) {
  const char* spec = std::getenv("PSTRAIN_FAULT_HOLD");
  if (spec == nullptr) return std::unique_ptr<FaultHold>();
  std::istringstream in(spec);
  std::string body, word, role;
  int nth = 0;
  in >> body;
  while (in >> word) {
    if (word == "from" && in >> role) continue;
    if (word == "nth" && in >> nth && nth > 0) continue;
    return InvalidArgument(std::string("PSTRAIN_FAULT_HOLD: cannot parse \"") + spec + "\"");
  }
  if (body.empty()) return InvalidArgument("PSTRAIN_FAULT_HOLD: no request name");
  const char* release = std::getenv("PSTRAIN_FAULT_RELEASE_FILE");
  return std::unique_ptr<FaultHold>(
      new FaultHold(std::move(handler), body, role, nth, release ? release : ""));
}

FaultHold::FaultHold(Handler handler, std::string body, std::string role, int nth,
                     std::string release)
    : handler_(std::move(handler)),
      body_(std::move(body)),
      role_(std::move(role)),
      nth_(nth),
      release_file_(std::move(release)) {
  if (!release_file_.empty())
    releaser_ = std::jthread([this](std::stop_token stop) { ReleaseLoop(stop); });
}

FaultHold::~FaultHold() {
  if (releaser_.joinable()) {
    releaser_.request_stop();
    releaser_.join();
  }
}

bool FaultHold::Hold(net::Request& req, net::Responder& resp) {
  if (body_ != proto::BodyName(req.envelope.body)) return false;
  if (!role_.empty() && role_ != proto::RoleName(req.peer.role)) return false;
  std::lock_guard lock(mu_);
  if (released_) return false;
  ++seen_;
  if (nth_ > 0 && seen_ != nth_) return false;
  PS_LOG(Warning) << "fault injection: holding " << body_ << " from " << req.peer.Name();
  held_.emplace_back(std::move(req), std::move(resp));
  return true;
}

void FaultHold::ReleaseLoop(std::stop_token stop) {
  std::mutex mu;
  std::condition_variable_any cv;
  for (;;) {
    {
      std::unique_lock lock(mu);
      if (cv.wait_for(lock, stop, std::chrono::milliseconds(20), [] { return false; }) ||
          stop.stop_requested())
        return;
    }
    if (!std::filesystem::exists(release_file_)) continue;
    std::vector<std::pair<net::Request, net::Responder>> held;
    {
      std::lock_guard lock(mu_);
      released_ = true;
      held.swap(held_);
    }
    PS_LOG(Warning) << "fault injection: releasing " << held.size() << " held " << body_;
    for (auto& [req, resp] : held) handler_(std::move(req), std::move(resp));
    return;
  }
}

}  // namespace ps::daemon
