// Server and Responder: accept, handshake, bounded reading, the handler pool.
#include "libps/net/conn.h"

#include <condition_variable>
#include <cstdio>
#include <future>
#include <mutex>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>

#include "libps/core/log.h"
#include "libps/net/auth.h"

namespace ps::net {

using asio::use_awaitable;

// ---------------------------------------------------------------- Responder

struct Responder::State {
  std::weak_ptr<Conn> conn;
  uint64_t request_id = 0;
  std::atomic<bool> done{false};
};

Responder::~Responder() {
  if (state_ && !state_->done.load()) Fail(Internal("request dropped without a reply"));
}

void Responder::Reply(proto::Body body, OutPayload payload) {
  if (!state_ || state_->done.exchange(true)) return;
  if (auto c = state_->conn.lock()) {
    c->Send(proto::Envelope{state_->request_id, true, 0, std::move(body)}, std::move(payload),
            false,
            /*ends_request=*/true);
  }
}

std::optional<DirectReply> Responder::BeginDirect(const proto::Body& body, uint64_t payload_bytes) {
  if (!state_ || state_->done.load()) return std::nullopt;
  auto c = state_->conn.lock();
  if (!c) return std::nullopt;
  auto impl = c->BeginDirect(state_->request_id, body, payload_bytes);
  if (!impl) return std::nullopt;
  state_->done = true;  // the DirectReply answers now
  return DirectReply(std::move(impl));
}

void Responder::Fail(const Status& status) {
  if (!state_ || state_->done.exchange(true)) return;
  if (auto c = state_->conn.lock())
    c->Send(ErrorEnvelope(state_->request_id, status), {}, false, /*ends_request=*/true);
}

// ---------------------------------------------------------------- Server

struct Server::Impl : std::enable_shared_from_this<Server::Impl> {
  Impl(Runtime& rt, ServerOptions o, RequestHandler h)
      : options(std::move(o)),
        handler(std::move(h)),
        runtime(rt.impl()),
        acceptor(asio::make_strand(runtime.Next())),
        pool(static_cast<size_t>(std::max(1, options.handler_threads))),
        budget(std::make_shared<PayloadBudget>(options.payload_budget_bytes)) {}

  ServerOptions options;
  RequestHandler handler;
  Runtime::Impl& runtime;
  tcp::acceptor acceptor;
  asio::thread_pool pool;
  std::shared_ptr<PayloadBudget> budget;
  std::shared_ptr<ConnCounters> counters = std::make_shared<ConnCounters>();
  LogLimiter strangers;  // log lines about refused or dropped peers, per IP address
  std::mutex mu;
  std::vector<std::weak_ptr<Conn>> conns;  // guarded by mu
  bool closed = false;                     // guarded by mu
  int live = 0;                            // Serve coroutines running; guarded by mu
  std::condition_variable all_gone;        // signalled when live drops to 0
  uint16_t port = 0;
  // Server::Stats counters not kept by the connections.
  std::atomic<uint64_t> requests{0}, inline_requests{0}, queued{0}, max_queued{0},
      bytes_received{0}, refused{0};
  std::atomic<int> goodbyes{0};  // refused connections still being told why
  // steady_clock ticks of the last frame from a chief (Start's time until one arrives).
  std::atomic<int64_t> last_chief_frame{
      std::chrono::steady_clock::now().time_since_epoch().count()};

  // A warning about a peer that has not passed the handshake, at most one per address
  // per 10 s.
  void LogStranger(const std::string& host, const std::string& text) {
    uint64_t suppressed = 0;
    if (!strangers.Allow(host, Clock::now(), &suppressed)) return;
    PS_LOG(Warning) << text
                    << (suppressed > 0 ? " (" + std::to_string(suppressed) + " similar from " +
                                             host + " not logged)"
                                       : std::string());
  }

  ConnOptions ForConn() const {
    return ConnOptions{
        options.limits, options.max_write_queue_bytes, options.max_in_flight, budget, counters,
        options.tls};
  }

  awaitable<void> AcceptLoop() {
    auto self = shared_from_this();
    asio::steady_timer backoff(acceptor.get_executor());
    for (;;) {
      error_code ec;
      // A strand of an io_context itself (Conn::OnStrand recognises it), the I/O threads
      // taking connections in turn.
      tcp::socket socket = co_await acceptor.async_accept(asio::make_strand(runtime.Next()),
                                                          asio::redirect_error(use_awaitable, ec));
      if (ec) {
        if (ec == asio::error::operation_aborted || !acceptor.is_open()) co_return;
        LogStranger("", "accept failed: " + ec.message());
        // Out of file descriptors (or alike): retrying at once would spin.
        backoff.expires_after(std::chrono::milliseconds(100));
        co_await backoff.async_wait(asio::redirect_error(use_awaitable, ec));
        continue;
      }
      std::shared_ptr<Conn> conn;
      {
        std::lock_guard lock(mu);
        if (closed) co_return;
        if (live < options.max_connections) {
          conn = std::make_shared<Conn>(std::move(socket), ForConn());
          std::erase_if(conns, [](const auto& w) { return w.expired(); });
          conns.push_back(conn);
          ++live;
        }
      }
      if (conn) {
        asio::co_spawn(
            conn->executor(), [self, conn] { return self->Serve(conn); }, asio::detached);
        continue;
      }
      refused.fetch_add(1);
      error_code ignored;
      // NOLINTNEXTLINE(bugprone-use-after-move): moved only into an admitted Conn (continued)
      auto ep = socket.remote_endpoint(ignored);
      const std::string host = ignored ? "?" : ep.address().to_string();
      const Status why = Unavailable("too many connections (--max-connections " +
                                     std::to_string(options.max_connections) + ")");
      LogStranger(host, "refused connection from " + host + ":" + std::to_string(ep.port()) + ": " +
                            why.message());
      // A TLS peer could not read a plain goodbye: it is cut off like the excess ones.
      if (options.tls || goodbyes.fetch_add(1) >= kMaxGoodbyes) {
        if (!options.tls) goodbyes.fetch_sub(1);
        socket.close(ignored);
        continue;
      }
      auto s = std::make_shared<tcp::socket>(std::move(socket));
      asio::co_spawn(
          s->get_executor(), [self, s, why] { return self->Goodbye(s, why); }, asio::detached);
    }
  }

  // Tells a refused peer why, then closes once it hung up (or after 1 s): closing with
  // its Hello unread would reset the connection before it could read the reason.
  static constexpr int kMaxGoodbyes = 16;  // more refused peers at once are cut off silently
  awaitable<void> Goodbye(std::shared_ptr<tcp::socket> s, Status why) {
    auto self = shared_from_this();
    auto env = proto::Encode(ErrorEnvelope(1, why));  // 1: the id of the client's Hello
    auto header = EncodeHeader({static_cast<uint32_t>(env.size()), 0});
    std::array<asio::const_buffer, 2> bufs{asio::buffer(header), asio::buffer(env)};
    asio::steady_timer deadline(s->get_executor());
    deadline.expires_after(std::chrono::seconds(1));
    deadline.async_wait([s](error_code ec) {
      if (!ec) s->close(ec);
    });
    error_code ec;
    co_await asio::async_write(*s, bufs, asio::redirect_error(use_awaitable, ec));
    if (!ec) s->shutdown(tcp::socket::shutdown_send, ec);
    std::array<char, 4096> scratch;
    while (!ec)
      co_await s->async_read_some(asio::buffer(scratch), asio::redirect_error(use_awaitable, ec));
    deadline.cancel();
    s->close(ec);
    goodbyes.fetch_sub(1);
  }

  // Verifies a client's Hello; replies and proves; reads its proof. Returns the peer.
  awaitable<Result<PeerInfo>> Handshake(const std::shared_ptr<Conn>& c) {
    const Identity& me = options.identity;
    auto first = co_await c->ReadFrame(nullptr);
    if (!first.ok()) co_return first.status();
    if (!first->status.ok()) co_return first->status;
    const auto* hello = BodyAs<proto::Hello>(*first);
    if (hello == nullptr) {
      Status st =
          ProtocolError("expected Hello, got " + std::string(proto::BodyName(first->env.body)));
      proto::Envelope err = ErrorEnvelope(first->env.request_id, st);
      co_await c->WriteNow(err);
      co_return st;
    }
    PeerInfo peer{hello->role, hello->task_index, c->address()};
    // Checks that fail send the refusal as an Error frame, then close.
    Status refusal;
    std::string verdict_text;
    if (hello->version != proto::kProtocolVersion) {
      refusal = ProtocolError("protocol version " + std::to_string(hello->version) +
                              " is not supported (this " + proto::RoleName(me.role) + " speaks " +
                              std::to_string(proto::kProtocolVersion) + ")");
    } else if (hello->nonce.size() != kNonceBytes) {
      refusal = ProtocolError("Hello nonce must be 16 bytes");
    } else if (!(hello->role == proto::Role::kClient && hello->cluster_id == 0) &&
               hello->cluster_id != me.cluster_id) {
      char buf[96];
      std::snprintf(buf, sizeof buf,
                    "cluster id mismatch: %s is in cluster %016llx, this task in %016llx",
                    peer.Name().c_str(), static_cast<unsigned long long>(hello->cluster_id),
                    static_cast<unsigned long long>(me.cluster_id));
      refusal = PermissionDenied(std::string(buf) + " (different TF_CONFIG cluster)");
    } else if (options.admit) {
      refusal = options.admit(*hello);
    }
    if (!refusal.ok()) {
      proto::Envelope err = ErrorEnvelope(first->env.request_id, refusal);
      co_await c->WriteNow(err);
      co_return refusal;
    }
    proto::HelloReply reply;
    reply.identity.role = me.role;
    reply.identity.task_index = me.task_index;
    reply.identity.cluster_id = me.cluster_id;
    reply.identity.nonce = RandomNonce();
    reply.secret_required = me.secret.has_value();
    if (me.secret) {
      reply.proof = Proof(*me.secret, "pstrain-server", hello->nonce, reply.identity.nonce,
                          hello->cluster_id);
    }
    proto::Envelope reply_env{first->env.request_id, true, 0, reply};
    co_await c->WriteNow(reply_env);
    auto second = co_await c->ReadFrame(nullptr);
    if (!second.ok()) co_return second.status();
    if (!second->status.ok()) co_return second->status;
    if (const auto* e = BodyAs<proto::Error>(*second)) {
      co_return StatusFromError(*e).WithContext(peer.Name() + " refused us");
    }
    const auto* proof = BodyAs<proto::HelloProof>(*second);
    if (proof == nullptr) {
      refusal = ProtocolError("expected HelloProof");
    } else if (me.secret) {
      auto want = Proof(*me.secret, "pstrain-client", hello->nonce, reply.identity.nonce,
                        hello->cluster_id);
      if (!ProofEquals(want, proof->proof)) {
        refusal = PermissionDenied("cluster secret mismatch: " + peer.Name() +
                                   " did not prove the secret");
      }
    } else if (!proof->proof.empty()) {
      refusal = PermissionDenied(std::string("cluster secret mismatch: this ") +
                                 proto::RoleName(me.role) + " has no secret configured");
    }
    if (!refusal.ok()) {
      proto::Envelope err = ErrorEnvelope(second->env.request_id, refusal);
      co_await c->WriteNow(err);
      co_return refusal;
    }
    proto::Envelope ack{second->env.request_id, true, 0, proto::Ack{}};
    co_await c->WriteNow(ack);
    co_return peer;
  }

  awaitable<void> Serve(std::shared_ptr<Conn> c) {
    auto self = shared_from_this();
    struct Leave {
      Impl* impl;
      ~Leave() {
        std::lock_guard lock(impl->mu);
        if (--impl->live == 0) impl->all_gone.notify_all();
      }
    } leave{this};
    Result<PeerInfo> peer = InvalidArgument("unset");
    try {
      auto watchdog = Watchdog(c, options.handshake_timeout);
      Status secure = co_await c->SecureHandshake(/*as_server=*/true);
      if (secure.ok()) {
        peer = co_await Handshake(c);
      } else {
        peer = secure;
      }
      watchdog->cancel();
    } catch (const boost::system::system_error& e) {
      peer = Unavailable(std::string("handshake: ") + e.what());
    }
    if (!peer.ok()) {
      LogStranger(c->host(), "refused connection from " + c->address() +
                                 " in its handshake: " + peer.status().message());
      c->CloseOnStrand();
      co_return;
    }
    PS_LOG(Debug) << "accepted " << peer->Name() << " from " << c->address();
    c->Authenticated();
    c->StartWriter();
    int bad_frames = 0;
    PayloadWatch watch;
    if (options.watch_payload) {
      watch = [this, &peer](const proto::Envelope& env,
                            uint64_t payload_bytes) -> std::shared_ptr<PayloadWatcher> {
        if (payload_bytes < options.watch_payload_min_bytes) return nullptr;
        return options.watch_payload(*peer, env, payload_bytes);
      };
    }
    try {
      while (!c->closed()) {
        co_await c->WaitReadable();
        if (c->closed()) break;
        auto frame = co_await c->ReadFrame(nullptr, watch);
        if (frame.ok()) bytes_received.fetch_add(frame->wire_bytes, std::memory_order_relaxed);
        if (peer->role == proto::Role::kChief) {
          last_chief_frame.store(std::chrono::steady_clock::now().time_since_epoch().count(),
                                 std::memory_order_relaxed);
        }
        if (!frame.ok()) {
          PS_LOG(Warning) << "closing connection of " << peer->Name() << ": "
                          << frame.status().message();
          c->Send(ErrorEnvelope(0, frame.status()), {}, /*close_after=*/true);
          co_return;
        }
        if (!frame->status.ok() || frame->env.reply) {
          Status st = frame->status.ok() ? ProtocolError("unexpected reply frame") : frame->status;
          PS_LOG(Warning) << "bad frame from " << peer->Name() << ": " << st.message();
          bool give_up = ++bad_frames > kMaxBadFrames;
          c->Send(ErrorEnvelope(frame->env.request_id, st), {}, give_up);
          if (give_up) co_return;
          continue;
        }
        if (std::holds_alternative<proto::Ping>(frame->env.body)) {
          c->Send(proto::Envelope{frame->env.request_id, true, 0, proto::Ack{}}, {});
          continue;
        }
        auto state = std::make_shared<Responder::State>();
        state->conn = c;
        state->request_id = frame->env.request_id;
        Request req{*peer, std::move(frame->env), std::move(frame->payload),
                    std::move(frame->watcher)};
        c->BeginRequest();
        requests.fetch_add(1, std::memory_order_relaxed);
        if (std::shared_ptr<void> token = options.run_inline ? options.run_inline(req) : nullptr) {
          // On this I/O thread: the reply (if given now) is written before the next read.
          inline_requests.fetch_add(1, std::memory_order_relaxed);
          handler(std::move(req), Responder(std::move(state)));
          continue;  // the token is dropped after the handler returned
        }
        const uint64_t depth = queued.fetch_add(1) + 1;
        uint64_t max = max_queued.load();
        while (depth > max && !max_queued.compare_exchange_weak(max, depth)) {}
        asio::post(pool, [self, req = std::move(req), state]() mutable {
          self->queued.fetch_sub(1);
          self->handler(std::move(req), Responder(std::move(state)));
        });
      }
    } catch (const boost::system::system_error& e) {
      PS_LOG(Debug) << "connection of " << peer->Name() << " closed: " << e.what();
    } catch (const std::bad_alloc&) {
      PS_LOG(Warning) << "out of memory reading a frame from " << peer->Name() << "; closing it";
    }
    c->CloseOnStrand();
  }
};

Result<std::unique_ptr<Server>> Server::Start(Runtime& runtime, ServerOptions options,
                                              RequestHandler handler) {
  auto impl = std::make_shared<Impl>(runtime, std::move(options), std::move(handler));
  const std::string where = impl->options.host + ":" + std::to_string(impl->options.port);
  error_code ec;
  auto addr = asio::ip::make_address(impl->options.host, ec);
  tcp::endpoint ep;
  if (ec) {
    tcp::resolver resolver(runtime.impl().Next());
    auto results = resolver.resolve(impl->options.host, std::to_string(impl->options.port), ec);
    if (ec || results.empty())
      return InvalidArgument("listen address " + where + ": cannot resolve: " + ec.message());
    ep = results.begin()->endpoint();
  } else {
    ep = tcp::endpoint(addr, impl->options.port);
  }
  impl->acceptor.open(ep.protocol(), ec);
  if (!ec) impl->acceptor.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(ep, ec);
  if (!ec) impl->acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) return Unavailable("cannot listen on " + where + ": " + ec.message());
  impl->port = impl->acceptor.local_endpoint().port();
  asio::co_spawn(
      impl->acceptor.get_executor(), [impl] { return impl->AcceptLoop(); }, asio::detached);
  return std::unique_ptr<Server>(new Server(std::move(impl)));
}

Server::~Server() { Close(); }

uint16_t Server::port() const { return impl_->port; }

std::chrono::steady_clock::time_point Server::last_chief_frame() const {
  return std::chrono::steady_clock::time_point(
      std::chrono::steady_clock::duration(impl_->last_chief_frame.load(std::memory_order_relaxed)));
}

Server::Stats Server::stats(bool reset_max) const {
  Stats s;
  s.requests = impl_->requests.load();
  s.inline_requests = impl_->inline_requests.load();
  s.queue_depth = impl_->queued.load();
  s.max_queue_depth =
      std::max(reset_max ? impl_->max_queued.exchange(s.queue_depth) : impl_->max_queued.load(),
               s.queue_depth);
  s.bytes_received = impl_->bytes_received.load();
  const ConnCounters& c = *impl_->counters;
  s.bytes_sent = c.bytes_sent.load();
  {
    std::lock_guard lock(impl_->mu);
    s.connections = static_cast<uint64_t>(impl_->live);
  }
  s.refused_connections = impl_->refused.load();
  s.paused_readers = c.paused_readers.load();
  s.budget_waiters = c.budget_waiters.load();
  s.payload_bytes = impl_->budget->in_use();
  s.write_queue_bytes = c.write_queue_bytes.load();
  s.peak_write_queue_bytes = c.peak_write_queue_bytes.load();
  s.inbound_buffer_bytes = c.inbound_buffer_bytes.load();
  return s;
}

void Server::Close() {
  std::vector<std::weak_ptr<Conn>> conns;
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->closed) return;
    impl_->closed = true;
    conns.swap(impl_->conns);
  }
  std::promise<void> done;
  asio::post(impl_->acceptor.get_executor(), [impl = impl_, &done] {
    error_code ec;
    impl->acceptor.close(ec);
    done.set_value();
  });
  done.get_future().wait();
  // Let running handlers finish and queue their replies, then flush every connection
  // (a Shutdown's Ack must reach the chief) before closing it; stragglers are cut off.
  impl_->pool.join();
  for (auto& w : conns) {
    if (auto c = w.lock()) c->CloseAfterFlush();
  }
  std::unique_lock lock(impl_->mu);
  if (!impl_->all_gone.wait_for(lock, std::chrono::seconds(3), [&] { return impl_->live == 0; })) {
    lock.unlock();
    for (auto& w : conns) {
      if (auto c = w.lock()) c->Close();
    }
  }
}

}  // namespace ps::net
