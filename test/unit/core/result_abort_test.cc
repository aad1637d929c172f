// Result::value(), * and -> on an error abort with a message naming the error, in every
// build type: this test runs in the release build (NDEBUG, where assert() is compiled
// out). Each case runs in a forked child, whose exit and stderr the parent checks.
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <functional>
#include <string>
#include <utility>

#include "libps/core/status.h"

namespace {

struct Child {
  int wait_status = 0;
  std::string err;  // what it wrote to stderr
  bool aborted() const { return WIFSIGNALED(wait_status) && WTERMSIG(wait_status) == SIGABRT; }
  bool exited_0() const { return WIFEXITED(wait_status) && WEXITSTATUS(wait_status) == 0; }
};

// Runs `body` in a child process (no core file) that exits 0 if body returns.
Child RunInChild(const std::function<void()>& body) {
  int fds[2];
  REQUIRE(::pipe(fds) == 0);
  std::fflush(nullptr);
  pid_t pid = ::fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    rlimit no_core{0, 0};
    ::setrlimit(RLIMIT_CORE, &no_core);
    // The abort under test is the child's end: Catch2's fatal-signal handler (not
    // async-signal-safe) must not run on it.
    ::signal(SIGABRT, SIG_DFL);
    ::dup2(fds[1], STDERR_FILENO);
    ::close(fds[0]);
    ::close(fds[1]);
    body();
    ::_exit(0);
  }
  ::close(fds[1]);
  Child c;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof buf)) > 0;)
    c.err.append(buf, static_cast<size_t>(n));
  ::close(fds[0]);
  REQUIRE(::waitpid(pid, &c.wait_status, 0) == pid);
  return c;
}

struct Pair {
  int a = 0;
};

ps::Result<Pair> Make(bool ok) {
  if (!ok) return ps::NotFound("model_dir/ckpt-7: no MANIFEST");
  return Pair{3};
}

const char* const kMessage =
    "pstrain: internal error: value() of a Result holding an error: NotFound: model_dir/ckpt-7: no MANIFEST\n";

}  // namespace

TEST_CASE("Result: value, * and -> of a value do not abort") {
  Child c = RunInChild([] {
    auto r = Make(true);
    const auto& cr = r;
    if (r.value().a + (*r).a + r->a + cr.value().a + (*cr).a + cr->a + Make(true).value().a != 21)
      ::_exit(3);
  });
  CHECK(c.exited_0());
  CHECK(c.err.empty());
}

TEST_CASE("Result: value, * and -> of an error abort naming the error") {
#ifdef NDEBUG
  INFO("release build: assert() is compiled out");
#endif
  const std::pair<const char*, std::function<void()>> cases[] = {
      {"value() &",
       [] {
         volatile int a = Make(false).value().a;
         (void)a;
       }},
      {"value() &",
       [] {
         auto r = Make(false);
         volatile int a = r.value().a;
         (void)a;
       }},
      {"value() const&",
       [] {
         const auto r = Make(false);
         volatile int a = r.value().a;
         (void)a;
       }},
      {"value() &&",
       [] {
         auto r = Make(false);
         Pair p = std::move(r).value();
         volatile int a = p.a;
         (void)a;
       }},
      {"operator*",
       [] {
         auto r = Make(false);
         volatile int a = (*r).a;
         (void)a;
       }},
      {"operator* const",
       [] {
         const auto r = Make(false);
         volatile int a = (*r).a;
         (void)a;
       }},
      {"operator->",
       [] {
         auto r = Make(false);
         volatile int a = r->a;
         (void)a;
       }},
      {"operator-> const",
       [] {
         const auto r = Make(false);
         volatile int a = r->a;
         (void)a;
       }},
  };
  for (const auto& [name, body] : cases) {
    INFO(name);
    Child c = RunInChild(body);
    CHECK(c.aborted());
    CHECK(c.err == kMessage);
  }
}

TEST_CASE("Result: constructed from an OK status aborts") {
  Child c = RunInChild([] {
    ps::Result<int> r(ps::Status::Ok());
    (void)r;
  });
  CHECK(c.aborted());
  CHECK(c.err.rfind("pstrain: internal assertion failed: Result constructed from an OK status at ",
                    0) == 0);
}
