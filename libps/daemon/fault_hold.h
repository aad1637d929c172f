// A testing hook of the ps and the worker: holds one kind of request unanswered, so that
// a test can catch the chief in the middle of what that request is part of (a restore, a
// checkpoint, an evaluation) without sleeping.
//
//   PSTRAIN_FAULT_HOLD="<Body>[ from <role>][ nth <n>]"   e.g. "Restore", "Pull from chief",
//                                                         "Save nth 2"
//   PSTRAIN_FAULT_RELEASE_FILE=<path>                     optional
//
// The n-th (default: every) request whose body is <Body> (proto::BodyName), from a peer of
// <role> (proto::RoleName) when given, is held: the task logs "fault injection: holding
// <Body>" and does not handle it. Once <path> exists the held requests are handled as
// usual, in arrival order (looked for every 20 ms); without it they stay unanswered until
// the task ends. Inactive when PSTRAIN_FAULT_HOLD is unset.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "libps/core/status.h"
#include "libps/net/transport.h"

namespace ps::daemon {

class FaultHold {
 public:
  using Handler = std::function<void(net::Request, net::Responder)>;
  // Null when PSTRAIN_FAULT_HOLD is unset; InvalidArgument when it cannot be parsed.
  static Result<std::unique_ptr<FaultHold>> FromEnv(Handler handler);
  ~FaultHold();  // stops looking for the release file; requests still held are dropped

  // True when `req` is held (it was taken); false: handle it as usual.
  bool Hold(net::Request& req, net::Responder& resp);

 private:
  FaultHold(Handler handler, std::string body, std::string role, int nth, std::string release);
  void ReleaseLoop(std::stop_token stop);

  Handler handler_;
  const std::string body_, role_;
  const int nth_;  // 0: every one
  const std::string release_file_;
  std::mutex mu_;
  int seen_ = 0;                                               // guarded by mu_
  bool released_ = false;                                      // guarded by mu_
  std::vector<std::pair<net::Request, net::Responder>> held_;  // guarded by mu_
  std::jthread releaser_;                                      // last: stopped first
};

}  // namespace ps::daemon
