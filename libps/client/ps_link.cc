#include "libps/client/ps_link.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>
#include <utility>

namespace ps::client {

void PsLink::PushPull(proto::Push push, net::OutPayload grads, proto::Pull pull,
                      std::vector<std::span<std::byte>> into, std::function<void(Status)> done) {
  Push(std::move(push), std::move(grads),
       [this, pull = std::move(pull), into = std::move(into),
        done = std::move(done)](Status st) mutable {
         if (!st.ok()) return done(std::move(st));
         Pull(std::move(pull), std::move(into),
              [done = std::move(done)](Status s, int64_t) { done(std::move(s)); });
       });
}

namespace {

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A pull's reply (or a push's with its pull) must have put `want` bytes in place.
Status CheckPulled(const Result<net::Reply>& r, uint64_t want) {
  if (!r.ok()) return r.status();
  if (!r->payload_in_place && !(want == 0 && r->payload.size() == 0)) {
    return ProtocolError("pull reply of " + std::to_string(r->payload.size()) +
                         " bytes, expected " + std::to_string(want));
  }
  return Status::Ok();
}

uint64_t Bytes(const std::vector<std::span<std::byte>>& into) {
  uint64_t n = 0;
  for (auto s : into) n += s.size();
  return n;
}

class RemoteLink : public PsLink {
 public:
  RemoteLink(std::shared_ptr<net::Client> c, std::shared_ptr<net::Client> push, LinkTimers timers)
      : client_(std::move(c)), push_client_(push ? std::move(push) : client_), timers_(timers) {}
  void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(Status, int64_t)> done) override {
    const uint64_t want = Bytes(into);
    client_->CallAsync(std::move(req), {}, std::move(into), net::Millis{0},
                       [done = std::move(done), want, timer = timers_.pull,
                        t0 = std::chrono::steady_clock::now()](Result<net::Reply> r) {
                         if (timer != nullptr) timer->Observe(SecondsSince(t0));
                         if (Status st = CheckPulled(r, want); !st.ok())
                           return done(std::move(st), INT64_MAX);
                         int64_t version = INT64_MAX;
                         if (const auto* m = std::get_if<proto::PullReply>(&r->envelope.body)) {
                           for (int64_t v : m->versions) version = std::min(version, v);
                         }
                         done(Status::Ok(), version);
                       });
  }
  void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) override {
    SendPush(push_client_, std::move(req), std::move(grads), {},
             [done = std::move(done), timer = timers_.push,
              t0 = std::chrono::steady_clock::now()](Result<net::Reply> r) {
               if (timer != nullptr) timer->Observe(SecondsSince(t0));
               done(r.status());
             });
  }
  // On the pulls' connection: the worker waits for the pull in it.
  void PushPull(proto::Push push, net::OutPayload grads, proto::Pull pull,
                std::vector<std::span<std::byte>> into, std::function<void(Status)> done) override {
    const uint64_t want = Bytes(into);
    push.pull = std::move(pull);
    SendPush(client_, std::move(push), std::move(grads), std::move(into),
             [done = std::move(done), want, timers = timers_,
              t0 = std::chrono::steady_clock::now()](Result<net::Reply> r) {
               // The round trip of both: the push's and the pull's.
               for (prom::Histogram* h : {timers.push, timers.pull}) {
                 if (h != nullptr) h->Observe(SecondsSince(t0));
               }
               done(CheckPulled(r, want));
             });
  }

 private:
  std::shared_ptr<net::Client> client_;       // pulls
  std::shared_ptr<net::Client> push_client_;  // pushes
  LinkTimers timers_;
  // Testing hook: PSTRAIN_FAULT_REPEAT_PUSH_EVERY=N sends every Nth push twice.
  const int64_t repeat_every_ = [] {
    const char* v = std::getenv("PSTRAIN_FAULT_REPEAT_PUSH_EVERY");
    return v == nullptr ? int64_t{0} : std::max<int64_t>(0, std::atoll(v));
  }();
  int64_t pushes_ = 0;  // the sending thread only (a ParamFetcher is not thread-safe)

  // Sends a push (`into`: where its pull's rows go, if it has one), and with the fault
  // injection every Nth one twice: the first reply is "lost".
  void SendPush(const std::shared_ptr<net::Client>& client, proto::Push req, net::OutPayload grads,
                std::vector<std::span<std::byte>> into,
                std::function<void(Result<net::Reply>)> done) {
    if (repeat_every_ > 0 && ++pushes_ % repeat_every_ == 0) {
      proto::Push again = req;
      net::OutPayload payload = grads;
      auto into_again = into;
      client->CallAsync(std::move(req), std::move(grads), std::move(into), net::Millis{0},
                        [client, again = std::move(again), payload = std::move(payload),
                         into_again = std::move(into_again),
                         done = std::move(done)](Result<net::Reply> first) mutable {
                          if (!first.ok()) return done(std::move(first));
                          client->CallAsync(std::move(again), std::move(payload),
                                            std::move(into_again), net::Millis{0}, std::move(done));
                        });
      return;
    }
    client->CallAsync(std::move(req), std::move(grads), std::move(into), net::Millis{0},
                      std::move(done));
  }
};

class LocalLink : public PsLink {
 public:
  explicit LocalLink(ps::server::Store* s) : store_(s) {}
  void Pull(proto::Pull req, std::vector<std::span<std::byte>> into,
            std::function<void(Status, int64_t)> done) override {
    for (size_t i = 0; i < req.items.size(); ++i) {
      const auto& it = req.items[i];
      std::span<float> out(reinterpret_cast<float*>(into[i].data()),
                           into[i].size() / sizeof(float));
      ps::server::ShardKey key{it.var, it.shard};
      Status st = it.all_rows ? store_->Pull(key, out) : store_->PullRows(key, it.rows, out);
      if (!st.ok()) return done(st, INT64_MAX);
    }
    done(Status::Ok(), INT64_MAX);
  }
  void Push(proto::Push req, net::OutPayload grads, std::function<void(Status)> done) override {
    for (size_t i = 0; i < req.items.size(); ++i) {
      const auto& it = req.items[i];
      auto part = grads.parts[i];
      std::span<const float> g(reinterpret_cast<const float*>(part.data()),
                               part.size() / sizeof(float));
      ps::server::ShardKey key{it.var, it.shard};
      Status st = it.all_rows ? store_->Push(key, g, req.global_step)
                              : store_->PushRows(key, it.rows, g, req.global_step);
      if (!st.ok()) return done(st);
    }
    done(Status::Ok());
  }

 private:
  ps::server::Store* store_;
};

}  // namespace

std::unique_ptr<PsLink> RemotePsLink(std::shared_ptr<net::Client> client,
                                     std::shared_ptr<net::Client> push_client, LinkTimers timers) {
  return std::make_unique<RemoteLink>(std::move(client), std::move(push_client), timers);
}
std::unique_ptr<PsLink> LocalPsLink(ps::server::Store* store) {
  return std::make_unique<LocalLink>(store);
}

}  // namespace ps::client
