// An in-process cluster for trainer tests: one Store holding every shard of a job's
// plan (1 ps), and a Trainer over it through LocalPsLink.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/job/job.h"
#include "libps/worker/trainer.h"

namespace ps::worker::testing {

// A sparse table (embedding rows, a different set every batch) and dense layers after it.
inline Json SmallJob() {
  return Json::parse(
      R"({"model": {"type": "embedding_mlp", "fields": [{"vocab": 8, "dim": 4}], "hidden": [3],
                                   "classes": 1},
                         "train_data": {"format": "string_features", "examples": 200, "seed": 1},
                         "optimizer": {"type": "sgd", "learning_rate": 0.5},
                         "batch_size": 16, "steps": 100, "seed": 3})");
}

struct Cluster {
  ps::server::Store store;
  std::unique_ptr<ps::worker::Trainer> trainer;
  std::vector<ps::server::ShardKey> keys;
};

// One in-process store holding every shard of `job`'s plan, and a trainer over it.
// `wrap`, when set, wraps the link to the store (to watch the trainer's calls).
inline void Build(
    const ps::job::JobSpec& job, Cluster* c,
    const std::function<std::unique_ptr<ps::client::PsLink>(std::unique_ptr<ps::client::PsLink>)>&
        wrap = {}) {
  auto model = ps::model::BuildModel(job.model, "job.model");
  REQUIRE(model.ok());
  auto plan = ps::job::PlanVariables(job, **model, 1);
  REQUIRE(plan.ok());
  REQUIRE(c->store.Configure(job.optimizer).ok());
  for (const auto& s : plan->shards) {
    auto v = std::find_if(plan->variables.begin(), plan->variables.end(),
                          [&](const auto& d) { return d.name == s.layout.var; });
    REQUIRE(c->store.Create({.layout = s.layout, .init = v->init, .seed = job.seed}).ok());
    c->keys.push_back({s.layout.var, s.layout.shard});
  }
  std::vector<std::unique_ptr<ps::client::PsLink>> links;
  links.push_back(ps::client::LocalPsLink(&c->store));
  if (wrap) links.back() = wrap(std::move(links.back()));
  auto trainer = ps::worker::MakeTrainer(job, 0, 1, 1, std::move(links));
  REQUIRE(trainer.ok());
  c->trainer = std::move(*trainer);
}

inline std::map<std::string, std::vector<float>> Values(const Cluster& c) {
  std::map<std::string, std::vector<float>> out;
  for (const auto& key : c.keys) {
    REQUIRE(c.store
                .Read(key,
                      [&](const ps::server::ShardView& v) {
                        out[key.ToString()].assign(v.values.begin(), v.values.end());
                      })
                .ok());
  }
  return out;
}

}  // namespace ps::worker::testing
