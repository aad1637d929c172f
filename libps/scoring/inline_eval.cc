#include "libps/scoring/inline_eval.h"

#include <cstring>
#include <memory>
#include <string>

namespace ps::scoring {

EvalShardWire SumsToWire(std::vector<model::HeadMetrics::Sums> sums) {
  EvalShardWire w;
  auto owned = std::make_shared<std::vector<model::HeadMetrics::Sums>>(std::move(sums));
  for (const auto& s : *owned) {
    w.reply.heads.push_back({.examples = s.examples,
                             .loss_sum = s.loss_sum,
                             .correct = s.correct,
                             .scores = static_cast<int64_t>(s.scores.size())});
    w.payload.Add(std::span<const float>(s.scores));
    w.payload.Add(std::span<const float>(s.labels));
  }
  w.payload.keep_alive = std::move(owned);
  return w;
}

Result<std::vector<model::HeadMetrics::Sums>> SumsFromWire(const proto::EvaluateShardReply& reply,
                                                           std::span<const std::byte> payload) {
  uint64_t floats = 0;
  for (const auto& h : reply.heads) floats += 2 * static_cast<uint64_t>(h.scores);
  if (floats * sizeof(float) != payload.size()) {
    return ProtocolError("EvaluateShardReply: " + std::to_string(payload.size()) +
                         " payload bytes for " + std::to_string(floats) + " scores and labels");
  }
  std::vector<model::HeadMetrics::Sums> out;
  size_t at = 0;
  auto take = [&](std::vector<float>& into, int64_t n) {
    into.resize(static_cast<size_t>(n));
    if (into.empty())
      return;  // an empty vector's data() may be null: no memcpy (UB even for 0 bytes)
    std::memcpy(into.data(), payload.data() + at, into.size() * sizeof(float));
    at += into.size() * sizeof(float);
  };
  for (const auto& h : reply.heads) {
    model::HeadMetrics::Sums s;
    s.examples = h.examples;
    s.loss_sum = h.loss_sum;
    s.correct = h.correct;
    take(s.scores, h.scores);
    take(s.labels, h.scores);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace ps::scoring
