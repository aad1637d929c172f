// SIGHUP for pstrain-serve: "reload the model config". A handler that only writes to a
// self-pipe (so it works on whichever thread the signal lands) and a thread that calls
// on_hangup once per signal (signals that arrive together may be merged into one call).
#pragma once

#include <functional>
#include <thread>

namespace ps::serve {

class HangupWatcher {
 public:
  // Installs the handler; one per process. Calls on_hangup on a thread of its own until
  // destroyed (then SIGHUP takes its default action again).
  explicit HangupWatcher(std::function<void()> on_hangup);
  ~HangupWatcher();
  HangupWatcher(const HangupWatcher&) = delete;
  HangupWatcher& operator=(const HangupWatcher&) = delete;

 private:
  int read_fd_ = -1;
  int wake_fd_ = -1;
  std::thread thread_;
};

}  // namespace ps::serve
