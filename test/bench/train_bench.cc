// Training throughput (examples per second) of a job with no network against real
// clusters on this machine. Not a test: run by scripts/bench-train.sh.
//
//   bench_train --job FILE --pstrain PATH [--local-steps 1000] [--warmup-steps 50]
//               [--steps 3000] [--log-every 100] [--skip-steps 500] [--workers 1,2]
//               [--steps-per-dispatch N] [--dispatches-per-worker N] [--keep] [--rounds N]
//               [--base-dir DIR] [--lazy] [--compare-job FILE [--pairs 2]]
//
// --rounds N: the whole sequence N times, each round's tables as above, then the median
// (and range) of each ratio over the rounds: on 2 cores a run now and then lands in a slow
// placement (the same build's (b)/(a) ranged 0.45-0.83 in one series), so one run says little.
// --base-dir replaces the job's base_dir (where its relative data paths resolve);
// --lazy sets "lazy": true on every sparse table of the model (the first field of each
// embedding_mlp table, or logistic_regression's weights), in (a) and in the clusters.
//
// (a) "local": one process, MakeTrainer with LocalPsLink over an in-process ps::server::Store —
//     the same Trainer, model, data and optimizer, no network, no chief; timed in
//     windows of --log-every steps after --warmup-steps.
// (b), (c) ...: `pstrain local` with 1 ps and W workers on 127.0.0.1 (free ports), the
//     job file with steps/log_every_steps/model_dir replaced and eval_data dropped; the
//     windows are the chief's train_metrics.jsonl lines past --skip-steps (start-up and
//     warm-up excluded).
// A run's rate is the median of its windows' ex/s (a burst of load from other processes
// moves one window, not the median). (a) runs before and after every cluster run; each
// cluster run is compared with the mean of the two (a) runs around it, so slow drifts
// of the machine's load hit both sides of a ratio alike.
// --compare-job: instead of (b), (c): the job and FILE (e.g. the mlp shorthand and the same
// model written as a graph) alternately, --pairs times each, both (a) and 1 ps + 1 worker
// with the job's eval_data kept; prints FILE/job ratios of ex/s and final eval accuracy.
// Every run's per-step phase times (data/pull/compute/push ms, averaged per worker) are
// printed so a gap can be attributed, and so is each process's CPU time per global step
// (its CPU seconds between two of the chief's progress lines, read from /proc as the
// lines appear; (a): this process's): the arithmetic of what 2 cores allow.
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "libps/core/json.h"
#include "libps/job/job.h"
#include "libps/model/blas.h"
#include "libps/server/store.h"
#include "libps/worker/trainer.h"
#include "test/bench/bench_util.h"
#include "test/bench/cluster_run.h"

namespace {

using ps::bench::Check;
using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::FlagValue;
using ps::bench::Must;
using ps::bench::Seconds;
namespace fs = std::filesystem;

using ps::bench::Median;

struct RunResult {
  double examples_per_sec = 0;             // median window
  double overall = 0;                      // all timed windows together
  std::vector<ps::bench::Phases> workers;  // per worker
  double eval_accuracy = -1;  // the chief's final evaluation (clusters with eval_data kept)
  // CPU ms per global step of each process ("chief", "ps:0", "worker:0", ..., "launcher";
  // (a): "local"), over the timed windows.
  std::vector<std::pair<std::string, double>> cpu_ms_per_step;
};

// ---------------------------------------------------------------- (a) no network

// This process's CPU seconds (every thread), at nanosecond resolution.
double ProcessCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

RunResult RunLocal(const ps::job::JobSpec& job, int64_t warmup, int64_t steps, int64_t window) {
  auto model = Must(ps::model::BuildModel(job.model, "job.model"), "model");
  auto plan = Must(ps::job::PlanVariables(job, *model, 1), "plan");
  ps::server::Store store;
  Check(store.Configure(job.optimizer), "Configure");
  for (const auto& s : plan.shards) {
    auto v = std::find_if(plan.variables.begin(), plan.variables.end(),
                          [&](const auto& d) { return d.name == s.layout.var; });
    Check(store.Create({.layout = s.layout, .init = v->init, .seed = job.seed}),
          "Create " + s.layout.var);
  }
  std::vector<std::unique_ptr<ps::client::PsLink>> links;
  links.push_back(ps::client::LocalPsLink(&store));
  auto trainer = Must(ps::worker::MakeTrainer(job, 0, 1, 1, std::move(links)), "MakeTrainer");
  ps::worker::StepStats warm, stats;
  Check(trainer->RunSteps(0, static_cast<int>(warmup), &warm), "warm-up steps");
  std::vector<double> rates;
  double total_sec = 0, cpu_sec = 0;
  for (int64_t done = 0; done < steps; done += window) {
    int n = static_cast<int>(std::min(window, steps - done));
    int64_t before = stats.examples;
    auto t0 = Clock::now();
    double cpu0 = ProcessCpuSeconds();
    Check(trainer->RunSteps(warmup + done, n, &stats), "steps");
    cpu_sec += ProcessCpuSeconds() - cpu0;
    double sec = std::chrono::duration<double>(Clock::now() - t0).count();
    rates.push_back(static_cast<double>(stats.examples - before) / sec);
    total_sec += sec;
  }
  RunResult r;
  r.cpu_ms_per_step.emplace_back("local", 1000 * cpu_sec / static_cast<double>(steps));
  r.examples_per_sec = Median(rates);
  r.overall = static_cast<double>(stats.examples) / total_sec;
  double n = static_cast<double>(std::max<int64_t>(1, stats.steps));
  r.workers.push_back({1000 * stats.data_seconds / n, 1000 * stats.pull_seconds / n,
                       1000 * stats.compute_seconds / n, 1000 * stats.push_seconds / n});
  return r;
}

// ---------------------------------------------------------------- (b), (c) real daemons

struct ClusterRunOptions {
  std::string pstrain;
  int64_t steps = 3000;
  int64_t log_every = 100;
  int64_t skip_steps = 500;
  int steps_per_dispatch = 0;     // 0: as in the job file
  int dispatches_per_worker = 0;  // 0: as in the job file
  bool keep = false;
  bool keep_eval = false;  // keep the job's eval_data: the chief evaluates the final model
};

RunResult RunCluster(const ps::job::JobSpec& job, int workers, const ClusterRunOptions& o) {
  ps::Json j = job.raw;
  if (!o.keep_eval) j.erase("eval_data");
  j["steps"] = o.steps;
  j["log_every_steps"] = o.log_every;
  if (o.steps_per_dispatch > 0) j["steps_per_dispatch"] = o.steps_per_dispatch;
  if (o.dispatches_per_worker > 0) j["dispatches_per_worker"] = o.dispatches_per_worker;
  ps::bench::LocalClusterRun run =
      ps::bench::RunLocalCluster(o.pstrain, ps::bench::LocalClusterJson(1, workers), j);
  const fs::path dir = run.dir;
  std::vector<ps::Json> lines;
  for (const auto& l : run.lines) lines.push_back(l.metrics);
  double eval_accuracy = run.eval_accuracy;
  // Windows between consecutive lines, the first starting at the first line past skip.
  std::vector<double> rates;
  const ps::Json* first = nullptr;
  const ps::Json* prev = nullptr;
  for (const auto& l : lines) {
    if (l["step"].get<int64_t>() < o.skip_steps) continue;
    if (prev != nullptr) {
      double ex = static_cast<double>(l["step"].get<int64_t>() - (*prev)["step"].get<int64_t>()) *
                  static_cast<double>(job.batch_size);
      double sec = l["elapsed_sec"].get<double>() - (*prev)["elapsed_sec"].get<double>();
      if (sec > 0) rates.push_back(ex / sec);
    } else {
      first = &l;
    }
    prev = &l;
  }
  if (rates.size() < 3) {
    Die("too few log lines past step " + std::to_string(o.skip_steps) + " in " +
        (dir / "model").string());
  }
  const ps::Json& last = lines.back();
  double examples =
      static_cast<double>(last["step"].get<int64_t>() - (*first)["step"].get<int64_t>()) *
      static_cast<double>(job.batch_size);
  double sec = last["elapsed_sec"].get<double>() - (*first)["elapsed_sec"].get<double>();
  RunResult r;
  r.examples_per_sec = Median(rates);
  r.overall = examples / sec;
  r.eval_accuracy = eval_accuracy;
  r.workers = ps::bench::WorkerPhases(run, o.skip_steps);
  // CPU per step of each process: from the first line past skip to the last one at which
  // every process was still running.
  auto [cpu_from, cpu_to] = ps::bench::CpuWindow(run, o.skip_steps);
  r.cpu_ms_per_step = ps::bench::CpuMsPerStep(run, cpu_from, cpu_to);
  if (o.keep) {
    std::printf("kept %s\n", dir.c_str());
  } else {
    fs::remove_all(dir);
  }
  return r;
}

std::string PhaseText(const RunResult& r) {
  std::string out;
  char buf[160];
  for (const auto& p : r.workers) {
    std::snprintf(buf, sizeof buf, "%s%.2f/%.2f/%.2f/%.2f", out.empty() ? "" : "  ", p.data_ms,
                  p.pull_ms, p.compute_ms, p.push_ms);
    out += buf;
  }
  return out;
}

struct Options {
  std::string job;
  std::string compare_job;  // --compare-job: see the file comment
  int pairs = 2;
  std::string base_dir;  // empty: the job's
  bool lazy = false;
  ClusterRunOptions cluster;  // steps 3000, log every 100, rate past step 500
  int64_t local_steps = 1000;
  int64_t warmup_steps = 50;
  std::vector<int> workers = {1, 2};
  int rounds = 1;  // --rounds: the whole sequence again, medians at the end
};

Options Parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return FlagValue(argc, argv, &i); };
    if (a == "--job")
      o.job = next();
    else if (a == "--pstrain")
      o.cluster.pstrain = next();
    else if (a == "--local-steps")
      o.local_steps = std::atoll(next().c_str());
    else if (a == "--warmup-steps")
      o.warmup_steps = std::atoll(next().c_str());
    else if (a == "--steps")
      o.cluster.steps = std::atoll(next().c_str());
    else if (a == "--log-every")
      o.cluster.log_every = std::atoll(next().c_str());
    else if (a == "--skip-steps")
      o.cluster.skip_steps = std::atoll(next().c_str());
    else if (a == "--steps-per-dispatch")
      o.cluster.steps_per_dispatch = std::atoi(next().c_str());
    else if (a == "--dispatches-per-worker")
      o.cluster.dispatches_per_worker = std::atoi(next().c_str());
    else if (a == "--keep")
      o.cluster.keep = true;
    else if (a == "--base-dir")
      o.base_dir = next();
    else if (a == "--lazy")
      o.lazy = true;
    else if (a == "--compare-job")
      o.compare_job = next();
    else if (a == "--pairs")
      o.pairs = std::atoi(next().c_str());
    else if (a == "--rounds")
      o.rounds = std::atoi(next().c_str());
    else if (a == "--workers") {
      o.workers.clear();
      std::stringstream ss(next());
      for (std::string w; std::getline(ss, w, ',');) o.workers.push_back(std::atoi(w.c_str()));
    } else {
      Die("unknown flag " + a);
    }
  }
  if (o.job.empty() || o.cluster.pstrain.empty()) Die("--job and --pstrain are required");
  if (o.pairs < 1) Die("bad --pairs");
  if (o.rounds < 1) Die("bad --rounds");
  if (o.rounds > 1 && !o.compare_job.empty())
    Die("--rounds does not apply to --compare-job (use --pairs)");
  if (o.local_steps < 1 || o.warmup_steps < 0 || o.cluster.steps < 1 || o.cluster.log_every < 1)
    Die("bad flag value");
  for (int w : o.workers) {
    if (w < 1) Die("bad --workers");
  }
  o.cluster.pstrain = fs::absolute(o.cluster.pstrain).string();
  return o;
}

// The job file `path` with the --base-dir and --lazy overrides applied.
ps::job::JobSpec LoadJob(const Options& o, const std::string& path) {
  ps::Json j = Must(ps::ReadJsonFile(path), path);
  if (!j.is_object()) Die(path + ": expected a JSON object");
  if (!o.base_dir.empty()) j["base_dir"] = fs::absolute(o.base_dir).string();
  if (o.lazy) {
    ps::Json& model = j["model"];
    if (model.value("type", "") == "logistic_regression") {
      model["lazy"] = true;
    } else if (model.contains("fields") && model["fields"].is_array()) {
      std::vector<std::string> seen;
      for (size_t i = 0; i < model["fields"].size(); ++i) {
        ps::Json& f = model["fields"][i];
        std::string table = f.value("table", "embedding_" + std::to_string(i));
        if (std::find(seen.begin(), seen.end(), table) != seen.end()) continue;
        seen.push_back(table);
        f["lazy"] = true;
      }
    } else {
      Die("--lazy: the job's model has no sparse tables");
    }
  }
  return Must(ps::job::ParseJob(j, fs::absolute(path).parent_path().string()), path);
}

// --compare-job: the two jobs alternately, each pair (a) then 1 ps + 1 worker with the
// final evaluation; the ratios are medians over the pairs.
int CompareJobs(const Options& opt, const ps::job::JobSpec& base, const ps::job::JobSpec& other) {
  ClusterRunOptions co = opt.cluster;
  co.keep_eval = true;
  std::vector<double> local_ratio, cluster_ratio;
  double accuracy[2] = {0, 0};  // summed over pairs
  std::printf("%-6s %-44s %12s %12s %9s\n", "pair", "job", "(a) ex/s", "(b) ex/s", "eval acc");
  for (int p = 0; p < opt.pairs; ++p) {
    RunResult r[2][2];  // [job][local, cluster]
    const ps::job::JobSpec* jobs[2] = {&base, &other};
    const std::string names[2] = {opt.job, opt.compare_job};
    for (int k = 0; k < 2; ++k) {
      r[k][0] = RunLocal(*jobs[k], opt.warmup_steps, opt.local_steps, opt.cluster.log_every);
      r[k][1] = RunCluster(*jobs[k], 1, co);
      std::printf("%-6d %-44s %12.0f %12.0f %9.4f\n", p + 1, names[k].c_str(),
                  r[k][0].examples_per_sec, r[k][1].examples_per_sec, r[k][1].eval_accuracy);
      std::fflush(stdout);
    }
    local_ratio.push_back(r[1][0].examples_per_sec / r[0][0].examples_per_sec);
    cluster_ratio.push_back(r[1][1].examples_per_sec / r[0][1].examples_per_sec);
    if (r[0][1].eval_accuracy < 0 || r[1][1].eval_accuracy < 0)
      Die("a job without eval_data: no accuracy to compare");
    for (int k = 0; k < 2; ++k) accuracy[k] += r[k][1].eval_accuracy / opt.pairs;
  }
  std::printf("load average at end: %s\n", ps::bench::LoadAverage().c_str());
  std::printf(
      "summary: %s / %s over %d pair(s), median: (a) ex/s %.3f; (b) 1 ps + 1 worker ex/s %.3f; "
      "mean eval accuracy %.4f vs %.4f\n",
      opt.compare_job.c_str(), opt.job.c_str(), opt.pairs, Median(local_ratio),
      Median(cluster_ratio), accuracy[1], accuracy[0]);
  return 0;
}

// One round: (a), then each cluster followed by (a) again; prints its tables and returns
// the summary's ratios, named, in order ((b)/(a), (c)/(a), ..., then (c)/(b), ...).
std::vector<std::pair<std::string, double>> RunRound(const Options& opt,
                                                     const ps::job::JobSpec& job,
                                                     std::string* summary_out) {
  // Streamed train_data ("files") has no in-process run: the clusters only.
  const bool streamed = job.train_data.contains("files");
  auto local = [&] {
    return streamed ? RunResult{}
                    : RunLocal(job, opt.warmup_steps, opt.local_steps, opt.cluster.log_every);
  };
  std::vector<RunResult> locals{local()};
  std::vector<std::pair<int, RunResult>> clusters;
  for (int w : opt.workers) {
    clusters.emplace_back(w, RunCluster(job, w, opt.cluster));
    locals.push_back(local());
  }
  if (streamed) std::printf("(a) local: not run (streamed train_data)\n");

  std::printf(
      "ex/s: median of %lld-step windows (all windows together in brackets); vs (a): against the mean of\n"
      "the (a) runs just before and after\n",
      static_cast<long long>(opt.cluster.log_every));
  std::printf("%-24s %16s %7s   %s\n", "setup", "ex/s", "vs (a)",
              "per step ms: data/pull/compute/push (per worker)");
  auto row = [](const std::string& name, const RunResult& r, const std::string& ratio) {
    char rate[64];
    std::snprintf(rate, sizeof rate, "%.0f (%.0f)", r.examples_per_sec, r.overall);
    std::printf("%-24s %16s %7s   %s\n", name.c_str(), rate, ratio.c_str(), PhaseText(r).c_str());
  };
  if (!streamed) row("(a) local, run 1", locals[0], "");
  std::string summary = "summary:";
  std::vector<std::pair<std::string, double>> ratios;
  char label = 'b';
  for (size_t i = 0; i < clusters.size(); ++i) {
    const auto& [w, r] = clusters[i];
    double base = (locals[i].examples_per_sec + locals[i + 1].examples_per_sec) / 2;
    double ratio = r.examples_per_sec / base;
    std::string name =
        std::string("(") + label + ") 1 ps + " + std::to_string(w) + " worker" + (w > 1 ? "s" : "");
    char ratio_text[32];
    std::snprintf(ratio_text, sizeof ratio_text, "%.2f", ratio);
    row(name, r, streamed ? "" : ratio_text);
    if (streamed) {
      ++label;
      continue;
    }
    row("(a) local, run " + std::to_string(i + 2), locals[i + 1], "");
    char buf[128];
    std::snprintf(buf, sizeof buf, "%s (%c)/(a) = %.2f (%.0f vs %.0f ex/s)", i == 0 ? "" : ";",
                  label, ratio, r.examples_per_sec, base);
    summary += buf;
    ratios.emplace_back(std::string("(") + label + ")/(a)", ratio);
    ++label;
  }
  // Scaling: every cluster against the first one (1 worker when --workers starts with 1).
  for (size_t i = 1; i < clusters.size(); ++i) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "; (%c)/(b) = %.2f (%d vs %d workers)",
                  static_cast<char>('b' + i),
                  clusters[i].second.examples_per_sec / clusters[0].second.examples_per_sec,
                  clusters[i].first, clusters[0].first);
    summary += buf;
    ratios.emplace_back(std::string("(") + static_cast<char>('b' + i) + ")/(b)",
                        clusters[i].second.examples_per_sec / clusters[0].second.examples_per_sec);
  }
  // Where the CPU goes: what a target needs against what 2 cores can give.
  std::printf(
      "CPU ms per global step, each process over the timed windows (2 cores give at most 2 CPU ms per ms):\n");
  auto cpu_row = [&](const std::string& name, const RunResult& r) {
    double total = 0;
    std::string parts;
    char buf[96];
    for (const auto& [task, ms] : r.cpu_ms_per_step) {
      std::snprintf(buf, sizeof buf, "%s%s %.3f", parts.empty() ? "" : ", ", task.c_str(), ms);
      parts += buf;
      total += ms;
    }
    double wall_ms = 1000.0 * static_cast<double>(job.batch_size) / r.examples_per_sec;
    std::printf("  %-24s %s; total %.3f ms CPU in %.3f ms wall per step (%.2f cores busy)\n",
                name.c_str(), parts.c_str(), total, wall_ms, total / wall_ms);
  };
  if (!streamed) cpu_row("(a) local, run 1", locals[0]);
  for (size_t i = 0; i < clusters.size(); ++i) {
    const auto& [w, r] = clusters[i];
    cpu_row(std::string("(") + static_cast<char>('b' + i) + ") 1 ps + " + std::to_string(w) +
                " worker" + (w > 1 ? "s" : ""),
            r);
  }
  *summary_out = summary;
  return ratios;
}

}  // namespace

int main(int argc, char** argv) {
  Options opt = Parse(argc, argv);
  ps::model::SetBlasThreads(1);
  auto job = LoadJob(opt, opt.job);
  std::printf("load average at start: %s (%u cores)\n", ps::bench::LoadAverage().c_str(),
              std::thread::hardware_concurrency());
  std::printf(
      "job %s%s: batch %lld; local %lld steps (+%lld warm-up); clusters %lld steps, rate after step %lld\n",
      opt.job.c_str(), opt.lazy ? " (lazy tables)" : "", static_cast<long long>(job.batch_size),
      static_cast<long long>(opt.local_steps), static_cast<long long>(opt.warmup_steps),
      static_cast<long long>(opt.cluster.steps), static_cast<long long>(opt.cluster.skip_steps));
  std::fflush(stdout);
  if (!opt.compare_job.empty()) return CompareJobs(opt, job, LoadJob(opt, opt.compare_job));

  std::vector<std::vector<std::pair<std::string, double>>> ratios;  // [round][ratio]
  std::string summary;
  for (int round = 0; round < opt.rounds; ++round) {
    if (opt.rounds > 1) std::printf("round %d of %d\n", round + 1, opt.rounds);
    ratios.push_back(RunRound(opt, job, &summary));
    std::printf("load average at end: %s\n", ps::bench::LoadAverage().c_str());
    std::printf("%s\n", summary.c_str());
    std::fflush(stdout);
  }
  if (opt.rounds > 1) {
    std::string line =
        "summary over " + std::to_string(opt.rounds) + " rounds, median (lowest-highest):";
    for (size_t k = 0; k < ratios[0].size(); ++k) {
      std::vector<double> v;
      for (const auto& r : ratios) v.push_back(r[k].second);
      char buf[96];
      std::snprintf(buf, sizeof buf, "%s %s = %.2f (%.2f-%.2f)", k == 0 ? "" : ";",
                    ratios[0][k].first.c_str(), Median(v), *std::min_element(v.begin(), v.end()),
                    *std::max_element(v.begin(), v.end()));
      line += buf;
    }
    std::printf("%s\n", line.c_str());
  }
  return 0;
}
