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

// curl's exit code (the request's outcome is in `said`: status code, headers).
int CurlExit(const std::vector<std::string>& args, const fs::path& out, std::string* said) {
  std::vector<std::string> argv{"/usr/bin/curl",       "-sS", "-o", out.string(), "-D", "-", "-w",
                                "code=%{http_code}\\n"};
  argv.insert(argv.end(), args.begin(), args.end());
  Task curl("curl", argv);
  const auto rc = curl.WaitExit(60s);
  REQUIRE(rc.has_value());
  said->clear();
  for (const auto& l : curl.Lines()) *said += l + "\n";
  return *rc;
}

// The X-Pstrain-Model-Step header curl printed, or "".
std::string StepHeader(const std::string& said) {
  std::smatch m;
  if (std::regex_search(said, m, std::regex("X-Pstrain-Model-Step: ([0-9a-z/]+)"))) return m[1];
  return "";
}

// A predict request for the Fashion-MNIST MLP: one all-zero image.
std::string ZeroImageRequest() {
  std::string req = R"({"instances": [[0)";
  for (int i = 1; i < 784; ++i) req += ",0";
  return req + "]]}";
}

// Copies model/ckpt-<step> into dir as a commit makes it appear: whole, at once.
void CopyCheckpoint(const fs::path& model, const fs::path& dir, int64_t step) {
  const std::string name = "ckpt-" + std::to_string(step);
  fs::copy(model / name, dir / (name + ".tmp"), fs::copy_options::recursive);
  fs::rename(dir / (name + ".tmp"), dir / name);
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

namespace ps::integ {
namespace {

TEST_CASE(
    "pstrain-serve: a model config file applied again on SIGHUP, versions, labels, a damaged "
    "checkpoint skipped") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 200, 100, model, 100, 10);
  TrainToEnd(job, 180s);
  const auto live = tmp / "live";
  fs::create_directories(live);
  fs::copy_file(model / "job.json", live / "job.json");
  CopyCheckpoint(model, live, 100);
  const auto config = tmp / "models.config";
  WriteFile(config, "model_config_list { config { name: 'live' base_path: 'live' } }\n");
  WriteFile(tmp / "req.json", ZeroImageRequest());
  const std::string req = "@" + (tmp / "req.json").string();

  Task check("serve", {ServePath(), "--model-config-file", config.string(), "--check-config"});
  CHECK(check.WaitExit(30s) == std::optional<int>(0));
  CHECK(check.HasLine("pstrain-serve: config ok: model live: model dir " + live.string()));
  Task both("serve",
            {ServePath(), "--model-config-file", config.string(), "--model", "x=" + live.string()});
  CHECK(both.WaitExit(30s) == std::optional<int>(2));
  CHECK(both.HasLine("--model and --model-config-file: give one or the other"));

  Task serve("serve", {ServePath(), "--model-config-file", config.string(), "--port", "0",
                       "--poll-seconds", "0.1"});
  const uint16_t port = ServingPort(serve);
  REQUIRE(serve.WaitForLine("ready: 1 model(s) loaded", 120s));
  const std::string base = "http://127.0.0.1:" + std::to_string(port);
  auto status = [&](const std::string& path) {
    std::string said = Curl({base + path}, tmp / "status.json");
    return said.substr(said.find("code=")) + ReadFile(tmp / "status.json");
  };
  auto versions_of = [&](const std::string& name) {
    Curl({base + "/v1/models/" + name}, tmp / "status.json");
    std::vector<std::string> out;
    const Json status = Json::parse(ReadFile(tmp / "status.json"));
    for (const auto& v : status["model_version_status"]) {
      out.push_back(v["version"].get<std::string>() + ":" + v["state"].get<std::string>());
    }
    return out;
  };
  CHECK(versions_of("live") == std::vector<std::string>{"100:AVAILABLE"});

  // A damaged ckpt-200: skipped, logged and counted once; version 100 serves on.
  size_t mark = serve.LineCount();
  fs::copy(model / "ckpt-200", tmp / "ckpt-200.bad", fs::copy_options::recursive);
  FlipByte(tmp / "ckpt-200.bad" / "ps-0.shard");
  fs::rename(tmp / "ckpt-200.bad", live / "ckpt-200");
  REQUIRE(
      serve.WaitForLineFrom("skipped (not tried again until the config is reloaded)", mark, 60s));
  CHECK(serve.FindLine("skipped (not tried again")->find("version 200") != std::string::npos);
  CHECK(versions_of("live") == std::vector<std::string>{"100:AVAILABLE"});
  std::string said = Curl({base + "/metrics"}, tmp / "metrics.txt");
  CHECK(ReadFile(tmp / "metrics.txt")
            .find("pstrain_serving_load_failures_total{task_type=\"serve\",task_index=\"0\","
                  "model=\"live\"} 1") != std::string::npos);

  // Repaired, a second model and labels: SIGHUP applies them.
  fs::remove_all(live / "ckpt-200");
  CopyCheckpoint(model, live, 200);
  WriteFile(config, R"(model_config_list {
  config {
    name: 'live'
    base_path: 'live'
    version_labels { key: 'stable' value: 100 }
    version_labels { key: 'canary' value: 200 }
  }
  config {
    name: 'pinned'
    base_path: 'live'
    model_version_policy { specific { versions: 100 } }
  }
}
)");
  mark = serve.LineCount();
  serve.Signal(SIGHUP);
  REQUIRE(serve.WaitForLineFrom("config reloaded: 2 model(s)", mark, 120s));
  CHECK(versions_of("live") == std::vector<std::string>{"200:AVAILABLE", "100:AVAILABLE"});
  CHECK(versions_of("pinned") == std::vector<std::string>{"100:AVAILABLE"});
  // Two versions, each answering with its own state.
  said = Curl({"-X", "POST", "--data-binary", req, base + "/v1/models/live/versions/100:predict"},
              tmp / "p100.json");
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(StepHeader(said) == "100/100");
  said = Curl({"-X", "POST", "--data-binary", req, base + "/v1/models/live/versions/200:predict"},
              tmp / "p200.json");
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(StepHeader(said) == "200/200");
  CHECK(ReadFile(tmp / "p100.json") != ReadFile(tmp / "p200.json"));
  said =
      Curl({"-X", "POST", "--data-binary", req, base + "/v1/models/live:predict"}, tmp / "p.json");
  CHECK(StepHeader(said) == "200/200");
  said = Curl({"-X", "POST", "--data-binary", req, base + "/v1/models/live/labels/stable:predict"},
              tmp / "ps.json");
  CHECK(StepHeader(said) == "100/100");
  CHECK(ReadFile(tmp / "ps.json") == ReadFile(tmp / "p100.json"));
  said = Curl({base + "/v1/models/live/labels/canary/metadata"}, tmp / "meta.json");
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(Json::parse(ReadFile(tmp / "meta.json"))["model_spec"]["version"] == "200");
  CHECK(status("/v1/models/live/labels/nope").find("code=404") != std::string::npos);
  CHECK(status("/v1/models/pinned/versions/200").find("code=404") != std::string::npos);

  // A label naming a version that is not loaded is refused (counted); the labels stay.
  WriteFile(config, R"(model_config_list {
  config { name: 'live' base_path: 'live' version_labels { key: 'canary' value: 999 } }
  config { name: 'pinned' base_path: 'live' model_version_policy { specific { versions: 100 } } }
}
)");
  mark = serve.LineCount();
  serve.Signal(SIGHUP);
  REQUIRE(
      serve.WaitForLineFrom("config reload failed: Request to assign label canary to version "
                            "999 of model live, which is not currently available for "
                            "inference",
                            mark, 60s));
  CHECK(status("/v1/models/live/labels/canary").find("\"version\":\"200\"") != std::string::npos);

  // A broken file: the config served stays, counted.
  WriteFile(config, "model_config_list { config { name: 'live' ");
  mark = serve.LineCount();
  serve.Signal(SIGHUP);
  REQUIRE(serve.WaitForLineFrom("config reload failed: " + config.string() + ": line", mark, 60s));
  CHECK(serve.FindLine("config reload failed: " + config.string())
            ->find("(serving on with the previous config)") != std::string::npos);
  CHECK(versions_of("pinned") == std::vector<std::string>{"100:AVAILABLE"});
  said = Curl({base + "/metrics"}, tmp / "metrics.txt");
  const std::string metrics = ReadFile(tmp / "metrics.txt");
  CHECK(metrics.find("pstrain_serving_config_reload_failures_total{task_type=\"serve\","
                     "task_index=\"0\"} 2") != std::string::npos);
  CHECK(metrics.find("pstrain_serving_config_reloads_total{task_type=\"serve\","
                     "task_index=\"0\"} 1") != std::string::npos);
  CHECK(metrics.find("pstrain_serving_model_versions{task_type=\"serve\",task_index=\"0\","
                     "model=\"live\"} 2") != std::string::npos);

  // A model left out of the file is removed.
  WriteFile(config, "model_config_list { config { name: 'live' base_path: 'live' } }\n");
  mark = serve.LineCount();
  serve.Signal(SIGHUP);
  REQUIRE(serve.WaitForLineFrom("config reloaded: 1 model(s)", mark, 60s));
  CHECK(serve.WaitForLineFrom("model pinned: removed", mark, 1s));
  CHECK(status("/v1/models/pinned").find("code=404") != std::string::npos);
  CHECK(status("/v1/models/live").find("code=200") != std::string::npos);

  serve.Signal(SIGTERM);
  CHECK(serve.WaitExit(60s) == std::optional<int>(0));
}

TEST_CASE(
    "pstrain-serve over HTTPS: curl --cacert; with --tls-ca, only clients with a certificate") {
  TempDir tmp;
  const auto model = tmp / "model";
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", 100, 100, model, 100, 10);
  TrainToEnd(job, 180s);
  const auto certs = tmp / "certs";
  REQUIRE(std::system(("bash " + SourceDir() + "/scripts/make-certs.sh " + certs.string() +
                       " localhost client >/dev/null")
                          .c_str()) == 0);
  WriteFile(tmp / "req.json", ZeroImageRequest());
  const std::string req = "@" + (tmp / "req.json").string();
  const std::vector<std::string> tls{"--tls-cert", (certs / "localhost.pem").string(), "--tls-key",
                                     (certs / "localhost.key").string()};
  auto start = [&](const std::vector<std::string>& extra) {
    std::vector<std::string> argv{ServePath(), "--model", "m=" + model.string(), "--port", "0"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    return std::make_unique<Task>("serve", argv);
  };
  // The certificate names "localhost": curl resolves it to 127.0.0.1 and checks the name.
  auto predict = [&](uint16_t port, const std::vector<std::string>& client, std::string* said) {
    const std::string host = "localhost:" + std::to_string(port);
    std::vector<std::string> args{"--cacert",
                                  (certs / "ca.pem").string(),
                                  "--resolve",
                                  host + ":127.0.0.1",
                                  "-X",
                                  "POST",
                                  "--data-binary",
                                  req};
    args.insert(args.end(), client.begin(), client.end());
    args.push_back("https://" + host + "/v1/models/m:predict");
    return CurlExit(args, tmp / "pred.json", said);
  };

  auto https = start(tls);
  uint16_t port = ServingPort(*https);
  REQUIRE(https->WaitForLine("ready: 1 model(s) loaded", 120s));
  CHECK(https->HasLine("serving at https://"));
  std::string said;
  CHECK(predict(port, {}, &said) == 0);
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(StepHeader(said) == "100/100");
  CHECK(Json::parse(ReadFile(tmp / "pred.json"))["predictions"][0].size() == 10);
  // Plain HTTP to the HTTPS port gets no answer.
  CHECK(CurlExit({"http://127.0.0.1:" + std::to_string(port) + "/v1/models/m"}, tmp / "x", &said) !=
        0);
  // With --model, SIGHUP applies the flags again; the model serves on.
  const size_t mark = https->LineCount();
  https->Signal(SIGHUP);
  REQUIRE(https->WaitForLineFrom("config reloaded: 1 model(s)", mark, 60s));
  CHECK(https->HasLine("SIGHUP: applying the --model flags again"));
  CHECK(predict(port, {}, &said) == 0);
  CHECK(said.find("code=200") != std::string::npos);
  https->Signal(SIGTERM);
  CHECK(https->WaitExit(60s) == std::optional<int>(0));

  std::vector<std::string> mutual = tls;
  mutual.insert(mutual.end(), {"--tls-ca", (certs / "ca.pem").string()});
  auto mtls = start(mutual);
  port = ServingPort(*mtls);
  REQUIRE(mtls->WaitForLine("ready: 1 model(s) loaded", 120s));
  CHECK(predict(port, {}, &said) != 0);  // no client certificate: the handshake fails
  CHECK(said.find("code=200") == std::string::npos);
  CHECK(
      predict(port,
              {"--cert", (certs / "client.pem").string(), "--key", (certs / "client.key").string()},
              &said) == 0);
  CHECK(said.find("code=200") != std::string::npos);
  CHECK(StepHeader(said) == "100/100");
  mtls->Signal(SIGTERM);
  CHECK(mtls->WaitExit(60s) == std::optional<int>(0));
}

}  // namespace
}  // namespace ps::integ
