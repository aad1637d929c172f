// pstrain-serve under steady load while the model it follows changes version after version:
// a training job's full and delta checkpoints are copied into a followed model dir one at
// a time (each as a commit makes it appear), the next once the server says it serves the
// one before, while serve_load.py keeps four connections busy with predict requests. Every
// request must succeed, every answer must name exactly one version (X-Pstrain-Model-Step)
// and score as every other answer of that version did, and the last checkpoint must be
// reached.
#include <signal.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

struct Commit {
  int64_t step = 0;
  int64_t base = 0;  // == step for a full checkpoint
};

// The checkpoints of `model`, oldest first: each full one, then its deltas.
std::vector<Commit> Commits(const fs::path& model) {
  std::vector<Commit> out;
  for (const auto& e : fs::directory_iterator(model)) {
    const std::string n = e.path().filename().string();
    if (!e.is_directory() || n.rfind("ckpt-", 0) != 0 || !fs::exists(e.path() / "MANIFEST"))
      continue;
    const int64_t base = std::stoll(n.substr(5));
    out.push_back({base, base});
    for (const auto& d : fs::directory_iterator(e.path())) {
      const std::string dn = d.path().filename().string();
      if (d.is_directory() && dn.rfind("delta-", 0) == 0 && fs::exists(d.path() / "MANIFEST"))
        out.push_back({std::stoll(dn.substr(6)), base});
    }
  }
  std::sort(out.begin(), out.end(), [](const Commit& a, const Commit& b) {
    return a.step != b.step ? a.step < b.step : a.base < b.base;
  });
  return out;
}

// Copies a checkpoint (a full one without its deltas) from `model` to `live` under a
// temporary name, then renames it into place.
void Publish(const fs::path& model, const fs::path& live, const Commit& c) {
  const std::string full = "ckpt-" + std::to_string(c.base);
  fs::path from = model / full, to = live / full;
  if (c.step != c.base) {
    from /= "delta-" + std::to_string(c.step);
    to /= "delta-" + std::to_string(c.step);
  }
  const fs::path tmp = to.string() + ".tmp";
  fs::create_directories(tmp);
  for (const auto& e : fs::directory_iterator(from)) {
    if (e.is_regular_file()) fs::copy_file(e.path(), tmp / e.path().filename());
  }
  fs::rename(tmp, to);
}

TEST_CASE(
    "pstrain-serve swaps full and delta checkpoints under steady load: no failed request, each "
    "answer one version") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 600, 100, model,
                       Json{{"checkpoint",
                             {{"every_steps", 200},
                              {"every_seconds", 0},
                              {"delta_every_seconds", 0.1},
                              {"max_deltas", 100000},
                              {"delta_max_fraction", 1000},
                              {"max_to_keep", 1000}}}});
  TrainToEnd(job, 300s);
  const std::vector<Commit> commits = Commits(model);
  const auto fulls = std::count_if(commits.begin(), commits.end(),
                                   [](const Commit& c) { return c.step == c.base; });
  Note("checkpoints: " + std::to_string(commits.size()) + ", full: " + std::to_string(fulls));
  REQUIRE(fulls >= 3);
  REQUIRE(commits.size() > static_cast<size_t>(fulls));  // deltas too
  REQUIRE(commits.front().step == 0);

  const auto live = tmp / "live";
  fs::create_directories(live);
  fs::copy_file(model / "job.json", live / "job.json");
  Publish(model, live, commits.front());
  Task serve("serve", {BuildDir() + "/daemons/serve/pstrain-serve", "--model",
                       "live=" + live.string(), "--port", "0", "--poll-seconds", "0.3"});
  REQUIRE(serve.WaitForLine("pstrain-serve: serving at http://", 60s));
  const std::string at = *serve.FindLine("pstrain-serve: serving at http://");
  const std::string port = at.substr(at.rfind(':') + 1);
  REQUIRE(serve.WaitForLine("model live: serving step 0/0", 60s));

  const Json data = ReadConfig("job-fmnist-mlp.json")["eval_data"];
  const auto stop = tmp / "stop", out = tmp / "load.json";
  Task load("python",
            {"/usr/bin/python3", SourceDir() + "/test/integration/serve_load.py", "127.0.0.1", port,
             "live", data["images"].get<std::string>(), "4", "8", stop.string(), out.string()});
  for (size_t i = 1; i < commits.size(); ++i) {
    const size_t mark = serve.LineCount();
    Publish(model, live, commits[i]);
    const std::string want = "model live: serving step " + std::to_string(commits[i].base) + "/" +
                             std::to_string(commits[i].step) + " ";
    INFO(want);
    REQUIRE(serve.WaitForLineFrom(want, mark, 60s));
  }
  WriteFile(stop, "");
  REQUIRE(load.WaitExit(120s) == std::optional<int>(0));
  const Json result = Json::parse(ReadFile(out));
  Note("load: " + result.dump());
  std::printf(
      "serve_swap: %zu checkpoints (%d full) served in turn; load: %s requests, %s failed, "
      "%zu steps answered\n",
      commits.size(), static_cast<int>(fulls), result["requests"].dump().c_str(),
      result["failed"].dump().c_str(), result["steps"].size());
  CHECK(result["requests"].get<int64_t>() > 0);
  CHECK(result["failed"] == 0);
  CHECK(result["bad_headers"].empty());
  CHECK(result["mixed"].empty());
  const auto steps = result["steps"].get<std::vector<int64_t>>();
  REQUIRE(!steps.empty());
  CHECK(steps.back() == commits.back().step);
  CHECK(steps.size() > 2);  // the load saw versions change
  for (int64_t s : steps) {
    CHECK(
        std::any_of(commits.begin(), commits.end(), [&](const Commit& c) { return c.step == s; }));
  }
  CHECK(!serve.HasLine("serving on as it was"));  // no refresh failed
  serve.Signal(SIGTERM);
  CHECK(serve.WaitExit(60s) == std::optional<int>(0));
}

}  // namespace
}  // namespace ps::integ
