// The framed connection (conn.h): construction, the TLS handshake, the byte layer every
// frame goes through (non-blocking system calls, readiness waits; TLS through its stream)
// and closing.
#include "libps/net/conn.h"

#include <boost/asio/post.hpp>
#include <boost/asio/read.hpp>
#include <boost/asio/redirect_error.hpp>
#include <boost/asio/ssl/error.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/write.hpp>
#include <cerrno>

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <openssl/ssl.h>
#include <openssl/x509.h>

namespace ps::net {

using asio::use_awaitable;

proto::Envelope ErrorEnvelope(uint64_t request_id, const Status& st) {
  return proto::Envelope{request_id, true, 0,
                         proto::Error{static_cast<int32_t>(st.code()), st.message()}};
}

Status StatusFromError(const proto::Error& e) {
  Code code = Code::kInternal;
  if (e.code > 0 && e.code <= static_cast<int>(Code::kDraining)) code = static_cast<Code>(e.code);
  return Status(code, e.message);
}

namespace {

// asio::transfer_all moves at most 64 KiB per system call; big payloads go in as few
// calls as the stream takes (TLS only: plain TCP moves bytes with its own calls).
struct TransferAllLarge {
  size_t operator()(const error_code& ec, size_t) const { return ec ? 0 : size_t{1} << 30; }
};

// Gather buffers per sendmsg (as Asio's own).
constexpr size_t kMaxIov = 64;

[[noreturn]] void Throw(const error_code& ec) { throw boost::system::system_error(ec); }

bool WouldBlock(const error_code& ec) {
  return ec == asio::error::would_block || ec == asio::error::try_again;
}

}  // namespace

Conn::Conn(tcp::socket socket, ConnOptions options)
    : socket_(std::move(socket)),
      options_(std::move(options)),
      wake_(socket_.get_executor()),
      gate_(socket_.get_executor()) {
  error_code ec;
  socket_.set_option(tcp::no_delay(true), ec);
  auto ep = socket_.remote_endpoint(ec);
  if (!ec) {
    host_ = ep.address().to_string();
    address_ = host_ + ":" + std::to_string(ep.port());
  }
  if (options_.tls)
    tls_ = std::make_unique<asio::ssl::stream<tcp::socket&>>(socket_, options_.tls->impl().ctx);
  const auto ex = socket_.get_executor();  // target() points into this copy
  if (const auto* s = ex.target<asio::strand<asio::io_context::executor_type>>()) strand_ = *s;
}

Conn::~Conn() {
  // Before the socket: its destructor then closes the last descriptor of the socket,
  // which takes it out of the reactor's epoll set (Asio relies on that).
  if (read_fd_ >= 0) ::close(read_fd_);
}

void Conn::Authenticated() {
  limits_ = options_.limits;
  authenticated_ = true;
  read_buf_ = std::make_unique_for_overwrite<std::byte[]>(kReadAheadBytes);
  if (!tls_) {
    direct_writes_ = true;
    direct_any_thread_ = direct_writes_ && options_.max_in_flight == 0 && !options_.budget;
    if (direct_any_thread_ && options_.caller_reads)
      read_fd_ = ::fcntl(socket_.native_handle(), F_DUPFD_CLOEXEC, 0);
  }
}

awaitable<Status> Conn::SecureHandshake(bool as_server) {
  if (!tls_) co_return Status::Ok();
  error_code ec;
  co_await tls_->async_handshake(
      as_server ? asio::ssl::stream_base::server : asio::ssl::stream_base::client,
      asio::redirect_error(use_awaitable, ec));
  if (!ec) co_return Status::Ok();
  if (ec.category() != asio::error::get_ssl_category()) {
    if (closed_) co_return Unavailable("TLS handshake timed out");
    if (ec == asio::error::eof || ec == asio::ssl::error::stream_truncated ||
        ec == asio::error::connection_reset) {
      co_return Unavailable(
          "the peer closed the connection in the TLS handshake (does it use TLS?)");
    }
    co_return Unavailable("TLS handshake: " + ec.message());
  }
  std::string why = ec.message();
  long verify = SSL_get_verify_result(tls_->native_handle());
  if (verify != X509_V_OK) why += std::string(" (") + X509_verify_cert_error_string(verify) + ")";
  co_return PermissionDenied("TLS handshake failed: " + why);
}

size_t Conn::Recv(int fd, std::span<std::byte> into, error_code& ec) {
  for (;;) {
    const ssize_t got = ::recv(fd, into.data(), into.size(), MSG_DONTWAIT);
    if (got > 0) {
      ec.clear();
      return static_cast<size_t>(got);
    }
    if (got == 0) {
      ec = asio::error::eof;
      return 0;
    }
    if (errno == EINTR) continue;
    ec = error_code(errno, boost::system::system_category());
    return 0;
  }
}

size_t Conn::SendSome(std::span<const asio::const_buffer> bufs, error_code& ec) {
  std::array<iovec, kMaxIov> iov;
  size_t n = 0;
  for (const auto& b : bufs) {
    if (n == iov.size()) break;
    if (b.size() > 0) iov[n++] = iovec{const_cast<void*>(b.data()), b.size()};
  }
  msghdr msg{};
  msg.msg_iov = iov.data();
  msg.msg_iovlen = n;
  for (;;) {
    const ssize_t sent = ::sendmsg(socket_.native_handle(), &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (sent >= 0) {
      ec.clear();
      return static_cast<size_t>(sent);
    }
    if (errno == EINTR) continue;
    ec = error_code(errno, boost::system::system_category());
    return 0;
  }
}

awaitable<void> Conn::WaitReady(tcp::socket::wait_type what) {
  if (closed_) Throw(asio::error::operation_aborted);
  error_code ec;
  co_await socket_.async_wait(what, asio::redirect_error(use_awaitable, ec));
  if (ec) Throw(ec);
  if (closed_) Throw(asio::error::operation_aborted);
}

awaitable<size_t> Conn::ReadAtLeast(std::span<std::byte> into, size_t at_least) {
  if (tls_) {
    co_return co_await asio::async_read(*tls_, asio::buffer(into.data(), into.size()),
                                        asio::transfer_at_least(at_least), use_awaitable);
  }
  if (into.size() >= kReactorReadBytes) {
    // A big payload: Asio's reactor performs each recv the moment the socket turns
    // readable, without resuming this coroutine per socket buffer (conn.h).
    co_return co_await asio::async_read(socket_, asio::buffer(into.data(), into.size()),
                                        asio::transfer_at_least(at_least), use_awaitable);
  }
  size_t got = 0;
  while (got < at_least) {
    if (closed_) Throw(asio::error::operation_aborted);
    error_code ec;
    got += Recv(socket_.native_handle(), into.subspan(got), ec);
    if (got >= at_least) break;
    if (ec && !WouldBlock(ec)) Throw(ec);
    // Nothing, or less than asked for: the socket is drained, and what arrives next
    // makes it readable again.
    co_await WaitReady(tcp::socket::wait_read);
  }
  co_return got;
}

awaitable<void> Conn::WriteAll(std::span<const asio::const_buffer> bufs, error_code& ec) {
  ec.clear();
  if (tls_) {
    std::vector<asio::const_buffer> all(bufs.begin(), bufs.end());
    co_await asio::async_write(*tls_, all, TransferAllLarge(),
                               asio::redirect_error(use_awaitable, ec));
    co_return;
  }
  std::vector<asio::const_buffer> left(bufs.begin(), bufs.end());
  size_t first = 0;  // left[first..] is still to be written
  for (;;) {
    while (first < left.size() && left[first].size() == 0) ++first;
    if (first == left.size()) co_return;
    if (closed_) {
      ec = asio::error::operation_aborted;
      co_return;
    }
    size_t n = SendSome(std::span(left).subspan(first), ec);
    for (; n > 0; ++first) {
      if (n < left[first].size()) {
        left[first] += n;
        break;
      }
      n -= left[first].size();
    }
    if (WouldBlock(ec)) {
      ec.clear();
      co_await socket_.async_wait(tcp::socket::wait_write, asio::redirect_error(use_awaitable, ec));
    }
    if (ec) co_return;
  }
}

void Conn::CloseOnStrand() {
  if (closed_) return;
  closed_ = true;
  uint64_t dropped = 0;
  std::deque<Out> queue;  // freed after unlocking
  {
    std::lock_guard lock(write_mu_);  // no direct write is under way from another thread
    error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    if (read_fd_ >= 0) {
      // blocking_fd() keeps the socket open, so closing our descriptor would leave it in
      // the reactor's epoll set (Asio's close() counts on the kernel removing it):
      // release() deregisters it first (and fails pending operations, as close() does).
      const int fd = socket_.release(ec);
      if (!ec) ::close(fd);
    } else {
      socket_.close(ec);
    }
    for (const auto& out : queue_) dropped += out.bytes;
    queue.swap(queue_);
  }
  wake_.cancel();
  gate_.cancel();
  // A frame being written is subtracted when its write fails, which wakes WaitForRoom.
  Dequeued(dropped);
}

void Conn::Close() {
  asio::post(executor(), [self = shared_from_this()] { self->CloseOnStrand(); });
}

void Conn::CloseAfterFlush() {
  asio::post(executor(), [self = shared_from_this()] {
    if (self->closed_) return;
    Out sentinel;
    sentinel.close_after = true;  // an Out without an envelope writes nothing
    std::lock_guard lock(self->write_mu_);
    self->queue_.push_back(std::move(sentinel));
    self->wake_.cancel();
  });
}

std::shared_ptr<asio::steady_timer> Watchdog(const std::shared_ptr<Conn>& c, Millis after) {
  auto t = std::make_shared<asio::steady_timer>(c->executor());
  t->expires_after(after);
  t->async_wait([c](error_code ec) {
    if (!ec) c->CloseOnStrand();
  });
  return t;
}

}  // namespace ps::net
