// The process-wide payload buffer pool and the Runtime. Connections are in conn.cc, the
// server side in server.cc, the client side in client.cc.
#include "libps/net/conn.h"

#include <deque>
#include <mutex>

namespace ps::net {

// ---------------------------------------------------------------- buffer pool

namespace {

constexpr size_t kPooledMinBytes = size_t{1} << 20;
constexpr size_t kPoolMaxBytes = size_t{256} << 20;

class BufferPool {
 public:
  Buffer Take(size_t bytes) {
    if (bytes >= kPooledMinBytes) {
      std::lock_guard lock(mu_);
      for (auto it = idle_.rbegin(); it != idle_.rend(); ++it) {  // most recent first
        if (it->size() != bytes) continue;
        Buffer b = std::move(*it);
        idle_.erase(std::next(it).base());
        idle_bytes_ -= bytes;
        return b;
      }
    }
    return Buffer(bytes);
  }

  void Give(Buffer buffer) {
    buffer.DropLease();  // an idle buffer holds no budget
    if (buffer.data() == nullptr || buffer.size() < kPooledMinBytes ||
        buffer.size() > kPoolMaxBytes)
      return;
    std::deque<Buffer> evicted;  // freed after unlocking
    std::lock_guard lock(mu_);
    while (idle_bytes_ + buffer.size() > kPoolMaxBytes) {
      idle_bytes_ -= idle_.front().size();
      evicted.push_back(std::move(idle_.front()));
      idle_.pop_front();
    }
    idle_bytes_ += buffer.size();
    idle_.push_back(std::move(buffer));
  }

 private:
  std::mutex mu_;
  std::deque<Buffer> idle_;  // oldest first; guarded by mu_
  size_t idle_bytes_ = 0;    // guarded by mu_
};

BufferPool& Pool() {
  static BufferPool pool;
  return pool;
}

}  // namespace

Buffer TakeBuffer(size_t bytes) { return Pool().Take(bytes); }

void RecycleBuffer(Buffer buffer) { Pool().Give(std::move(buffer)); }

OutPayload RecycledPayload(Buffer buffer) {
  struct Owner {
    Buffer buffer;
    ~Owner() { RecycleBuffer(std::move(buffer)); }
  };
  auto owner = std::make_shared<Owner>();
  owner->buffer = std::move(buffer);
  OutPayload out;
  if (!owner->buffer.empty()) out.parts.push_back(std::as_bytes(std::span(owner->buffer.bytes())));
  out.keep_alive = std::move(owner);
  return out;
}

// ---------------------------------------------------------------- Runtime

Runtime::Runtime(int io_threads) : impl_(std::make_unique<Impl>()) {
  const int n = std::max(1, io_threads);
  for (int i = 0; i < n; ++i) {
    impl_->ios.push_back(std::make_unique<IoContext>(1));  // 1: run by one thread
    impl_->guards.emplace_back(impl_->ios.back()->get_executor());
  }
  for (int i = 0; i < n; ++i) {
    impl_->threads.emplace_back([io = impl_->ios[static_cast<size_t>(i)].get()] { io->run(); });
  }
}

Runtime::~Runtime() {
  for (auto& g : impl_->guards) g.reset();
  for (auto& io : impl_->ios) io->stop();
  for (auto& t : impl_->threads) t.join();
  // Every io_context's handlers are destroyed (shutdown) before any io_context is: the
  // last reference to an object can go with a handler of one io_context while its
  // socket or timer belongs to another, which must still exist then.
  for (auto& io : impl_->ios) io->shutdown();
  impl_->ios.clear();
}

std::string PeerInfo::Name() const {
  return std::string(proto::RoleName(role)) + ":" + std::to_string(task_index);
}

}  // namespace ps::net
