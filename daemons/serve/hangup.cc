#include "daemons/serve/hangup.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>

namespace ps::serve {

namespace {

std::atomic<int> g_hangup_pipe{-1};  // the write end (-1: none)

extern "C" void WriteHangupToPipe(int) {
  const int saved = errno;
  const unsigned char b = 1;
  (void)!::write(g_hangup_pipe.load(), &b, 1);
  errno = saved;
}

void SetHandler(void (*handler)(int)) {
  struct sigaction sa {};
  sa.sa_handler = handler;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  ::sigaction(SIGHUP, &sa, nullptr);
}

}  // namespace

HangupWatcher::HangupWatcher(std::function<void()> on_hangup) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC | O_NONBLOCK) != 0) return;
  read_fd_ = fds[0];
  g_hangup_pipe.store(fds[1]);
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC);
  SetHandler(WriteHangupToPipe);
  thread_ = std::thread([this, on_hangup = std::move(on_hangup)] {
    for (;;) {
      pollfd fds[2] = {{read_fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
      if (::poll(fds, 2, -1) < 0) continue;
      if (fds[1].revents != 0) return;
      unsigned char buf[64];
      if (fds[0].revents != 0 && ::read(read_fd_, buf, sizeof buf) > 0) on_hangup();
    }
  });
}

HangupWatcher::~HangupWatcher() {
  if (thread_.joinable()) {
    const uint64_t one = 1;
    (void)!::write(wake_fd_, &one, sizeof one);
    thread_.join();
  }
  SetHandler(SIG_DFL);
  const int w = g_hangup_pipe.exchange(-1);
  if (w >= 0) ::close(w);
  if (read_fd_ >= 0) ::close(read_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

}  // namespace ps::serve
