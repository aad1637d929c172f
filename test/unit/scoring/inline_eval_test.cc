#include <catch2/catch.hpp>

#include <cstring>

#include "libps/scoring/inline_eval.h"

using namespace ps;

TEST_CASE(
    "inline evaluation sums travel as a reply and a payload and come back equal; a short payload is refused") {
  std::vector<model::HeadMetrics::Sums> sums(2);
  sums[0] = {.examples = 3,
             .loss_sum = 1.5,
             .correct = 2,
             .scores = {0.1f, 0.7f, 0.4f},
             .labels = {0, 1, 1}};
  sums[1] = {.examples = 3, .loss_sum = 0.25, .correct = 0, .scores = {}, .labels = {}};
  scoring::EvalShardWire w = scoring::SumsToWire(sums);
  REQUIRE(w.reply.heads.size() == 2);
  CHECK(w.reply.heads[0].scores == 3);
  CHECK(w.reply.heads[1].scores == 0);
  std::vector<std::byte> bytes;
  for (auto part : w.payload.parts) bytes.insert(bytes.end(), part.begin(), part.end());
  CHECK(bytes.size() == 6 * sizeof(float));
  auto back = scoring::SumsFromWire(w.reply, bytes);
  REQUIRE(back.ok());
  REQUIRE(back->size() == 2);
  CHECK((*back)[0].scores == sums[0].scores);
  CHECK((*back)[0].labels == sums[0].labels);
  CHECK((*back)[0].loss_sum == 1.5);
  CHECK((*back)[1].examples == 3);
  bytes.pop_back();
  auto short_payload = scoring::SumsFromWire(w.reply, bytes);
  REQUIRE_FALSE(short_payload.ok());
  CHECK(short_payload.status().message() ==
        "EvaluateShardReply: 23 payload bytes for 6 scores and labels");
}
