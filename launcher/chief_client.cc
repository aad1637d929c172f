#include "launcher/chief_client.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <ctime>
#include <optional>
#include <thread>
#include <utility>
#include <variant>

#include "launcher/status_text.h"
#include "libps/daemon/daemon.h"
#include "libps/net/auth.h"
#include "libps/net/transport.h"
#include "libps/obs/status.h"

namespace ps::launcher {

using daemon::kExitFailure;
using daemon::kExitOk;
using daemon::kExitUsage;

Result<proto::Body> CallChief(const cluster::HostPort& chief,
                              const std::optional<std::string>& secret,
                              std::chrono::milliseconds timeout, proto::Body request,
                              std::shared_ptr<net::TlsContext> tls) {
  const std::string where = chief.ToString();
  net::Runtime runtime(1);
  net::ClientOptions o;
  o.host = chief.host;
  o.port = chief.port;
  o.peer_name = "chief:0";
  o.identity = net::Identity{proto::Role::kClient, 0, 0, secret};
  o.connect_deadline = timeout;
  o.handshake_timeout = timeout;
  o.call_timeout = timeout;
  o.heartbeat_interval = std::chrono::milliseconds(0);
  o.tls = std::move(tls);
  auto client = net::Client::Connect(runtime, o);
  if (!client.ok()) {
    const std::string& m = client.status().message();
    return Status(client.status().code(), m.find(where) != std::string::npos
                                              ? m
                                              : "cannot reach the chief at " + where + ": " + m);
  }
  auto reply = (*client)->CallSync(std::move(request));
  (*client)->Close();
  if (!reply.ok()) {
    return Status(reply.status().code(), "the chief at " + where + ": " + reply.status().message());
  }
  return std::move(reply->envelope.body);
}

Result<std::optional<std::string>> LoadSecret(const std::optional<std::string>& file) {
  if (!file) return std::optional<std::string>();
  auto s = net::ReadSecretFile(*file);
  if (!s.ok()) return InvalidArgument("--secret-file: " + s.status().message());
  return std::optional<std::string>(std::move(*s));
}

namespace {

// Sends `request` to the target's chief and returns the reply when it is a `Reply`.
// Otherwise prints "pstrain <sub>: <why>" and sets *exit_code: kExitUsage for an
// unreadable secret file, kExitFailure when the call fails or the chief answers
// something else.
template <typename Reply>
std::optional<Reply> Ask(const std::string& sub, const ChiefTarget& target, proto::Body request,
                         int* exit_code) {
  auto secret = LoadSecret(target.secret_file);
  auto tls = net::TlsFromFlags(target.tls_cert, target.tls_key, target.tls_ca);
  if (!secret.ok() || !tls.ok()) {
    PrintErr("pstrain " + sub + ": " + (secret.ok() ? tls.status() : secret.status()).message());
    *exit_code = kExitUsage;
    return std::nullopt;
  }
  const std::string asked = proto::BodyName(request);
  auto reply = CallChief(target.chief, *secret, target.timeout, std::move(request), *tls);
  if (!reply.ok()) {
    PrintErr("pstrain " + sub + ": " + reply.status().message());
    *exit_code = kExitFailure;
    return std::nullopt;
  }
  if (auto* r = std::get_if<Reply>(&*reply)) return std::move(*r);
  PrintErr("pstrain " + sub + ": the chief at " + target.chief.ToString() + " answered " + asked +
           " with " + proto::BodyName(*reply) + " instead of " + proto::BodyName(Reply{}));
  *exit_code = kExitFailure;
  return std::nullopt;
}

}  // namespace

int RunStop(const StopCommand& command) {
  int rc = kExitOk;
  if (!Ask<proto::Ack>("stop", command.target, proto::Stop{command.reason}, &rc)) return rc;
  std::printf(
      "pstrain stop: the chief at %s acknowledged; it stops scheduling steps, writes the "
      "final checkpoint, shuts every task down and exits\n",
      command.target.chief.ToString().c_str());
  return kExitOk;
}

namespace {

std::string LocalClock() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// --watch: polls until the chief stops answering after having answered (the job ended:
// exit 0), or never answers (exit 1, as a single `pstrain status` would).
int WatchStatus(const StatusCommand& command) {
  const bool tty = ::isatty(::fileno(stdout)) == 1;
  const auto every = std::chrono::duration<double>(*command.watch_sec);
  bool answered = false;
  for (;;) {
    const auto next = std::chrono::steady_clock::now() + every;
    int rc = kExitOk;
    std::optional<proto::ChiefStatusReply> reply;
    if (!answered) {
      reply = Ask<proto::ChiefStatusReply>("status", command.target, proto::GetStatus{}, &rc);
      if (!reply) return rc;
    } else {
      auto secret = LoadSecret(command.target.secret_file);
      auto tls =
          net::TlsFromFlags(command.target.tls_cert, command.target.tls_key, command.target.tls_ca);
      if (!secret.ok() || !tls.ok()) return kExitUsage;
      auto r = CallChief(command.target.chief, *secret, command.target.timeout, proto::GetStatus{},
                         *tls);
      if (r.ok()) {
        if (auto* s = std::get_if<proto::ChiefStatusReply>(&*r)) reply = std::move(*s);
      }
      if (!reply) {
        std::printf("%s the chief at %s no longer answers: the job has ended (%s)\n",
                    LocalClock().c_str(), command.target.chief.ToString().c_str(),
                    r.ok() ? "unexpected reply" : r.status().message().c_str());
        std::fflush(stdout);
        return kExitOk;
      }
    }
    answered = true;
    const std::string text = tty ? WatchScreen(reply->status, command.target.chief.ToString(),
                                               *command.watch_sec, LocalClock())
                                 : WatchLines(reply->status, LocalClock());
    std::fwrite(text.data(), 1, text.size(), stdout);
    std::fflush(stdout);
    std::this_thread::sleep_until(next);
  }
}

}  // namespace

int RunStatus(const StatusCommand& command) {
  if (command.watch_sec) return WatchStatus(command);
  int rc = kExitOk;
  auto reply = Ask<proto::ChiefStatusReply>("status", command.target, proto::GetStatus{}, &rc);
  if (!reply) return rc;
  if (command.json) {
    std::printf(
        "%s\n",
        obs::ToJson(reply->status).dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    return kExitOk;
  }
  const std::string text = FormatStatus(reply->status);
  std::fwrite(text.data(), 1, text.size(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace ps::launcher
