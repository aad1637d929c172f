// Inline distributed evaluation, the wire form of a worker's answer: a worker evaluates
// its shard of the eval data (EvaluateShard) and sends its per-head sums; the chief
// merges every worker's sums (model::HeadMetrics::Merge) into the figures of one pass.
#pragma once

#include <cstddef>
#include <span>
#include <vector>

#include "libps/core/status.h"
#include "libps/model/metrics.h"
#include "libps/net/buffer.h"
#include "libps/proto/messages.h"

namespace ps::scoring {

struct EvalShardWire {
  proto::EvaluateShardReply reply;
  net::OutPayload payload;  // owns the scores and labels
};
// The reply and its payload: per head in order, its scores then its labels (float32).
EvalShardWire SumsToWire(std::vector<model::HeadMetrics::Sums> sums);
// The inverse; ProtocolError when the payload's size does not match the counts.
Result<std::vector<model::HeadMetrics::Sums>> SumsFromWire(const proto::EvaluateShardReply& reply,
                                                           std::span<const std::byte> payload);

}  // namespace ps::scoring
