// A task of another cluster, or with another secret, is refused at the handshake; the
// refused chief fails (exit 1) naming why, and the refusing tasks keep serving.
#include <signal.h>

#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr const char* kProgress = "] step ";

std::vector<std::string> ChiefArgs(const std::filesystem::path& job, const TempDir& tmp,
                                   std::vector<std::string> more = {}) {
  std::vector<std::string> args{"--job", job.string(), "--model-dir", (tmp / "model").string()};
  for (auto& a : more) args.push_back(std::move(a));
  return args;
}

std::filesystem::path WriteSecret(const TempDir& tmp, const std::string& name,
                                  const std::string& secret) {
  auto path = tmp / name;
  WriteFile(path, secret + "\n");
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  return path;
}

TEST_CASE("a chief with a different TF_CONFIG cluster is refused by the ps") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 50, 10, tmp / "model");
  Tasks tasks;
  Task& ps0 = tasks.Add(StartDaemon(spec, kPs0));
  REQUIRE(ps0.WaitForLine("serving on", 30s));

  // The chief's cluster lists one more worker than the ps's: another cluster id. That
  // worker does not exist, so the chief's connect deadline bounds its wait for it.
  auto other = spec;
  other.of(cluster::TaskType::kWorker).push_back({"127.0.0.1", FreePorts(1)[0]});
  Task& chief = tasks.Add(StartDaemonWithTfConfig(
      cluster::TaskType::kChief, "chief:0 (other cluster)", cluster::ToTfConfigJson(other, kChief),
      ChiefArgs(job, tmp, {"--connect-timeout", "3"})));
  CHECK(chief.WaitExit(60s) == std::optional<int>(1));
  auto why = chief.FindLine("pstrain-chief: ");
  REQUIRE(why.has_value());
  CHECK_THAT(*why, Catch::Contains("ps:0 refused the connection"));
  CHECK_THAT(*why, Catch::Contains("cluster"));
  CHECK(ps0.HasLine("refused connection"));
  CHECK(ps0.Running());

  // The ps was never told to shut down: SIGTERM stops it at once, and it exits 1 (not
  // 0: it stopped without the chief's Shutdown, so its shards are lost).
  ps0.Signal(SIGTERM);
  CHECK(ps0.WaitExit(15s) == std::optional<int>(128 + SIGTERM));
  CHECK(ps0.HasLine("received SIGTERM before the chief's Shutdown"));
  CHECK(ps0.HasLine("terminated by SIGTERM"));
}

TEST_CASE("wrong cluster secret: the chief is refused; the same secret then trains to the end") {
  TempDir tmp;
  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 60, 20, tmp / "model");
  auto secret_a = WriteSecret(tmp, "secret-a", "correct horse battery staple");
  auto secret_b = WriteSecret(tmp, "secret-b", "correct horse battery stapler");

  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1})
    tasks.Add(StartDaemon(spec, id, {"--secret-file", secret_a.string()}));
  for (auto id : {kPs0, kPs1}) REQUIRE(tasks[id].WaitForLine("serving on", 30s));
  for (auto id : {kWorker0, kWorker1}) REQUIRE(tasks[id].WaitForLine("waiting for the chief", 30s));

  {
    auto wrong = StartDaemon(
        spec, kChief,
        ChiefArgs(job, tmp, {"--secret-file", secret_b.string(), "--connect-timeout", "20"}));
    CHECK(wrong->WaitExit(60s) == std::optional<int>(1));
    auto why = wrong->FindLine("pstrain-chief: ");
    REQUIRE(why.has_value());
    CHECK_THAT(*why, Catch::Contains("secret mismatch"));
    CHECK_FALSE(wrong->HasLine(kProgress));
  }
  // The refusal did not hurt the tasks: a chief with the right secret runs the job.
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) CHECK(tasks[id].Running());
  Task& chief = tasks.Add(
      StartDaemon(spec, kChief, ChiefArgs(job, tmp, {"--secret-file", secret_a.string()})));
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("step 60/60"));
  CHECK(chief.HasLine("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));
  CHECK(tasks[kPs0].HasLine("refused connection"));
}

}  // namespace
}  // namespace ps::integ
