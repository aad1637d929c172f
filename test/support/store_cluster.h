// Test clusters of in-process ps stores for checkpoint tests (test/unit/ckpt): the
// variables, their placement onto num_ps stores, the plan the chief records in a MANIFEST,
// and each variable assembled whole for bit-exact comparisons.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libps/cluster/placement.h"
#include "libps/core/json.h"
#include "libps/server/store.h"

namespace ps::testing {

using namespace ps::server;
using ps::cluster::PartitionerSpec;

inline constexpr int64_t kIds = int64_t{1} << 30;  // a lazy table's hashed id space

inline std::vector<ps::cluster::VarShape> Vars() {
  return {
      {.name = "emb/embeddings",
       .shape = {kIds, 4},
       .elem_bytes = 4,
       .lazy = true,
       .sparse = true,
       .rows_per_step = 64},
      {.name = "dense/kernel",
       .shape = {13, 3},
       .elem_bytes = 4,
       .lazy = false,
       .sparse = false,
       .rows_per_step = 0},
      {.name = "dense/bias",
       .shape = {7},
       .elem_bytes = 4,
       .lazy = false,
       .sparse = false,
       .rows_per_step = 0},
      {.name = "step_scale",
       .shape = {},
       .elem_bytes = 4,
       .lazy = false,
       .sparse = false,
       .rows_per_step = 0},
  };
}

inline PartitionerSpec Fixed(int shards) {
  PartitionerSpec p;
  p.kind = shards > 1 ? PartitionerSpec::kFixed : PartitionerSpec::kNone;
  p.num_shards = shards;
  return p;
}

// One cluster: num_ps stores holding the shards Place gives them.
struct Cluster {
  std::vector<ps::cluster::ShardPlacement> placement;
  std::vector<std::unique_ptr<Store>> ps;
};

inline Cluster Build(int num_ps, int shards, OptimizerKind kind = OptimizerKind::kAdam,
                     int64_t ttl_steps = 0) {
  auto placed = ps::cluster::Place(Vars(), Fixed(shards), num_ps,
                                   ps::cluster::PlacementStrategy::kRoundRobin);
  REQUIRE(placed.ok());
  Cluster c;
  c.placement = *placed;
  OptimizerSpec spec = DefaultOptimizer(kind);
  spec.learning_rate = 0.05;
  for (int p = 0; p < num_ps; ++p) {
    c.ps.push_back(std::make_unique<Store>());
    REQUIRE(c.ps.back()->Configure(spec).ok());
  }
  for (const auto& s : c.placement) {
    ShardDef def{.layout = s.layout,
                 .init = {ps::model::InitKind::kUniform, -0.1, 0.1},
                 .seed = 11,
                 .row_policy = {}};
    if (s.layout.lazy) def.row_policy.ttl_steps = ttl_steps;
    REQUIRE(c.ps[static_cast<size_t>(s.ps)]->Create(def).ok());
  }
  return c;
}

// The plan as the chief records it in the MANIFEST (chief/checkpoints.cc, PlanJson).
inline ps::Json PlanJson(const Cluster& c) {
  ps::Json vars = ps::Json::array();
  for (const auto& v : Vars()) {
    ps::Json shards = ps::Json::array();
    for (const auto& s : c.placement) {
      if (s.layout.var == v.name) {
        shards.push_back({{"shard", s.layout.shard},
                          {"ps", s.ps},
                          {"row_begin", s.layout.row_begin},
                          {"rows", s.layout.rows}});
      }
    }
    vars.push_back(
        {{"name", v.name}, {"shape", v.shape}, {"sparse", v.sparse}, {"shards", shards}});
  }
  return vars;
}

// Each variable as one whole: global row -> its values then every slot (by slot name), as
// raw bytes; a lazy variable lists only its created rows. Without `with_slots`: values only.
using Whole = std::map<std::string, std::map<int64_t, std::string>>;
inline Whole Assemble(const Cluster& c, bool with_slots = true) {
  Whole out;
  for (const auto& store : c.ps) {
    store->ForEachShard([&](const ShardView& v) {
      const auto& l = v.def.layout;
      const auto cols = static_cast<size_t>(l.cols);
      std::vector<size_t> order(v.slots.size());  // slot blocks in name order
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      std::sort(order.begin(), order.end(),
                [&](size_t a, size_t b) { return v.slots[a].first < v.slots[b].first; });
      auto bytes = [](std::span<const float> s) {
        return std::string(reinterpret_cast<const char*>(s.data()), s.size_bytes());
      };
      if (l.lazy) {
        for (size_t i = 0; i < v.row_ids.size(); ++i) {
          std::string row = bytes(v.row(i, 0));
          if (with_slots)
            for (size_t k : order) row += bytes(v.row(i, 1 + k));
          REQUIRE(out[l.var].emplace(l.row_begin + v.row_ids[i], row).second);
        }
      } else {
        for (int64_t r = 0; r < l.rows; ++r) {
          std::string row = bytes(v.values.subspan(static_cast<size_t>(r) * cols, cols));
          if (with_slots)
            for (size_t k : order)
              row += bytes(v.slots[k].second.subspan(static_cast<size_t>(r) * cols, cols));
          REQUIRE(out[l.var].emplace(l.row_begin + r, row).second);
        }
      }
    });
  }
  return out;
}

}  // namespace ps::testing
