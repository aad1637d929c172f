// A serving process in miniature: loads an inference bundle (`pstrain export`) with the
// public serving API (libps/serving/serving.h, nothing else from pstrain), reads one batch
// of examples, scores it and prints one line per example in `pstrain predict`'s format
// (each head's outputs separated by spaces, heads by a tab, "%.9g").
//
//   serving_example [--refresh-from MODEL_DIR] BUNDLE_DIR DATA_FILE [N]
//
// DATA_FILE holds a data object as in a job file ({"format": "libsvm", "path": ...});
// its relative paths resolve against its directory. N (default 256): the batch size, the
// first N examples. With --refresh-from, the loaded bundle is first brought up to the
// newest committed delta checkpoint of MODEL_DIR (the training model dir it was exported
// from) with Bundle::Refresh, as a serving process would do periodically from a thread of
// its own while its scorers keep scoring. Exit 0 on success, 1 on any error (printed on
// stderr), 2 for bad usage.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "libps/serving/serving.h"

namespace {

int Fail(const ps::Status& st) {
  std::fprintf(stderr, "serving_example: %s\n", st.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string refresh_from;
  if (argc >= 2 && std::string(argv[1]) == "--help") {
    std::printf(
        "usage: serving_example [--refresh-from MODEL_DIR] BUNDLE_DIR DATA_FILE [N]\n"
        "Loads an inference bundle, optionally refreshes it from MODEL_DIR's newer delta\n"
        "checkpoints, and prints the scores of the first N (256) examples of DATA_FILE.\n");
    return 0;
  }
  if (argc >= 3 && std::string(argv[1]) == "--refresh-from") {
    refresh_from = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc < 3 || argc > 4) {
    std::fprintf(stderr,
                 "usage: serving_example [--refresh-from MODEL_DIR] BUNDLE_DIR DATA_FILE [N]\n");
    return 2;
  }
  const long n = argc == 4 ? std::strtol(argv[3], nullptr, 10) : 256;
  if (n < 1) {
    std::fprintf(stderr, "serving_example: N must be a positive number\n");
    return 2;
  }
  std::ifstream in(argv[2]);
  if (!in) {
    std::fprintf(stderr, "serving_example: cannot read %s\n", argv[2]);
    return 1;
  }
  std::stringstream config;
  config << in.rdbuf();

  // Once per process: the bundle's parameters, shared by every scoring thread.
  auto bundle = ps::serving::Bundle::Load(argv[1]);
  if (!bundle.ok()) return Fail(bundle.status());
  if (!refresh_from.empty()) {
    // Any time, from any thread: scorers keep scoring meanwhile, each batch with the
    // parameters wholly before or after the refresh.
    auto refreshed = (*bundle)->Refresh(refresh_from);
    if (!refreshed.ok()) return Fail(refreshed.status());  // e.g. a newer full checkpoint: reload
    for (const auto& w : refreshed->warnings)
      std::fprintf(stderr, "serving_example: warning: %s\n", w.c_str());
    std::fprintf(
        stderr,
        "serving_example: refreshed from step %lld to %lld (%zu deltas of ckpt-%lld; scoring paused "
        "0 s: the new version was built beside it in %.3f s)\n",
        static_cast<long long>(refreshed->from_step), static_cast<long long>(refreshed->to_step),
        refreshed->applied.size(), static_cast<long long>(refreshed->base_step),
        refreshed->build_seconds);
  }
  const ps::serving::BundleInfo info = (*bundle)->info();  // a snapshot
  // Once per thread.
  auto scorer = (*bundle)->NewScorer();
  if (!scorer.ok()) return Fail(scorer.status());

  const std::string base_dir = std::filesystem::absolute(argv[2]).parent_path().string();
  auto reader = ps::serving::ExampleReader::Open(config.str(), base_dir);
  if (!reader.ok()) return Fail(reader.status());
  auto batch = (*reader)->Next(n);
  if (!batch.ok()) return Fail(batch.status());

  // Per request.
  auto scores = (*scorer)->Score(*batch);
  if (!scores.ok()) return Fail(scores.status());
  for (int64_t i = 0; i < scores->examples; ++i) {
    std::string line;
    for (size_t h = 0; h < scores->heads.size(); ++h) {
      const auto outputs = static_cast<size_t>(info.heads[h].outputs);
      for (size_t j = 0; j < outputs; ++j) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.9g",
                      static_cast<double>(scores->heads[h][static_cast<size_t>(i) * outputs + j]));
        if (!line.empty()) line += j == 0 ? '\t' : ' ';
        line += buf;
      }
    }
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);  // the scores before the summary, when both go to one pipe
  std::fprintf(
      stderr,
      "serving_example: scored %lld examples with the bundle of step %lld (%zu variables)\n",
      static_cast<long long>(scores->examples), static_cast<long long>(info.source_step),
      info.variables.size());
  return 0;
}
