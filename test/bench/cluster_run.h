// Shared by the benchmark programs that train on real daemons: runs `pstrain local` on a
// cluster of 127.0.0.1 free ports and, each time the chief appends a progress line to
// model_dir/train_metrics.jsonl, samples the CPU time every daemon (and the launcher) has
// used so far, so that a window between two lines gives both the steps and each
// process's CPU seconds spent on them.
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "libps/cluster/tf_config.h"
#include "libps/core/json.h"
#include "test/bench/bench_util.h"

namespace ps::bench {

// CPU seconds (user + system, every thread) process `pid` has used so far, from
// /proc/<pid>/stat (clock ticks: 10 ms resolution, so use windows of seconds); -1 when
// the process is gone.
inline double ProcessCpuSeconds(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(f, text)) return -1;
  // The command name (field 2) may hold spaces: fields are counted after its ')'.
  size_t close = text.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stoull(field);
    if (i == 15) stime = std::stoull(field);
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// The parent pid and command name of `pid` (false when it is gone).
inline bool ProcessParent(pid_t pid, pid_t* ppid, std::string* comm) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string text;
  if (!std::getline(f, text)) return false;
  size_t open = text.find('('), close = text.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close + 4 >= text.size())
    return false;
  *comm = text.substr(open + 1, close - open - 1);
  *ppid = static_cast<pid_t>(std::atol(text.c_str() + close + 4));  // ") S <ppid>"
  return true;
}

// "worker:3": the task in the TF_CONFIG of process `pid`'s environment ("" if none).
inline std::string ProcessTask(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/environ", std::ios::binary);
  for (std::string var; std::getline(f, var, '\0');) {
    if (var.rfind("TF_CONFIG=", 0) != 0) continue;
    auto tf = cluster::ParseTfConfig(var.substr(10));
    return tf.ok() ? tf->task.ToString() : "";
  }
  return "";
}

struct LocalClusterRun {
  std::filesystem::path dir;       // cluster.json, job.json, model/, pstrain.log
  std::vector<std::string> tasks;  // "chief", "ps:0", ..., "worker:0", ..., "launcher"
  struct Line {
    Json metrics;  // a train_metrics.jsonl line with "step"
    // [task] CPU seconds used when the line was seen (< 0: the process was gone); empty
    // before every daemon had been seen.
    std::vector<double> cpu;
    bool all_cpu() const {
      return !cpu.empty() && std::all_of(cpu.begin(), cpu.end(), [](double c) { return c >= 0; });
    }
  };
  std::vector<Line> lines;
  double eval_accuracy = -1;  // the chief's final evaluation, when the job has eval_data
  // With stop_after_sec: the line at which the launcher was told to stop (later lines
  // belong to the drain); else lines.size().
  size_t stop_line = 0;

  // Index of `task` in tasks (-1: none).
  int Task(const std::string& task) const {
    auto it = std::find(tasks.begin(), tasks.end(), task);
    return it == tasks.end() ? -1 : static_cast<int>(it - tasks.begin());
  }
};

// The addresses of a cluster of 1 chief, `num_workers` workers and `num_ps` ps on free
// ports of 127.0.0.1, as a cluster file's object.
inline Json LocalClusterJson(int num_ps, int num_workers) {
  auto ports = FreePorts(1 + num_ps + num_workers);
  auto addr = [&](int i) { return "127.0.0.1:" + std::to_string(ports[static_cast<size_t>(i)]); };
  Json cluster = {{"chief", {addr(0)}}, {"worker", Json::array()}, {"ps", Json::array()}};
  for (int p = 0; p < num_ps; ++p) cluster["ps"].push_back(addr(1 + p));
  for (int w = 0; w < num_workers; ++w) cluster["worker"].push_back(addr(1 + num_ps + w));
  return {{"cluster", cluster}};
}

// Runs `pstrain local` (`pstrain`: its path) with `cluster` (LocalClusterJson) and `job`
// (model_dir is set to the run's directory) to the end; dies with the log's tail if it
// fails. The run's directory is a fresh temporary one, left for the caller to remove.
// stop_after_sec > 0: once a line is that many seconds (the chief's elapsed_sec) past the
// first line, the launcher gets SIGINT, which stops the job gracefully (as `pstrain stop`).
inline LocalClusterRun RunLocalCluster(const std::string& pstrain, const Json& cluster, Json job,
                                       double stop_after_sec = 0) {
  namespace fs = std::filesystem;
  std::string tmpl = (fs::temp_directory_path() / "bench-cluster-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp failed");
  LocalClusterRun run;
  run.dir = tmpl;
  job["model_dir"] = (run.dir / "model").string();
  WriteFile(run.dir / "cluster.json", cluster.dump(2));
  WriteFile(run.dir / "job.json", job.dump(2));
  const size_t daemons = 1 + cluster["cluster"]["worker"].size() + cluster["cluster"]["ps"].size();

  const fs::path log = run.dir / "pstrain.log";
  pid_t launcher = ::fork();
  if (launcher < 0) Die("fork failed");
  if (launcher == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) std::_Exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::string cluster_file = (run.dir / "cluster.json").string(),
                job_file = (run.dir / "job.json").string();
    std::vector<std::string> argv = {pstrain,      "local", "--cluster",
                                     cluster_file, "--job", job_file};
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    std::_Exit(127);
  }

  std::vector<pid_t> pids;  // [task]
  std::map<std::string, pid_t> found;
  auto discover = [&] {
    DIR* proc = ::opendir("/proc");
    if (proc == nullptr) return;
    while (dirent* e = ::readdir(proc)) {
      pid_t pid = static_cast<pid_t>(std::atol(e->d_name));
      pid_t ppid = 0;
      std::string comm;
      if (pid <= 0 || !ProcessParent(pid, &ppid, &comm) || ppid != launcher ||
          comm.rfind("pstrain-", 0) != 0)
        continue;
      std::string task = ProcessTask(pid);
      if (!task.empty()) found[task] = pid;
    }
    ::closedir(proc);
    if (found.size() < daemons) return;
    // Chief, then ps, then workers, each by index; the launcher last.
    for (const char* type : {"chief", "ps", "worker"}) {
      for (size_t i = 0; i < daemons; ++i) {
        std::string task = std::string(type) + ":" + std::to_string(i);
        if (auto it = found.find(task); it != found.end()) {
          run.tasks.push_back(std::string(type) == "chief" ? "chief" : task);
          pids.push_back(it->second);
        }
      }
    }
    run.tasks.push_back("launcher");
    pids.push_back(launcher);
  };

  const fs::path metrics = run.dir / "model" / "train_metrics.jsonl";
  std::ifstream in;
  std::string partial;
  auto read_lines = [&](bool sample) {
    if (!in.is_open()) {
      in.open(metrics);
      if (!in.is_open()) return;
    }
    in.clear();
    char buf[65536];
    for (;;) {
      in.read(buf, sizeof buf);
      std::streamsize n = in.gcount();
      if (n <= 0) break;
      partial.append(buf, static_cast<size_t>(n));
    }
    std::vector<double> cpu;  // one sample for every line read now
    bool sampled = false;
    for (size_t nl; (nl = partial.find('\n')) != std::string::npos; partial.erase(0, nl + 1)) {
      auto parsed = ParseJson(partial.substr(0, nl), "train_metrics.jsonl");
      if (!parsed.ok()) continue;
      if (parsed->contains("final_eval"))
        run.eval_accuracy = (*parsed)["final_eval"].value("accuracy", -1.0);
      if (!parsed->contains("step")) continue;
      if (!sampled) {
        for (pid_t pid : pids) cpu.push_back(sample ? ProcessCpuSeconds(pid) : -1);
        sampled = true;
      }
      run.lines.push_back({std::move(*parsed), cpu});
      const double elapsed = run.lines.back().metrics.value("elapsed_sec", 0.0);
      if (stop_after_sec > 0 && run.stop_line == 0 &&
          elapsed >= run.lines.front().metrics.value("elapsed_sec", 0.0) + stop_after_sec) {
        run.stop_line = run.lines.size() - 1;
        ::kill(launcher, SIGINT);
      }
    }
  };

  int status = 0;
  for (int polls = 0;; ++polls) {
    pid_t r = ::waitpid(launcher, &status, WNOHANG);
    if (pids.empty() && polls % 10 == 0) discover();  // a scan of /proc every 20 ms
    read_lines(r != launcher);
    if (r == launcher) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (rc != 0)
    Die("pstrain local exited " + std::to_string(rc) + "; log " + log.string() + ":\n" +
        Tail(log, 20));
  if (pids.empty())
    Die("did not see all " + std::to_string(daemons) + " daemons of " + log.string());
  if (run.stop_line == 0) run.stop_line = run.lines.size();
  return run;
}

// Per-step phase times of a worker (ms), from the chief's progress lines.
struct Phases {
  double data_ms = 0, pull_ms = 0, compute_ms = 0, push_ms = 0;
};

// Each worker's phases (in the order the lines list the workers), averaged over the lines
// at or past `from_step`. Each line's "workers" entries hold step_ms (ms per step) and the
// phases' shares of it (*_frac), over a window of at least 1 s that may overlap the
// previous line's (libps/obs/figures.h); null when the worker finished no step in it.
inline std::vector<Phases> WorkerPhases(const LocalClusterRun& run, int64_t from_step) {
  struct Sums {
    double data = 0, pull = 0, compute = 0, push = 0;
    int n = 0;
  };
  std::vector<std::pair<std::string, Sums>> sums;
  auto num = [](const Json& w, const char* key) {
    return w.contains(key) && w[key].is_number() ? w[key].get<double>() : 0.0;
  };
  for (const auto& line : run.lines) {
    const Json& l = line.metrics;
    if (l["step"].get<int64_t>() < from_step || !l.contains("workers")) continue;
    for (const auto& w : l["workers"]) {
      std::string task = w.value("task", "");
      auto it =
          std::find_if(sums.begin(), sums.end(), [&](const auto& e) { return e.first == task; });
      if (it == sums.end()) it = sums.insert(sums.end(), {task, Sums{}});
      if (!w.contains("step_ms") || !w["step_ms"].is_number()) continue;
      double ms = w["step_ms"].get<double>();
      Sums& su = it->second;
      su.data += ms * num(w, "data_frac");
      su.pull += ms * num(w, "pull_frac");
      su.compute += ms * num(w, "compute_frac");
      su.push += ms * num(w, "push_frac");
      ++su.n;
    }
  }
  std::vector<Phases> out;
  for (const auto& [task, su] : sums) {
    double n = std::max(1, su.n);
    out.push_back({su.data / n, su.pull / n, su.compute / n, su.push / n});
  }
  return out;
}

// The window of lines [from, to] for CPU figures: from the first line at or past
// `from_step` to the last one before run.stop_line (inclusive) at which every process was
// still running; from >= to when there is no such window.
inline std::pair<size_t, size_t> CpuWindow(const LocalClusterRun& run, int64_t from_step) {
  size_t from = run.lines.size(), to = run.lines.size();
  for (size_t i = 0; i < run.lines.size() && i <= run.stop_line; ++i) {
    const auto& l = run.lines[i];
    if (l.metrics["step"].get<int64_t>() < from_step || !l.all_cpu()) continue;
    if (from == run.lines.size()) from = i;
    to = i;
  }
  return {from, to};
}

// Each process's CPU ms per global step between lines `from` and `to` (CpuWindow), in
// run.tasks' order; empty when that is no window.
inline std::vector<std::pair<std::string, double>> CpuMsPerStep(const LocalClusterRun& run,
                                                                size_t from, size_t to) {
  std::vector<std::pair<std::string, double>> out;
  if (from >= to || to >= run.lines.size() || !run.lines[from].all_cpu() ||
      !run.lines[to].all_cpu())
    return out;
  const auto& a = run.lines[from];
  const auto& b = run.lines[to];
  const double steps =
      static_cast<double>(b.metrics["step"].get<int64_t>() - a.metrics["step"].get<int64_t>());
  for (size_t t = 0; t < run.tasks.size(); ++t)
    out.emplace_back(run.tasks[t], 1000 * (b.cpu[t] - a.cpu[t]) / steps);
  return out;
}

}  // namespace ps::bench
