// Links to ps tasks: how a client of the ps (the worker's trainer, the chief's final
// evaluation, scoring in this process) sends pulls and pushes to one ps task, over the
// network or to a Store in this process.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "libps/core/status.h"
#include "libps/net/transport.h"
#include "libps/prom/registry.h"
#include "libps/proto/messages.h"
#include "libps/server/store.h"

namespace ps::client {

// One ps task as its client sees it. Calls may complete on any thread.
class PsLink {
 public:
  virtual ~PsLink() = default;
  // Pulls `req`'s slices into `into` (its spans, in item order, sum to the reply size).
  // `done` gets the smallest shard version the reply reports (sync mode), else INT64_MAX.
  virtual void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
                    std::function<void(Status, int64_t)> done) = 0;
  // Pushes `req` with the gradients in `grads` (in item order).
  virtual void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) = 0;
  // Push(push, grads), then, once the ps has applied it, Pull(pull, into): async mode
  // only. `done` once, for both. A remote link sends both as one request (the push
  // carries the pull; its reply the rows); this default runs one after the other.
  virtual void PushPull(proto::Push push, net::OutPayload grads, proto::Pull pull,
                        std::vector<std::span<std::byte>> into, std::function<void(Status)> done);
};

// Where a remote link records the round trip of each pull and push (seconds, from the
// call to its reply); null: not recorded. The histograms must outlive the link.
struct LinkTimers {
  prom::Histogram* pull = nullptr;
  prom::Histogram* push = nullptr;
};

// A link to a remote ps over the network (the payloads go in place both ways). With a
// second connection for pushes, a pull is not queued behind a push it overlaps with.
std::unique_ptr<PsLink> RemotePsLink(std::shared_ptr<net::Client> client,
                                     std::shared_ptr<net::Client> push_client = nullptr,
                                     LinkTimers timers = {});
// A link to a Store in this process: the same math with no network.
std::unique_ptr<PsLink> LocalPsLink(ps::server::Store* store);

}  // namespace ps::client
