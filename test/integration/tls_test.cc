// A real cluster over mutual TLS (certificates from scripts/make-certs.sh): a chief whose
// certificate is not from the cluster CA is refused and says why; the cluster then
// trains, `pstrain status` answers over TLS (and refuses to talk without it), and
// `pstrain stop` over TLS ends it with every task exiting 0.
#include <catch2/catch.hpp>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

constexpr const char* kProgress = "] step ";

std::vector<std::string> Tls(const std::filesystem::path& dir, const std::string& name) {
  return {"--tls-cert", (dir / (name + ".pem")).string(),
          "--tls-key",  (dir / (name + ".key")).string(),
          "--tls-ca",   (dir / "ca.pem").string()};
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST_CASE(
    "mutual TLS: a foreign certificate is refused; the cluster trains, status and stop speak TLS") {
  TempDir tmp;
  const auto certs = tmp / "certs";
  const std::string script = SourceDir() + "/scripts/make-certs.sh";
  REQUIRE(
      std::system(("bash " + script + " " + certs.string() + " ps worker chief operator >/dev/null")
                      .c_str()) == 0);
  REQUIRE(std::system(("bash " + script + " " + (certs / "other").string() + " intruder >/dev/null")
                          .c_str()) == 0);
  std::filesystem::copy_file(certs / "ca.pem", certs / "other" / "cluster-ca.pem");

  auto spec = LocalCluster();
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "job.json", 1000000, 20, tmp / "model");
  const std::string chief_addr = spec.address(kChief).ToString();
  std::vector<std::string> chief_args{"--job", job.string(), "--model-dir",
                                      (tmp / "model").string()};

  Tasks tasks;
  for (auto id : {kPs0, kPs1}) tasks.Add(StartDaemon(spec, id, Tls(certs, "ps")));
  for (auto id : {kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id, Tls(certs, "worker")));
  for (auto id : {kPs0, kPs1}) REQUIRE(tasks[id].WaitForLine("serving on", 30s));

  {
    // It trusts the cluster CA (a CA certificate is no secret), but its own was signed
    // by another CA.
    auto intruder_flags =
        std::vector<std::string>{"--tls-cert", (certs / "other" / "intruder.pem").string(),
                                 "--tls-key",  (certs / "other" / "intruder.key").string(),
                                 "--tls-ca",   (certs / "other" / "cluster-ca.pem").string()};
    auto intruder = StartDaemon(
        spec, kChief, Concat(Concat(chief_args, intruder_flags), {"--connect-timeout", "5"}));
    CHECK(intruder->WaitExit(60s) == std::optional<int>(1));
    auto why = intruder->FindLine("pstrain-chief: ");
    REQUIRE(why.has_value());
    CHECK_THAT(*why, Catch::Contains("refused the TLS connection"));
    CHECK_FALSE(intruder->HasLine(kProgress));
    CHECK(tasks[kPs0].WaitForLine("TLS handshake failed: certificate verify failed", 30s));
  }
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) CHECK(tasks[id].Running());

  Task& chief = tasks.Add(StartDaemon(spec, kChief, Concat(chief_args, Tls(certs, "chief"))));
  REQUIRE(chief.WaitForLine(kProgress, 120s));
  {
    auto status =
        StartLauncher(Concat({"status", "--chief", chief_addr, "--json"}, Tls(certs, "operator")),
                      "pstrain status (TLS)");
    CHECK(status->WaitExit(30s) == std::optional<int>(0));
    CHECK(status->HasLine("\"state\""));
  }
  {
    auto plain = StartLauncher({"status", "--chief", chief_addr, "--timeout", "3"},
                               "pstrain status (plain)");
    CHECK(plain->WaitExit(30s) == std::optional<int>(1));
    CHECK(plain->HasLine("does it require TLS"));
  }
  auto stop = StartLauncher(Concat({"stop", "--chief", chief_addr}, Tls(certs, "operator")),
                            "pstrain stop (TLS)");
  CHECK(stop->WaitExit(30s) == std::optional<int>(0));
  tasks.ExpectAllExit(0, 120s);
  CHECK(chief.HasLine("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged"));
}

}  // namespace
}  // namespace ps::integ
