// pstrain-serve end to end: an MLP trained on Fashion-MNIST by a local cluster, exported,
// served on a free port beside its model dir; queried with curl and with Python's
// http.client (serve_client.py); the predictions of one batch compared, as text, with
// `pstrain predict`'s scores of the same batch (bit-identical floats print identically
// at 9 significant digits); a newer full checkpoint appearing in a followed model dir is
// swapped in; SIGTERM drains and exits 0.
#include <signal.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

using cluster::TaskId;
using cluster::TaskType;
namespace fs = std::filesystem;

const TaskId kChief{TaskType::kChief, 0};
const TaskId kWorker0{TaskType::kWorker, 0};
const TaskId kWorker1{TaskType::kWorker, 1};
const TaskId kPs0{TaskType::kPs, 0};
const TaskId kPs1{TaskType::kPs, 1};

std::vector<std::string> Lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> out;
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

std::string ServePath() { return BuildDir() + "/daemons/serve/pstrain-serve"; }

uint16_t ServingPort(Task& serve) {
  REQUIRE(serve.WaitForLine("pstrain-serve: serving at http://", 60s));
  const std::string line = *serve.FindLine("pstrain-serve: serving at http://");
  return static_cast<uint16_t>(std::stoi(line.substr(line.rfind(':') + 1)));
}

// curl's output: the status code, then the X-Pstrain-Model-Step header and the body.
std::string Curl(const std::vector<std::string>& args, const fs::path& out) {
  std::vector<std::string> argv{"/usr/bin/curl",       "-sS", "-o", out.string(), "-D", "-", "-w",
                                "code=%{http_code}\\n"};
  argv.insert(argv.end(), args.begin(), args.end());
  Task curl("curl", argv);
  REQUIRE(curl.WaitExit(60s) == std::optional<int>(0));
  std::string said;
  for (const auto& l : curl.Lines()) said += l + "\n";
  return said;
}

TEST_CASE(
    "pstrain-serve answers as TF Serving, bit-identical to pstrain predict, follows a model dir") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 200, 100, model, 100, 10);
  TrainToEnd(job, 180s);
  const auto bundle = tmp / "bundle";
  auto exp = StartLauncher({"export", model.string(), "--out", bundle.string()}, "pstrain export");
  REQUIRE(exp->WaitExit(300s) == std::optional<int>(0));
  // predict's first batch: the evaluator's batch size (256 for this job) of the test set.
  Json data = ReadConfig("job-fmnist-mlp.json")["eval_data"];
  data["limit"] = 256;
  WriteFile(tmp / "data.json", data.dump());
  auto predict =
      StartLauncher({"predict", "--model", bundle.string(), "--data", (tmp / "data.json").string(),
                     "--out", (tmp / "predict.txt").string()},
                    "pstrain predict");
  REQUIRE(predict->WaitExit(300s) == std::optional<int>(0));
  const auto want = Lines(tmp / "predict.txt");
  REQUIRE(want.size() == 256);

  // A model dir to follow, holding ckpt-100 only for now.
  const auto live = tmp / "live";
  fs::create_directories(live);
  fs::copy_file(model / "job.json", live / "job.json");
  fs::copy(model / "ckpt-100", live / "ckpt-100", fs::copy_options::recursive);

  Task serve("serve", {ServePath(), "--model", "fmnist=" + bundle.string(), "--model",
                       "live=" + live.string(), "--port", "0", "--poll-seconds", "0.2",
                       "--drain-delay", "1", "--metrics-port", "0"});
  const uint16_t port = ServingPort(serve);
  REQUIRE(serve.WaitForLine("ready: 2 model(s) loaded", 120s));
  CHECK(serve.HasLine("model live: serving step 100/100"));
  const std::string base = "http://127.0.0.1:" + std::to_string(port);

  // curl: status and health, a predict with the header naming the state.
  std::string said = Curl({base + "/v1/models/fmnist"}, tmp / "curl.json");
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(said.find("X-Pstrain-Model-Step: 200/200") != std::string::npos);
  CHECK(Json::parse(ReadFile(tmp / "curl.json")) ==
        Json::parse(R"({"model_version_status": [{"version": "200", "state": "AVAILABLE",
                        "status": {"error_code": "OK", "error_message": ""}}]})"));
  said = Curl({base + "/healthz"}, tmp / "health.txt");
  CHECK(said.find("code=200") != std::string::npos);
  {
    std::string req = R"({"instances": [[0)";
    for (int i = 1; i < 784; ++i) req += ",0";
    WriteFile(tmp / "req.json", req + "]]}");
  }
  said = Curl({"-X", "POST", "--data-binary", "@" + (tmp / "req.json").string(),
               base + "/v1/models/live:predict"},
              tmp / "pred.json");
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(said.find("X-Pstrain-Model-Step: 100/100") != std::string::npos);
  CHECK(Json::parse(ReadFile(tmp / "pred.json"))["predictions"][0].size() == 10);
  said = Curl({"-X", "POST", "--data-binary", "{}", base + "/v1/models/live:predict"},
              tmp / "bad.json");
  CHECK(said.find("code=400") != std::string::npos);

  // Python: the predictions of predict's batch, as text, and the API's answers.
  const std::string images = data["images"].get<std::string>();
  Task client("python",
              {"/usr/bin/python3", SourceDir() + "/test/integration/serve_client.py", "127.0.0.1",
               std::to_string(port), "fmnist", images, "256", (tmp / "served.txt").string()});
  REQUIRE(client.WaitExit(120s) == std::optional<int>(0));
  CHECK(client.HasLine("serve_client: ok: 256 predictions, version 200"));
  const auto got = Lines(tmp / "served.txt");
  REQUIRE(got.size() == want.size());
  size_t differ = 0;
  for (size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i] ? 1 : 0;
  CHECK(differ == 0);
  if (differ > 0) FAIL_CHECK("first: served " << got[0] << " | predict " << want[0]);

  // A newer full checkpoint in the followed model dir: loaded beside, swapped in.
  const size_t mark = serve.LineCount();
  fs::copy(model / "ckpt-200", live / "ckpt-200.tmp", fs::copy_options::recursive);
  fs::rename(live / "ckpt-200.tmp", live / "ckpt-200");
  REQUIRE(serve.WaitForLineFrom("model live: serving step 200/200", mark, 60s));
  said = Curl({base + "/v1/models/live/versions/200"}, tmp / "live.json");
  CHECK(said.find("code=200") != std::string::npos);
  said = Curl({base + "/metrics"}, tmp / "metrics.txt");
  const std::string metrics = ReadFile(tmp / "metrics.txt");
  CHECK(
      metrics.find(
          "pstrain_serving_model_version{task_type=\"serve\",task_index=\"0\",model=\"live\"} 200") !=
      std::string::npos);
  CHECK(
      metrics.find(
          "pstrain_serving_refreshes_total{task_type=\"serve\",task_index=\"0\",model=\"live\"} 1") !=
      std::string::npos);
  CHECK(
      metrics.find(
          "pstrain_serving_requests_total{task_type=\"serve\",task_index=\"0\",model=\"fmnist\",code=\"200\"}") !=
      std::string::npos);
  CHECK(
      metrics.find(
          "pstrain_serving_request_errors_total{task_type=\"serve\",task_index=\"0\",model=\"fmnist\",code=\"400\"} 3") !=
      std::string::npos);
  CHECK(
      metrics.find(
          "pstrain_serving_instances_per_request_count{task_type=\"serve\",task_index=\"0\",model=\"fmnist\"} 2") !=
      std::string::npos);
  CHECK(
      metrics.find(
          "pstrain_serving_model_age_seconds{task_type=\"serve\",task_index=\"0\",model=\"live\"}") !=
      std::string::npos);

  // SIGTERM: /healthz fails during the drain delay, then it exits 0.
  serve.Signal(SIGTERM);
  REQUIRE(serve.WaitForLine("stopping: /healthz fails now", 30s));
  said = Curl({base + "/healthz"}, tmp / "health2.txt");
  CHECK(said.find("code=503") != std::string::npos);
  CHECK(serve.WaitExit(60s) == std::optional<int>(0));
  CHECK_FALSE(serve.Running());

  // A model larger than the host's available memory is refused, its size named.
  Task big("serve", {ServePath(), "--model", "fmnist=" + bundle.string(), "--port", "0"},
           {{"PSTRAIN_SERVE_MEM_AVAILABLE", "100000"}});
  CHECK(big.WaitExit(60s) == std::optional<int>(1));
  CHECK(big.HasLine("more than the 0.1 MiB this host has available (MemAvailable)"));
}

TEST_CASE(
    "pstrain-serve applies a model dir's new deltas in place, bit-identical to predict at that step") {
  TempDir tmp;
  const auto model = tmp / "model";
  // Only ckpt-0 and the final checkpoint are full: the others are deltas of ckpt-0.
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 600, 100, model,
                       Json{{"checkpoint",
                             {{"every_steps", 0},
                              {"every_seconds", 0},
                              {"delta_every_seconds", 0.2},
                              {"max_deltas", 100000},
                              {"delta_max_fraction", 1000}}}});
  TrainToEnd(job, 180s);
  std::vector<int64_t> deltas;
  for (const auto& e : fs::directory_iterator(model / "ckpt-0")) {
    const std::string n = e.path().filename().string();
    if (n.rfind("delta-", 0) == 0) deltas.push_back(std::stoll(n.substr(6)));
  }
  std::sort(deltas.begin(), deltas.end());
  Note("deltas of ckpt-0: " + std::to_string(deltas.size()));
  REQUIRE(!deltas.empty());
  const int64_t last = deltas.back();

  // A model dir holding ckpt-0 without its deltas; pstrain-serve follows it.
  const auto live = tmp / "live";
  fs::create_directories(live / "ckpt-0");
  fs::copy_file(model / "job.json", live / "job.json");
  for (const auto& e : fs::directory_iterator(model / "ckpt-0")) {
    if (e.is_regular_file()) fs::copy_file(e.path(), live / "ckpt-0" / e.path().filename());
  }
  Task serve("serve", {ServePath(), "--model", "live=" + live.string(), "--port", "0",
                       "--poll-seconds", "0.1"});
  const uint16_t port = ServingPort(serve);
  REQUIRE(serve.WaitForLine("model live: serving step 0/0", 60s));
  const size_t mark = serve.LineCount();
  for (int64_t d : deltas) {  // each delta appears whole, as a commit makes it appear
    const std::string name = "delta-" + std::to_string(d);
    fs::copy(model / "ckpt-0" / name, live / "ckpt-0" / (name + ".tmp"),
             fs::copy_options::recursive);
    fs::rename(live / "ckpt-0" / (name + ".tmp"), live / "ckpt-0" / name);
  }
  REQUIRE(serve.WaitForLineFrom("model live: serving step 0/" + std::to_string(last), mark, 60s));

  Json data = ReadConfig("job-fmnist-mlp.json")["eval_data"];
  data["limit"] = 256;
  WriteFile(tmp / "data.json", data.dump());
  auto predict =
      StartLauncher({"predict", "--model", model.string(), "--step", std::to_string(last), "--data",
                     (tmp / "data.json").string(), "--out", (tmp / "predict.txt").string()},
                    "pstrain predict");
  REQUIRE(predict->WaitExit(300s) == std::optional<int>(0));
  Task client("python", {"/usr/bin/python3", SourceDir() + "/test/integration/serve_client.py",
                         "127.0.0.1", std::to_string(port), "live",
                         data["images"].get<std::string>(), "256", (tmp / "served.txt").string()});
  REQUIRE(client.WaitExit(120s) == std::optional<int>(0));
  CHECK(client.HasLine("serve_client: ok: 256 predictions, version 0"));
  CHECK(Lines(tmp / "served.txt") == Lines(tmp / "predict.txt"));
  serve.Signal(SIGTERM);
  CHECK(serve.WaitExit(60s) == std::optional<int>(0));
}

TEST_CASE("pstrain-serve refuses what it cannot serve, with exit codes") {
  TempDir tmp;
  Task none("serve", {ServePath(), "--port", "0"});
  CHECK(none.WaitExit(30s) == std::optional<int>(2));
  CHECK(none.HasLine("pstrain-serve: --model NAME=PATH or --model-config-file FILE is required"));
  Task missing("serve", {ServePath(), "--model", "m=" + (tmp / "nothing").string()});
  CHECK(missing.WaitExit(30s) == std::optional<int>(2));
  CHECK(missing.HasLine("neither a bundle (no bundle.json) nor a model dir (no job.json)"));
  Task check("serve",
             {ServePath(), "--model", "m=" + (tmp / "nothing").string(), "--check-config"});
  CHECK(check.WaitExit(30s) == std::optional<int>(2));
  // `pstrain serve` runs pstrain-serve with its arguments.
  auto via = StartLauncher({"serve", "--port", "0"}, "pstrain serve");
  CHECK(via->WaitExit(30s) == std::optional<int>(2));
  CHECK(via->HasLine("pstrain-serve: --model NAME=PATH or --model-config-file FILE is required"));
}

}  // namespace
}  // namespace ps::integ
