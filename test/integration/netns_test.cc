// Faults across real hosts: every task of a cluster in its own network namespace (its own
// interface, address and routing), joined by veth pairs to a bridge that lives in one
// more namespace of the test's own. Nothing is added to the machine's namespace; the
// addresses (10.77.0.0/24) exist only inside the test's namespaces, and every namespace
// (with its veths and the bridge) is deleted at the end, also when the test fails.
//   - bandwidth cap (tbf, 1 Gbit/s per host) and, where the kernel has sch_netem, 1 ms of
//     delay: examples/s against the same job on loopback (printed, not asserted);
//   - partitions (nftables rules inside one namespace), 5 s each, then healed: a worker
//     from the ps tasks, a ps from everyone, the chief from everyone. Training still ends
//     at the exact step count, every task exits 0, and every checkpoint verifies.
// Needs root (CAP_SYS_ADMIN, CAP_NET_ADMIN) and Debian's iproute2 and nftables; exits 77
// (meson: SKIP) saying why when the machine cannot create namespaces.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"
#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;

// Runs a command to completion; its exit status (nullopt after 30 s).
std::optional<int> Run(std::vector<std::string> argv, const std::string& name = "cmd") {
  Task t(name, std::move(argv));
  return t.WaitExit(30s);
}

void MustRun(std::vector<std::string> argv) {
  std::string text;
  for (const auto& a : argv) text += (text.empty() ? "" : " ") + a;
  INFO(text);
  const std::string name = argv.at(0);
  REQUIRE(Run(std::move(argv), name) == std::optional<int>(0));
}

// Exits 77 (SKIP) when this machine cannot make network namespaces or filter in them.
void SkipUnlessNamespaces() {
  auto skip = [](const std::string& why) {
    std::printf("SKIP: %s\n", why.c_str());
    std::fflush(stdout);
    std::_Exit(77);
  };
  if (::geteuid() != 0) skip("network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN)");
  for (const char* tool : {"/usr/sbin/ip", "/usr/sbin/nft", "/usr/sbin/tc"}) {
    if (!fs::exists(tool))
      skip(std::string(tool) + " is missing (Debian packages iproute2 and nftables)");
  }
  const std::string probe = "pstprobe" + std::to_string(::getpid());
  if (Run({"ip", "netns", "add", probe}) != std::optional<int>(0))
    skip("`ip netns add` is not permitted here");
  const bool nft = Run({"ip", "netns", "exec", probe, "nft", "add", "table", "inet", "probe"}) ==
                   std::optional<int>(0);
  Run({"ip", "netns", "del", probe});
  if (!nft) skip("nftables is not available in a network namespace (kernel without nf_tables)");
}

// One namespace per task, named <prefix>-<task>, with eth0 = 10.77.0.<k>/24 on a bridge in
// namespace <prefix>-br. The destructor deletes every namespace it created.
class Hosts {
 public:
  explicit Hosts(const std::vector<std::string>& names)
      : prefix_("pst" + std::to_string(::getpid())) {
    Add(bridge_ns());
    MustRun({"ip", "-n", bridge_ns(), "link", "set", "lo", "up"});
    MustRun({"ip", "-n", bridge_ns(), "link", "add", "br0", "type", "bridge"});
    MustRun({"ip", "-n", bridge_ns(), "link", "set", "br0", "up"});
    int k = 1;
    for (const auto& name : names) {
      const std::string ns = Ns(name);
      std::string port = "p";  // appended: GCC 12 -O3 reports a false -Wrestrict on "p" + string
      port += std::to_string(k);
      Add(ns);
      MustRun({"ip", "-n", ns, "link", "set", "lo", "up"});
      // Both ends are created inside the test's namespaces, never in the machine's.
      MustRun({"ip", "-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", port, "netns",
               bridge_ns()});
      MustRun({"ip", "-n", bridge_ns(), "link", "set", port, "master", "br0"});
      MustRun({"ip", "-n", bridge_ns(), "link", "set", port, "up"});
      address_[name] = "10.77.0." + std::to_string(k);
      MustRun({"ip", "-n", ns, "addr", "add", address_[name] + "/24", "dev", "eth0"});
      MustRun({"ip", "-n", ns, "link", "set", "eth0", "up"});
      ++k;
    }
  }
  ~Hosts() {
    for (auto it = created_.rbegin(); it != created_.rend(); ++it) Run({"ip", "netns", "del", *it});
  }
  Hosts(const Hosts&) = delete;
  Hosts& operator=(const Hosts&) = delete;

  std::string Ns(const std::string& name) const { return prefix_ + "-" + name; }
  const std::string& Address(const std::string& name) const { return address_.at(name); }

  // Caps every host's uplink at `rate` (tbf), with `delay` of netem where the kernel has
  // it. Returns what was applied.
  std::string Shape(const std::string& rate, const std::string& delay) {
    bool netem = true;
    for (const auto& [name, addr] : address_) {
      if (netem && Run({"ip", "netns", "exec", Ns(name), "tc", "qdisc", "add", "dev", "eth0",
                        "root", "netem", "delay", delay, "rate", rate}) == std::optional<int>(0)) {
        continue;
      }
      netem = false;
      Run({"ip", "netns", "exec", Ns(name), "tc", "qdisc", "del", "dev", "eth0", "root"});
      MustRun({"ip", "netns", "exec", Ns(name), "tc", "qdisc", "add", "dev", "eth0", "root", "tbf",
               "rate", rate, "burst", "256kb", "latency", "50ms"});
    }
    return netem
               ? rate + " and " + delay + " of delay (netem)"
               : rate +
                     " (tbf); no delay: this kernel has no sch_netem (`tc qdisc add ... netem` is refused)";
  }

  // Drops every packet between `name` and `peers` (all other hosts when empty), both ways,
  // with nftables rules inside `name`'s namespace; Heal removes them.
  void Partition(const std::string& name, const std::vector<std::string>& peers) {
    const std::string ns = Ns(name);
    MustRun({"ip", "netns", "exec", ns, "nft", "add", "table", "inet", "partition"});
    MustRun({"ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "partition", "in",
             "{ type filter hook input priority 0; policy accept; }"});
    MustRun({"ip", "netns", "exec", ns, "nft", "add", "chain", "inet", "partition", "out",
             "{ type filter hook output priority 0; policy accept; }"});
    if (peers.empty()) {
      MustRun({"ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "partition", "in",
               "iifname", "eth0", "drop"});
      MustRun({"ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "partition", "out",
               "oifname", "eth0", "drop"});
    }
    for (const auto& p : peers) {
      MustRun({"ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "partition", "in", "ip",
               "saddr", Address(p), "drop"});
      MustRun({"ip", "netns", "exec", ns, "nft", "add", "rule", "inet", "partition", "out", "ip",
               "daddr", Address(p), "drop"});
    }
    Note("partitioned " + name +
         (peers.empty() ? " from every host"
                        : " from " + std::to_string(peers.size()) + " host(s)"));
  }
  void Heal(const std::string& name) {
    MustRun({"ip", "netns", "exec", Ns(name), "nft", "delete", "table", "inet", "partition"});
    Note("healed " + name);
  }

 private:
  std::string bridge_ns() const { return prefix_ + "-br"; }
  void Add(const std::string& ns) {
    MustRun({"ip", "netns", "add", ns});
    created_.push_back(ns);
  }

  std::string prefix_;
  std::vector<std::string> created_;
  std::map<std::string, std::string> address_;
};

const std::vector<std::pair<std::string, cluster::TaskId>> kTasks = {
    {"chief", kChief}, {"ps0", kPs0}, {"ps1", kPs1}, {"worker0", kWorker0}, {"worker1", kWorker1}};

// cluster-local.json's shape with one host per task, each on port 2222 of its own address.
cluster::ClusterSpec SpecFor(const Hosts& hosts) {
  cluster::ClusterSpec spec = LocalCluster();
  for (const auto& [name, id] : kTasks)
    spec.of(id.type)[static_cast<size_t>(id.index)] = {hosts.Address(name), 2222};
  return spec;
}

// Starts every task of `spec` inside its namespace; the chief gets `chief_args`.
void StartInNamespaces(Tasks& tasks, const Hosts& hosts, const cluster::ClusterSpec& spec,
                       const std::vector<std::string>& chief_args) {
  for (const auto& [name, id] : kTasks) {
    std::vector<std::string> argv{"ip", "netns", "exec", hosts.Ns(name), DaemonPath(id.type)};
    if (id == kChief) argv.insert(argv.end(), chief_args.begin(), chief_args.end());
    tasks.Add(std::make_unique<Task>(id.ToString(), std::move(argv),
                                     EnvVars{{"TF_CONFIG", cluster::ToTfConfigJson(spec, id)}}));
  }
}

// The median of the chief's "N ex/s" progress figures.
double MedianExamplesPerSecond(const Task& chief) {
  std::vector<double> eps;
  for (const auto& line : chief.Lines()) {
    const auto at = line.find(" ex/s");
    if (at == std::string::npos) continue;
    const auto begin = line.rfind(' ', at - 1);
    eps.push_back(std::stod(line.substr(begin + 1, at - begin - 1)));
  }
  REQUIRE_FALSE(eps.empty());
  std::sort(eps.begin(), eps.end());
  return eps[eps.size() / 2];
}

void ExpectFinished(const fs::path& model, int64_t steps) {
  auto verified = VerifiedCheckpoints(model);
  REQUIRE_FALSE(verified.empty());
  CHECK(verified.back() == steps);
  auto manifest = ReadJsonFile(ckpt::CheckpointPath(model.string(), steps) + "/MANIFEST");
  REQUIRE(manifest.ok());
  CHECK((*manifest)["final"] == true);
}

TEST_CASE(
    "namespaced hosts with a 1 Gbit/s cap: examples/s against loopback; exact steps, all exit 0") {
  SkipUnlessNamespaces();
  TempDir tmp;
  constexpr int64_t kSteps = 3000;
  double loopback = 0, shaped = 0;
  {
    auto job = DeriveJob("job-fmnist-mlp.json", tmp / "loop.json", kSteps, 250, tmp / "loop");
    auto spec = LocalCluster();
    Tasks tasks;
    for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
    Task& chief = tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
    tasks.ExpectAllExit(0, 180s);
    loopback = MedianExamplesPerSecond(chief);
    ExpectFinished(tmp / "loop", kSteps);
  }
  Hosts hosts({"chief", "ps0", "ps1", "worker0", "worker1"});
  const std::string shaping = hosts.Shape("1gbit", "1ms");
  auto job = DeriveJob("job-fmnist-mlp.json", tmp / "shaped.json", kSteps, 250, tmp / "shaped");
  Tasks tasks;
  StartInNamespaces(tasks, hosts, SpecFor(hosts), {"--job", job.string()});
  tasks.ExpectAllExit(0, 300s);
  shaped = MedianExamplesPerSecond(tasks[kChief]);
  ExpectFinished(tmp / "shaped", kSteps);
  std::printf(
      "netns: job-fmnist-mlp (2 ps, 2 workers): loopback %.0f examples/s, namespaced hosts with %s: "
      "%.0f examples/s (%.2fx)\n",
      loopback, shaping.c_str(), shaped, shaped / loopback);
  std::fflush(stdout);
}

TEST_CASE(
    "partitions of 5 s (a worker from the ps tasks, a ps, the chief), healed: exact steps, all exit 0, checkpoints sound") {
  SkipUnlessNamespaces();
  TempDir tmp;
  constexpr int64_t kSteps = 12000;  // the partitions end near step 5000
  Hosts hosts({"chief", "ps0", "ps1", "worker0", "worker1"});
  auto job = DeriveCheckpointJob("job-fmnist-mlp.json", tmp / "job.json", kSteps, 500,
                                 tmp / "model", 2000, 100);
  Tasks tasks;
  StartInNamespaces(tasks, hosts, SpecFor(hosts), {"--job", job.string()});
  Task& chief = tasks[kChief];
  REQUIRE(chief.WaitForLine("checkpoint ckpt-2000 committed", 120s));

  // The fault is the 5 s partition itself; every wait around it is on a condition.
  auto partition_for_5s = [&](const std::string& name, const std::vector<std::string>& peers) {
    hosts.Partition(name, peers);
    std::this_thread::sleep_for(5s);
    hosts.Heal(name);
  };
  auto wait_progress = [&](Millis timeout) {
    const size_t mark = chief.LineCount();
    return chief.WaitForLineFrom(" ex/s", mark, timeout);
  };

  partition_for_5s("worker0", {"ps0", "ps1"});
  REQUIRE(wait_progress(120s));

  // A ps cut off for longer than the heartbeat timeout (2 s) is lost to the chief: training
  // pauses, and once it answers again every ps is restored from the newest checkpoint.
  size_t mark = chief.LineCount();
  partition_for_5s("ps1", {});
  CHECK(chief.WaitForLineFrom("ps:1 failed", mark, 60s));
  CHECK(chief.WaitForLineFrom("ps:1 is back", mark, 120s));
  CHECK(chief.WaitForLineFrom("recovered: resuming at step", mark, 120s));
  REQUIRE(wait_progress(180s));

  // The chief cut off: it loses every ps and worker, then reconnects the ps tasks, restores
  // them, and the workers rejoin.
  mark = chief.LineCount();
  partition_for_5s("chief", {});
  CHECK(chief.WaitForLineFrom("recovered: resuming at step", mark, 120s));
  CHECK(chief.WaitForLineFrom("worker:0 rejoined", mark, 120s));
  CHECK(chief.WaitForLineFrom("worker:1 rejoined", mark, 120s));
  REQUIRE(wait_progress(180s));

  tasks.ExpectAllExit(0, 600s);
  CHECK(chief.HasLine("checkpoint ckpt-12000 (final) committed"));
  ExpectFinished(tmp / "model", kSteps);
}

}  // namespace
}  // namespace ps::integ
