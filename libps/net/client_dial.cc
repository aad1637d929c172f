// Client: connecting with backoff, TLS and the Hello/secret handshake.
#include "libps/net/client_impl.h"

#include <condition_variable>
#include <mutex>
#include <stop_token>
#include <thread>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/connect.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/use_future.hpp>

#include "libps/core/log.h"
#include "libps/net/auth.h"

namespace ps::net {

using asio::use_awaitable;

awaitable<Status> Client::Impl::Attempt(Millis budget) {
  auto ex = co_await asio::this_coro::executor;
  tcp::resolver resolver(ex);
  error_code ec;
  auto results = co_await resolver.async_resolve(options.host, std::to_string(options.port),
                                                 asio::redirect_error(use_awaitable, ec));
  if (ec) co_return Unavailable("cannot resolve " + options.host + ": " + ec.message());
  conn = std::make_shared<Conn>(
      tcp::socket(ex), ConnOptions{options.limits, options.max_write_queue_bytes, 0, nullptr,
                                   nullptr, options.tls, options.caller_reads});
  auto watchdog = Watchdog(conn, budget);
  co_await asio::async_connect(conn->socket(), results, asio::redirect_error(use_awaitable, ec));
  if (ec) {
    watchdog->cancel();
    co_return Unavailable(ec == asio::error::operation_aborted ? "connect timed out"
                                                               : ec.message());
  }
  // Conn's constructor could not set this: the socket opens in async_connect.
  conn->socket().set_option(tcp::no_delay(true), ec);
  Status st = co_await conn->SecureHandshake(/*as_server=*/false);
  if (!st.ok()) st = Status(st.code(), options.peer_name + ": " + st.message());
  try {
    if (st.ok()) st = co_await Handshake();
  } catch (const boost::system::system_error& e) {
    // Under TLS 1.3 a server that rejects our certificate says so (an alert) only
    // after our side of the TLS handshake completed: we read it here.
    if (e.code().category() == asio::error::get_ssl_category()) {
      st = PermissionDenied(options.peer_name +
                            " refused the TLS connection: " + e.code().message());
    } else if (e.code() == asio::error::eof && !options.tls) {
      st = Unavailable("handshake failed: " + options.peer_name +
                       " closed the connection (does it require TLS, --tls-cert?)");
    } else {
      st = Unavailable(std::string("handshake failed: ") + e.what());
    }
  }
  watchdog->cancel();
  if (!st.ok()) conn->CloseOnStrand();
  if (st.ok()) conn->Authenticated();
  co_return st;
}

awaitable<Status> Client::Impl::Handshake() {
  const Identity& me = options.identity;
  proto::Hello hello{.version = proto::kProtocolVersion,
                     .role = me.role,
                     .task_index = me.task_index,
                     .cluster_id = me.cluster_id,
                     .nonce = RandomNonce()};
  proto::Envelope hello_env{1, false, options.generation, hello};
  co_await conn->WriteNow(hello_env);
  auto first = co_await conn->ReadFrame(nullptr);
  if (!first.ok()) co_return first.status();
  if (!first->status.ok()) co_return first->status;
  if (const auto* e = BodyAs<proto::Error>(*first)) {
    // Unavailable (too many connections) is worth retrying; anything else is final.
    Status st = StatusFromError(*e);
    Code code = st.code() == Code::kProtocol || st.code() == Code::kUnavailable
                    ? st.code()
                    : Code::kPermissionDenied;
    co_return Status(code, options.peer_name + " refused the connection: " + st.message());
  }
  const auto* reply = BodyAs<proto::HelloReply>(*first);
  if (reply == nullptr) co_return ProtocolError(options.peer_name + ": expected HelloReply");
  const proto::Hello& server = reply->identity;
  if (server.version != proto::kProtocolVersion) {
    co_return ProtocolError(options.peer_name + " speaks protocol version " +
                            std::to_string(server.version) + ", this build " +
                            std::to_string(proto::kProtocolVersion));
  }
  bool operator_tool = me.role == proto::Role::kClient && me.cluster_id == 0;
  if (!operator_tool && server.cluster_id != me.cluster_id) {
    co_return PermissionDenied(options.peer_name +
                               " belongs to a different cluster (different TF_CONFIG)");
  }
  proto::HelloProof proof;
  Status verdict;
  if (me.secret && !reply->secret_required) {
    verdict = PermissionDenied("cluster secret mismatch: " + options.peer_name +
                               " has no secret configured");
  } else if (!me.secret && reply->secret_required) {
    verdict = PermissionDenied("cluster secret mismatch: " + options.peer_name +
                               " requires a cluster secret (--secret-file)");
  } else if (me.secret) {
    auto want = Proof(*me.secret, "pstrain-server", hello.nonce, server.nonce, me.cluster_id);
    if (!ProofEquals(want, reply->proof)) {
      verdict = PermissionDenied("cluster secret mismatch: " + options.peer_name +
                                 " did not prove the secret");
    }
    proof.proof = Proof(*me.secret, "pstrain-client", hello.nonce, server.nonce, me.cluster_id);
  }
  if (!verdict.ok()) {
    proto::Envelope err = ErrorEnvelope(2, verdict);
    co_await conn->WriteNow(err);
    co_return verdict;
  }
  proto::Envelope proof_env{2, false, options.generation, proof};
  co_await conn->WriteNow(proof_env);
  auto second = co_await conn->ReadFrame(nullptr);
  if (!second.ok()) co_return second.status();
  if (!second->status.ok()) co_return second->status;
  if (const auto* e = BodyAs<proto::Error>(*second)) {
    co_return PermissionDenied(options.peer_name +
                               " refused the connection: " + StatusFromError(*e).message());
  }
  if (BodyAs<proto::Ack>(*second) == nullptr)
    co_return ProtocolError(options.peer_name + ": expected Ack");
  co_return Status::Ok();
}

Result<std::shared_ptr<Client>> Client::Connect(Runtime& runtime, const ClientOptions& options) {
  const auto deadline = Clock::now() + options.connect_deadline;
  Millis backoff = options.backoff_initial;
  const std::string who =
      options.peer_name + " at " + options.host + ":" + std::to_string(options.port);
  const std::stop_token stop = options.stop;
  int attempts = 0;
  auto aborted = [&] {
    return Aborted("stopped while connecting to " + who + " (" + std::to_string(attempts) +
                   (attempts == 1 ? " attempt)" : " attempts)"));
  };
  std::mutex wait_mu;
  std::condition_variable_any wait_cv;
  for (;;) {
    if (stop.stop_requested()) return aborted();
    ++attempts;
    auto impl = std::make_shared<Impl>(runtime, options);
    auto remaining = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    Millis budget = std::max(Millis{100}, std::min(options.handshake_timeout, remaining));
    auto strand = asio::make_strand(runtime.impl().Next());
    std::future<Status> fut = asio::co_spawn(
        strand, [impl, budget] { return impl->Attempt(budget); }, asio::use_future);
    Status st;
    {
      // A stop during the attempt closes its socket: the connect or handshake ends at once.
      std::stop_callback on_stop(stop, [impl, strand] {
        asio::post(strand, [impl] {
          if (impl->conn) impl->conn->CloseOnStrand();
        });
      });
      try {
        st = fut.get();
      } catch (const std::exception& e) {
        st = Unavailable(e.what());
      }
    }
    if (st.ok() && stop.stop_requested()) {
      impl->conn->Close();
      return aborted();
    }
    if (st.ok()) {
      impl->Start();
      PS_LOG(Debug) << "connected to " << who << " after " << attempts << " attempt(s)";
      return std::shared_ptr<Client>(new Client(std::move(impl)));
    }
    if (stop.stop_requested()) return aborted();
    if (st.code() == Code::kPermissionDenied || st.code() == Code::kProtocol) return st;
    if (Clock::now() + backoff >= deadline) {
      return Unavailable("cannot reach " + who + " within " +
                         std::to_string(options.connect_deadline.count() / 1000.0).substr(0, 5) +
                         " s (" + std::to_string(attempts) + " attempts): " + st.message());
    }
    std::unique_lock lock(wait_mu);
    wait_cv.wait_for(lock, stop, backoff, [] { return false; });
    backoff = std::min(options.backoff_max, backoff * 2);
  }
}

}  // namespace ps::net
