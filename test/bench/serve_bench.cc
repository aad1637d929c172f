// pstrain-serve's benchmark helpers (scripts/bench-serve.sh):
//
//   bench_serve model JOB.json MODEL_DIR [WRITE_SECONDS DELTA_FRACTION DELTA_EVERY FULL_EVERY
//                                         GO_FILE]
//     A model dir for JOB's model: job.json and ckpt-0 (the initial values, one ps), as a
//     chief would have them written. With WRITE_SECONDS: once GO_FILE exists (looked for
//     every 10 ms), for that long, every
//     DELTA_EVERY seconds DELTA_FRACTION of every table's rows (and every dense variable)
//     change and a delta checkpoint is committed, and every FULL_EVERY seconds a full one.
//   bench_serve body JOB.json INSTANCES OUT.json
//     A predict request body of INSTANCES random examples (libsvm "features", one id per
//     field).
//   bench_serve score MODEL_DIR BODY.json SECONDS
//     The in-process scorer (ps::serving::Scorer, one thread) on the body's examples:
//     "inproc: <examples> examples, <us> us CPU per example".
#include <time.h>

#include <random>
#include <thread>

#include "libps/ckpt/checkpoint_dir.h"
#include "libps/ckpt/shard_checkpointer.h"
#include "libps/core/json.h"
#include "libps/job/job.h"
#include "libps/serving/rest_inputs.h"
#include "libps/serving/serving.h"
#include "test/bench/bench_util.h"

namespace ps::bench {
namespace {

template <typename T>
T Ok(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.status().ToString());
  return std::move(*r);
}
void Ok(const Status& st, const std::string& what) {
  if (!st.ok()) Die(what + ": " + st.ToString());
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

struct Writer {
  std::string dir;
  std::unique_ptr<server::Store> store;
  std::unique_ptr<ckpt::ShardCheckpointer> ck;
  job::VariablePlan plan;
  std::mt19937_64 rng{7};

  void Save(int64_t step, std::optional<int64_t> base, int64_t parent) {
    auto r = Ok(ck->Save({.model_dir = dir,
                          .global_step = step,
                          .delta_base = base.value_or(-1),
                          .delta_parent = base ? parent : -1}),
                "save");
    const double now =
        std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    ckpt::Manifest m{.global_step = step,
                     .unix_time = now,  // the commit time: bench-serve-lag.sh's lags start here
                     .final = false,
                     .num_ps = 1,
                     .shards = {{r.file, r.bytes, r.digest}},
                     .extra = Json::object(),
                     .base = base,
                     .parent = base ? parent : 0};
    Ok(ckpt::CommitCheckpoint(dir, m), "commit");
  }

  // `fraction` of every row-indexed shard's rows, and every dense shard, pushed once.
  void Change(double fraction, int64_t step) {
    for (const auto& s : plan.shards) {
      const auto& l = s.layout;
      const bool sparse = std::any_of(plan.variables.begin(), plan.variables.end(),
                                      [&](const auto& v) { return v.name == l.var && v.sparse; });
      if (!sparse) {
        std::vector<float> g(static_cast<size_t>(l.rows * l.cols), 0.01f);
        Ok(store->Push({l.var, l.shard}, g, step), "push");
        continue;
      }
      const auto n =
          std::max<int64_t>(1, static_cast<int64_t>(fraction * static_cast<double>(l.rows)));
      std::vector<int64_t> rows;
      for (int64_t i = 0; i < n; ++i) rows.push_back(static_cast<int64_t>(rng() % l.rows));
      std::sort(rows.begin(), rows.end());
      rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
      std::vector<float> g(rows.size() * static_cast<size_t>(l.cols));
      for (auto& x : g) x = static_cast<float>(static_cast<int>(rng() % 200) - 100) * 1e-3f;
      Ok(store->PushRows({l.var, l.shard}, rows, g, step), "push rows");
    }
  }
};

int Model(int argc, char** argv) {
  if (argc < 4)
    Die("usage: model JOB.json MODEL_DIR [SECONDS FRACTION DELTA_EVERY FULL_EVERY GO_FILE]");
  Writer w;
  w.dir = argv[3];
  Json json = Ok(ReadJsonFile(argv[2]), "job");
  json.erase("base_dir");
  std::filesystem::create_directories(w.dir);
  auto job = Ok(job::ParseJob(json, w.dir), "job");
  auto model = Ok(model::BuildModel(job.model, "job.model"), "model");
  w.plan = Ok(job::PlanVariables(job, *model, 1), "plan");
  w.store = std::make_unique<server::Store>();
  Ok(w.store->Configure(server::OptimizerSpec{}), "store");
  for (const auto& s : w.plan.shards) {
    const auto& v = *std::find_if(w.plan.variables.begin(), w.plan.variables.end(),
                                  [&](const auto& d) { return d.name == s.layout.var; });
    Ok(w.store->Create(
           {.layout = s.layout, .init = v.init, .seed = job.seed, .row_policy = v.rows}),
       "create");
  }
  w.ck = std::make_unique<ckpt::ShardCheckpointer>(w.store.get(), 0);
  std::ofstream(w.dir + "/job.json") << json.dump(2);
  int64_t step = 0, base = 0, parent = 0;
  w.Save(step, std::nullopt, 0);
  std::printf("bench_serve: ckpt-0 committed\n");
  std::fflush(stdout);
  if (argc < 9) return 0;
  while (!std::filesystem::exists(argv[8]))
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  const double seconds = std::atof(argv[4]), fraction = std::atof(argv[5]);
  const double delta_every = std::atof(argv[6]), full_every = std::atof(argv[7]);
  const auto t0 = Clock::now();
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  double next_full = full_every;
  while (since() < seconds) {
    std::this_thread::sleep_for(std::chrono::duration<double>(delta_every));
    w.Change(fraction, ++step);
    if (since() >= next_full) {
      w.Save(step, std::nullopt, 0);
      base = parent = step;
      next_full += full_every;
      std::printf("bench_serve: full checkpoint %lld at %.1f s\n", static_cast<long long>(step),
                  since());
    } else {
      w.Save(step, base, parent);
      parent = step;
      std::printf("bench_serve: delta %lld at %.1f s\n", static_cast<long long>(step), since());
    }
    std::fflush(stdout);
  }
  return 0;
}

int Body(int argc, char** argv) {
  if (argc < 5) Die("usage: body JOB.json INSTANCES OUT.json");
  Json job = Ok(ReadJsonFile(argv[2]), "job");
  const int64_t n = std::atoll(argv[3]);
  const Json& data = job.contains("eval_data") ? job["eval_data"] : job["train_data"];
  const auto offsets = data["field_offsets"].get<std::vector<int64_t>>();
  const int64_t features = data["num_features"].get<int64_t>();
  std::mt19937_64 rng(11);
  Json instances = Json::array();
  for (int64_t i = 0; i < n; ++i) {
    Json ids = Json::array();
    for (size_t f = 0; f < offsets.size(); ++f) {
      const int64_t end = f + 1 < offsets.size() ? offsets[f + 1] : features;
      ids.push_back(offsets[f] + 1 +
                    static_cast<int64_t>(rng() % static_cast<uint64_t>(end - offsets[f])));
    }
    instances.push_back({{"features", ids}});
  }
  std::ofstream(argv[4]) << Json{{"instances", instances}}.dump();
  return 0;
}

int Score(int argc, char** argv) {
  if (argc < 5) Die("usage: score MODEL_DIR BODY.json SECONDS");
  auto bundle = Ok(serving::Bundle::LoadModelDir(argv[2], nullptr), "load");
  auto schema =
      Ok(serving::InputSchema::Make(Ok(ParseJson(bundle->job_json(), "job"), "job")), "schema");
  const Json body = Ok(ReadJsonFile(argv[3]), "body");
  std::vector<std::vector<std::pair<std::string, const Json*>>> instances;
  for (const auto& inst : body["instances"]) instances.push_back({{"features", &inst["features"]}});
  const model::Batch batch = Ok(schema->ToBatch(instances), "batch");
  auto scorer = Ok(bundle->NewScorer(), "scorer");
  const double seconds = std::atof(argv[4]);
  int64_t examples = 0;
  const auto t0 = Clock::now();
  const double cpu0 = ThreadCpuSeconds();
  while (std::chrono::duration<double>(Clock::now() - t0).count() < seconds) {
    auto s = Ok(scorer->Score(batch), "score");
    examples += s.examples;
  }
  const double cpu = ThreadCpuSeconds() - cpu0;
  std::printf("inproc: %lld examples, %.3f us CPU per example\n", static_cast<long long>(examples),
              cpu / static_cast<double>(examples) * 1e6);
  return 0;
}

}  // namespace
}  // namespace ps::bench

int main(int argc, char** argv) {
  const std::string cmd = argc > 1 ? argv[1] : "";
  if (cmd == "model") return ps::bench::Model(argc, argv);
  if (cmd == "body") return ps::bench::Body(argc, argv);
  if (cmd == "score") return ps::bench::Score(argc, argv);
  ps::bench::Die("usage: bench_serve model|body|score ...");
}
