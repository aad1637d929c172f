// Input pipeline benchmarks. Not a test: run by scripts/bench-data.sh on data written by
// `pstrain gen-ctr` (DIR/ctr.json names the files and the data objects per format).
//
//   bench_data parse --data DIR [--records 500000] [--repeat 3]
//     (1) tf.Example decode only, one core: the first --records TFRecord payloads of the
//         tfrecord train files, held in memory, decoded --repeat times (best run);
//     (2) read + parse through the streaming pipeline (one reader thread, no shuffle,
//         batches of 256), train files of every format in ctr.json, from the page cache.
//   bench_data stream --data DIR [--format tfrecord] [--shuffle-buffer 10000]
//     One shuffled pass over every train file of the format, batches of 256, as a worker
//     reads them; prints the bytes read, examples/s and the process's peak RSS
//     (getrusage ru_maxrss) — the memory a streaming reader needs whatever the data size.
//   bench_data write-job --job FILE --data DIR --format F --out FILE
//     The job file with base_dir = DIR and train_data / eval_data = ctr.json's data
//     objects for format F (the same examples in every format).
//   bench_data auc --job FILE --pstrain PATH [--workers 2] [--update JSON]
//     Runs the job under `pstrain local` (2 ps, --workers workers, free ports, a fresh
//     model_dir) and prints the chief's final evaluation (AUC, examples) and wall time.
//     --update replaces the job's "update" object (scripts/bench-hybrid.sh).
#include <sys/resource.h>
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "libps/core/json.h"
#include "libps/data/byte_stream.h"
#include "libps/data/dataset.h"
#include "libps/data/tf_example.h"
#include "libps/data/tfrecord.h"
#include "test/bench/bench_util.h"

namespace {

using ps::Json;
using ps::bench::Check;
using ps::bench::Clock;
using ps::bench::Die;
using ps::bench::FlagValue;
using ps::bench::Must;
using ps::bench::Seconds;
namespace fs = std::filesystem;

struct Options {
  std::string command, data, format = "tfrecord", job, out, pstrain, update;
  int workers = 2;
  int64_t records = 500000;
  int repeat = 3;
  int64_t shuffle_buffer = 10000;
};

Options Parse(int argc, char** argv) {
  Options o;
  if (argc < 2) Die("usage: bench_data parse|stream|write-job --data DIR ...");
  o.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&] { return FlagValue(argc, argv, &i); };
    if (a == "--data")
      o.data = next();
    else if (a == "--format")
      o.format = next();
    else if (a == "--job")
      o.job = next();
    else if (a == "--out")
      o.out = next();
    else if (a == "--pstrain")
      o.pstrain = next();
    else if (a == "--update")
      o.update = next();
    else if (a == "--workers")
      o.workers = std::atoi(next().c_str());
    else if (a == "--records")
      o.records = std::atoll(next().c_str());
    else if (a == "--repeat")
      o.repeat = std::atoi(next().c_str());
    else if (a == "--shuffle-buffer")
      o.shuffle_buffer = std::atoll(next().c_str());
    else
      Die("unknown flag " + a);
  }
  if (o.data.empty() && o.command != "auc") Die("--data DIR is required");
  if (o.records < 1 || o.repeat < 1 || o.shuffle_buffer < 0) Die("bad flag value");
  return o;
}

Json Outputs(const Options& o) {
  Json ctr = Must(ps::ReadJsonFile((fs::path(o.data) / "ctr.json").string()), "ctr.json");
  if (!ctr.contains("outputs")) Die(o.data + "/ctr.json has no \"outputs\" (an older gen-ctr?)");
  return ctr["outputs"];
}

// CPU time of the calling thread: examples per CPU second do not depend on what else
// the machine runs.
double ThreadCpuSeconds() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

double PeakRssMiB() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) / 1024.0;  // KiB on Linux
}

uint64_t FileBytes(const Json& data_config, const std::string& dir) {
  uint64_t bytes = 0;
  for (const auto& f : data_config["files"])
    bytes += fs::file_size(fs::path(dir) / f.get<std::string>());
  return bytes;
}

// One pass over config's files: examples, seconds.
std::pair<int64_t, double> Pass(const Json& config, const std::string& dir, bool shuffle) {
  ps::data::DatasetOptions opts;
  opts.base_dir = dir;
  opts.shuffle = shuffle;
  opts.repeat = false;
  opts.seed = 1;
  auto t0 = Clock::now();
  auto d = Must(ps::data::OpenDataset(config, "data", opts), "open");
  int64_t n = 0;
  for (;;) {
    auto b = Must(d->Next(256), "next");
    if (b.size == 0) break;
    n += b.size;
  }
  return {n, Seconds(t0, Clock::now())};
}

int ParseCommand(const Options& o) {
  const Json outputs = Outputs(o);
  if (!outputs.contains("tfrecord"))
    Die("no tfrecord output in ctr.json (gen-ctr --format ...,tfrecord)");
  const Json& config = outputs["tfrecord"]["train_data"];
  // (1) decode only.
  std::vector<std::string> records;
  uint64_t bytes = 0;
  for (const auto& f : config["files"]) {
    auto stream = Must(
        ps::data::ByteStream::Open((fs::path(o.data) / f.get<std::string>()).string()), "open");
    ps::data::TfRecordReader reader(std::move(stream));
    std::string_view rec;
    while (static_cast<int64_t>(records.size()) < o.records && Must(reader.Next(&rec), "read")) {
      records.emplace_back(rec);
      bytes += rec.size();
    }
  }
  if (records.empty()) Die("no records");
  ps::JsonReader r(config, "tfrecord");
  auto spec = std::make_shared<const ps::data::TfExampleSpec>(
      Must(ps::data::ParseTfExampleSpec(r), "spec"));
  ps::data::TfExampleDecoder decoder(spec);
  ps::data::Row row;
  double best = 0, best_cpu = 0;
  int64_t ids = 0;
  for (int rep = 0; rep < o.repeat; ++rep) {
    ids = 0;
    auto t0 = Clock::now();
    const double c0 = ThreadCpuSeconds();
    for (const std::string& rec : records) {
      Check(decoder.Decode(rec, &row), "decode");
      ids += static_cast<int64_t>(row.ids.size());
    }
    const auto n = static_cast<double>(records.size());
    best = std::max(best, n / Seconds(t0, Clock::now()));
    best_cpu = std::max(best_cpu, n / (ThreadCpuSeconds() - c0));
  }
  std::printf(
      "tf.Example decode only, one thread: %zu records (%.0f bytes, %.1f ids each): %.0f examples per "
      "CPU second, %.0f examples/s wall (best of %d)\n",
      records.size(), static_cast<double>(bytes) / static_cast<double>(records.size()),
      static_cast<double>(ids) / static_cast<double>(records.size()), best_cpu, best, o.repeat);
  // (2) the whole pipeline, per format.
  std::printf("%-12s %12s %10s %14s %10s\n", "format", "examples", "MB", "examples/s", "MB/s");
  for (const auto& [name, out] : outputs.items()) {
    const Json& train = out["train_data"];
    const double mb = static_cast<double>(FileBytes(train, o.data)) / 1e6;
    auto [n, sec] = Pass(train, o.data, false);
    std::printf("%-12s %12lld %10.1f %14.0f %10.1f\n", name.c_str(), static_cast<long long>(n), mb,
                static_cast<double>(n) / sec, mb / sec);
    std::fflush(stdout);
  }
  return 0;
}

int StreamCommand(const Options& o) {
  const Json outputs = Outputs(o);
  if (!outputs.contains(o.format)) Die("no " + o.format + " output in ctr.json");
  Json config = outputs[o.format]["train_data"];
  config["shuffle_buffer"] = o.shuffle_buffer;
  const double rss_before = PeakRssMiB();
  const double gb = static_cast<double>(FileBytes(config, o.data)) / 1e9;
  auto [n, sec] = Pass(config, o.data, true);
  std::printf(
      "streamed %s: %zu files, %.2f GB, %lld examples in %.1f s (%.0f examples/s, %.0f MB/s), "
      "shuffle_buffer %lld\n",
      o.format.c_str(), config["files"].size(), gb, static_cast<long long>(n), sec,
      static_cast<double>(n) / sec, gb * 1e3 / sec, static_cast<long long>(o.shuffle_buffer));
  std::printf("peak RSS: %.1f MiB (%.1f MiB before opening the data set)\n", PeakRssMiB(),
              rss_before);
  return 0;
}

int WriteJobCommand(const Options& o) {
  if (o.job.empty() || o.out.empty()) Die("write-job needs --job FILE and --out FILE");
  const Json outputs = Outputs(o);
  if (!outputs.contains(o.format)) Die("no " + o.format + " output in ctr.json");
  Json job = Must(ps::ReadJsonFile(o.job), o.job);
  job["base_dir"] = fs::absolute(o.data).string();
  job["train_data"] = outputs[o.format]["train_data"];
  job["eval_data"] = outputs[o.format]["eval_data"];
  std::ofstream f(o.out);
  f << job.dump(2) << "\n";
  if (!f) Die("cannot write " + o.out);
  return 0;
}

int AucCommand(const Options& o) {
  if (o.job.empty() || o.pstrain.empty() || o.workers < 1)
    Die("auc needs --job FILE, --pstrain PATH, --workers N >= 1");
  std::string tmpl = (fs::temp_directory_path() / "bench-data-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) Die("mkdtemp failed");
  const fs::path dir = tmpl;
  auto ports = ps::bench::FreePorts(3 + o.workers);
  auto addr = [&](size_t i) { return "127.0.0.1:" + std::to_string(ports[i]); };
  Json cluster = {
      {"cluster", {{"chief", {addr(0)}}, {"ps", {addr(1), addr(2)}}, {"worker", Json::array()}}}};
  for (int w = 0; w < o.workers; ++w)
    cluster["cluster"]["worker"].push_back(addr(3 + static_cast<size_t>(w)));
  Json job = Must(ps::ReadJsonFile(o.job), o.job);
  job["model_dir"] = (dir / "model").string();
  if (!o.update.empty()) job["update"] = Must(ps::ParseJson(o.update, "--update"), "--update");
  ps::bench::WriteFile(dir / "cluster.json", cluster.dump(2));
  ps::bench::WriteFile(dir / "job.json", job.dump(2));
  auto t0 = Clock::now();
  int rc =
      ps::bench::RunProcess({fs::absolute(o.pstrain).string(), "local", "--cluster",
                             (dir / "cluster.json").string(), "--job", (dir / "job.json").string()},
                            dir / "pstrain.log");
  const double sec = Seconds(t0, Clock::now());
  if (rc != 0)
    Die("pstrain local exited " + std::to_string(rc) + ":\n" +
        ps::bench::Tail(dir / "pstrain.log", 20));
  std::ifstream f(dir / "model" / "train_metrics.jsonl");
  Json final_eval;
  for (std::string line; std::getline(f, line);) {
    auto j = ps::ParseJson(line, "train_metrics.jsonl");
    if (j.ok() && j->contains("final_eval")) final_eval = (*j)["final_eval"];
  }
  if (!final_eval.contains("auc")) Die("no final_eval auc in " + (dir / "model").string());
  std::printf("%-12s %-8s auc %.5f on %lld eval examples, %lld steps in %.1f s\n",
              job["train_data"].value("format", "?").c_str(),
              job["train_data"].contains("files") ? "streamed" : "memory",
              final_eval["auc"].get<double>(),
              static_cast<long long>(final_eval["examples"].get<int64_t>()),
              static_cast<long long>(final_eval["step"].get<int64_t>()), sec);
  fs::remove_all(dir);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = Parse(argc, argv);
  if (o.command == "parse") return ParseCommand(o);
  if (o.command == "stream") return StreamCommand(o);
  if (o.command == "write-job") return WriteJobCommand(o);
  if (o.command == "auc") return AucCommand(o);
  Die("unknown command " + o.command + " (parse, stream, write-job, auc)");
}
