// Buffer: an owned, 64-byte aligned byte array. Tensor payloads are received into and
// sent from these, so float data can be used in place (no copy into a vector).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <mutex>
#include <new>
#include <span>
#include <vector>

namespace ps::net {

// Lives exactly as long as a Buffer's memory is in use: a payload budget's reservation
// (see PayloadBudget). Dropped when the buffer is freed or recycled.
struct BufferLease {
  virtual ~BufferLease() = default;
};

class Buffer {
 public:
  Buffer() = default;
  // Uninitialised storage of `bytes` bytes; throws std::bad_alloc like operator new.
  explicit Buffer(size_t bytes) : size_(bytes) {
    if (bytes == 0) return;
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(static_cast<std::byte*>(p));
  }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  std::byte* data() { return data_.get(); }
  const std::byte* data() const { return data_.get(); }
  std::span<std::byte> bytes() { return {data(), size_}; }
  std::span<const std::byte> bytes() const { return {data(), size_}; }
  // [size() / 4] float32 view; size() must be a multiple of 4.
  std::span<float> floats() { return {reinterpret_cast<float*>(data()), size_ / sizeof(float)}; }
  std::span<const float> floats() const {
    return {reinterpret_cast<const float*>(data()), size_ / sizeof(float)};
  }
  void SetLease(std::unique_ptr<BufferLease> lease) { lease_ = std::move(lease); }
  void DropLease() { lease_.reset(); }

 private:
  struct Free {
    void operator()(std::byte* p) const { std::free(p); }
  };
  std::unique_ptr<BufferLease> lease_;  // declared first: released after the memory is freed
  std::unique_ptr<std::byte, Free> data_;
  size_t size_ = 0;
};

// A payload still being filled while its frame is sent (a big pull reply copied from the
// store piece by piece): the writer sends only the bytes published so far and waits for
// more, so the copy overlaps the transfer. Thread-safe.
class PayloadProgress {
 public:
  // The payload's first `bytes` are final (they only grow); wakes the writer.
  void Publish(uint64_t bytes) {
    ready_.store(bytes, std::memory_order_release);
    Wake();
  }
  // The rest will never come: the connection is closed (the frame cannot be cut short).
  void Fail() {
    failed_.store(true, std::memory_order_release);
    Wake();
  }
  uint64_t ready() const { return ready_.load(std::memory_order_acquire); }
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  // The connection's: called on each Publish and Fail from then on (set once queued).
  void SetWaker(std::function<void()> waker) {
    std::lock_guard lock(mu_);
    waker_ = std::move(waker);
  }

 private:
  void Wake() {
    std::function<void()> waker;
    {
      std::lock_guard lock(mu_);
      waker = waker_;
    }
    if (waker) waker();
  }
  std::atomic<uint64_t> ready_{0};
  std::atomic<bool> failed_{false};
  std::mutex mu_;
  std::function<void()> waker_;  // guarded by mu_
};

// Bytes to send after an envelope, gathered from several places without copying.
// Every part must stay valid until the frame is written: `keep_alive` may own them.
// With `progress`, the parts' bytes are sent only as far as it has published them.
struct OutPayload {
  std::vector<std::span<const std::byte>> parts;
  std::shared_ptr<const void> keep_alive;
  std::shared_ptr<PayloadProgress> progress;

  size_t size() const {
    size_t n = 0;
    for (auto p : parts) n += p.size();
    return n;
  }
  static OutPayload Own(Buffer buffer) {
    auto owned = std::make_shared<Buffer>(std::move(buffer));
    OutPayload out;
    if (!owned->empty()) out.parts.push_back(std::as_bytes(std::span(owned->bytes())));
    out.keep_alive = std::move(owned);
    return out;
  }
  template <typename T>
  void Add(std::span<const T> data) {
    if (!data.empty()) parts.push_back(std::as_bytes(data));
  }
};

}  // namespace ps::net
