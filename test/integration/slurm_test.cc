// scripts/slurm/pstrain.sbatch on a real single-node Slurm (Debian's slurm-wlm and munge,
// installed by scripts/setup.sh with PSTRAIN_WITH_TEST_TOOLS=1). Each test case starts its
// own munged, slurmctld and slurmd in the foreground, as plain processes of the test, with
// a generated slurm.conf (free ports, a temp state dir, no accounting) and munge key, and
// stops them all at the end:
//  - `sbatch --wait` of a 5-task job (chief, 2 ps, 2 workers, one srun step) trains
//    Fashion-MNIST to its last step; every task exits 0 and the job's output ends with
//    "pstrain: job finished: exit 0";
//  - `scancel --signal=TERM <job>.0` of a long job: the chief drains, writes the final
//    checkpoint and shuts the others down; the job exits 0;
//  - a worker killed mid-job, then the stop: the chief exits 0 and decides the job's exit
//    (0, the step not run again) although srun reports the killed worker.
// Needs root (slurmd runs jobs as root here, munged as user munge): without it the test
// exits 77, which meson reports as SKIP, and says why.
#include <catch2/catch.hpp>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "test/integration/harness.h"

namespace ps::integ {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

const char* const kSlurmPrograms[] = {"/usr/sbin/munged", "/usr/sbin/slurmctld", "/usr/sbin/slurmd",
                                      "/usr/bin/sbatch",  "/usr/bin/srun",       "/usr/bin/scancel",
                                      "/usr/bin/sinfo",   "/usr/bin/setpriv"};

// Exits 77 (meson: SKIP) with the reason when this machine cannot run Slurm daemons.
void SkipUnlessRoot() {
  if (::geteuid() != 0) {
    std::printf(
        "SKIP: the Slurm test needs root (slurmd starts job steps as root; munged runs as "
        "user munge)\n");
    std::fflush(stdout);
    std::_Exit(77);
  }
}

bool PortFree(uint16_t port) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  ::close(fd);
  return ok;
}

// A base port P with P .. P+n-1 free on 127.0.0.1 (the step's tasks listen on P + slot).
uint16_t FreePortRange(int n) {
  std::mt19937 rng(static_cast<unsigned>(::getpid()));
  for (int attempt = 0; attempt < 200; ++attempt) {
    auto base = static_cast<uint16_t>(20000 + rng() % 30000);
    bool all = true;
    for (int i = 0; i < n && all; ++i) all = PortFree(static_cast<uint16_t>(base + i));
    if (all) return base;
  }
  FAIL("no " << n << " consecutive free ports");
  return 0;
}

// Polls `done` every 50 ms until it is true or `timeout` has passed.
template <typename F>
bool PollUntil(F done, Millis timeout) {
  const auto deadline = Clock::now() + timeout;
  while (!done()) {
    if (Clock::now() > deadline) return false;
    std::this_thread::sleep_for(50ms);
  }
  return true;
}

// munged, slurmctld and slurmd of one test case; destruction stops them (SIGTERM, then
// the Task's SIGKILL) and removes the temp dir.
class SlurmCluster {
 public:
  SlurmCluster() {
    for (const char* p : kSlurmPrograms) {
      INFO("missing " << p
                      << ": install the Debian packages slurm-wlm and munge "
                         "(PSTRAIN_WITH_TEST_TOOLS=1 scripts/setup.sh)");
      REQUIRE(::access(p, X_OK) == 0);
    }
    const auto t0 = Clock::now();
    const fs::path root = tmp_.path();
    fs::permissions(root, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec);
    // munged insists: its directory owned by munge and not writable by others, the key
    // 0600 and owned by munge.
    const fs::path munge = root / "munge";
    fs::create_directories(munge);
    std::string key(128, '\0');
    std::random_device rd;
    for (char& c : key) c = static_cast<char>(rd());
    WriteFile(munge / "munge.key", key);
    REQUIRE(std::system(("chown -R munge:munge " + munge.string()).c_str()) == 0);
    fs::permissions(munge / "munge.key", fs::perms::owner_read | fs::perms::owner_write);
    fs::permissions(munge, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
    socket_ = (munge / "munge.socket").string();
    daemons_.push_back(std::make_unique<Task>(
        "munged", std::vector<std::string>{"/usr/bin/setpriv", "--reuid=munge", "--regid=munge",
                                           "--init-groups", "/usr/sbin/munged", "--foreground",
                                           "--socket=" + socket_,
                                           "--key-file=" + (munge / "munge.key").string(),
                                           "--pid-file=" + (munge / "munged.pid").string(),
                                           "--log-file=" + (munge / "munged.log").string(),
                                           "--seed-file=" + (munge / "munged.seed").string()}));
    REQUIRE(PollUntil([&] { return fs::exists(socket_); }, 20s));

    for (const char* d : {"state", "spool", "log"}) fs::create_directories(root / d);
    const auto ports = FreePorts(2);
    conf_ = (root / "slurm.conf").string();
    char host[256] = {};
    REQUIRE(::gethostname(host, sizeof host - 1) == 0);
    // The node is called localhost (slurmd -N), so every TF_CONFIG address is on 127.0.0.1.
    // 5 tasks on a 2-core machine: the node declares 8 CPUs (config_overrides).
    WriteFile(
        conf_,
        "ClusterName=pstraintest\n"
        "SlurmctldHost=" +
            std::string(host) +
            "(127.0.0.1)\n"
            "SlurmctldPort=" +
            std::to_string(ports[0]) +
            "\n"
            "SlurmdPort=" +
            std::to_string(ports[1]) +
            "\n"
            "SlurmUser=root\nSlurmdUser=root\n"
            "AuthType=auth/munge\nCredType=cred/munge\n"
            "AuthInfo=socket=" +
            socket_ +
            "\n"
            "ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
            "MpiDefault=none\nSwitchType=switch/none\n"
            "SchedulerType=sched/builtin\nSelectType=select/cons_tres\nSelectTypeParameters=CR_Core\n"
            "SlurmdParameters=config_overrides\nReturnToService=2\nKillWait=30\n"
            "JobAcctGatherType=jobacct_gather/none\nAccountingStorageType=accounting_storage/none\n"
            "JobCompType=jobcomp/none\n"
            "StateSaveLocation=" +
            (root / "state").string() +
            "\n"
            "SlurmdSpoolDir=" +
            (root / "spool").string() +
            "\n"
            "SlurmctldPidFile=" +
            (root / "slurmctld.pid").string() +
            "\n"
            "SlurmdPidFile=" +
            (root / "slurmd.pid").string() +
            "\n"
            "SlurmctldLogFile=" +
            (root / "log" / "slurmctld.log").string() +
            "\n"
            "SlurmdLogFile=" +
            (root / "log" / "slurmd.log").string() +
            "\n"
            "NodeName=localhost NodeAddr=127.0.0.1 CPUs=8 State=UNKNOWN\n"
            "PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP\n");
    daemons_.push_back(std::make_unique<Task>(
        "slurmctld", std::vector<std::string>{"/usr/sbin/slurmctld", "-D", "-i", "-f", conf_},
        Env()));
    daemons_.push_back(std::make_unique<Task>(
        "slurmd",
        std::vector<std::string>{"/usr/sbin/slurmd", "-D", "-f", conf_, "-N", "localhost"}, Env()));
    // Up when sinfo reports the node idle.
    REQUIRE(PollUntil(
        [&] {
          Task sinfo("sinfo", {"/usr/bin/sinfo", "-h", "-o", "%T"}, Env());
          return sinfo.WaitExit(10s) == std::optional<int>(0) && sinfo.HasLine("idle");
        },
        60s));
    const double setup_s = std::chrono::duration<double>(Clock::now() - t0).count();
    Note("Slurm up in " + std::to_string(setup_s) + " s");
    std::printf("Slurm (munged, slurmctld, slurmd) up in %.2f s\n", setup_s);
  }

  ~SlurmCluster() {
    // A test that failed mid-job leaves the job running under slurmstepd, which outlives
    // slurmd: every job of this cluster is killed first and waited for.
    Task scancel("scancel", {"/usr/bin/scancel", "--full", "--signal=KILL", "--user=root"}, Env());
    if (scancel.WaitExit(30s) == std::optional<int>(0)) {
      PollUntil(
          [&] {
            Task squeue("squeue", {"/usr/bin/squeue", "-h", "-o", "%i"}, Env());
            return squeue.WaitExit(10s) == std::optional<int>(0) && squeue.Lines().empty();
          },
          60s);
    }
    // Reverse order: slurmd, slurmctld, munged; each gets SIGTERM and 15 s.
    for (auto it = daemons_.rbegin(); it != daemons_.rend(); ++it) {
      if ((*it)->Running()) {
        (*it)->Signal(SIGTERM);
        (*it)->WaitExit(15s);
      }
    }
    daemons_.clear();  // SIGKILL for any that did not stop
  }

  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  // The environment of every Slurm command of this cluster.
  EnvVars Env() const { return {{"SLURM_CONF", conf_}}; }
  const fs::path& dir() const { return tmp_.path(); }

  // `sbatch --wait` of scripts/slurm/pstrain.sbatch: 5 tasks, chief + 2 ps + 2 workers
  // (6 with the evaluator).
  std::unique_ptr<Task> Submit(const fs::path& job, const fs::path& model_dir,
                               const fs::path& output, bool evaluator = false) {
    EnvVars env = Env();
    env.emplace_back("PSTRAIN_BIN", BuildDir() + "/launcher");
    const int tasks = evaluator ? 6 : 5;
    std::vector<std::string> args = {"/usr/bin/sbatch",
                                     "--wait",
                                     "--ntasks=" + std::to_string(tasks),
                                     "--output=" + output.string(),
                                     "--chdir=" + dir().string(),
                                     SourceDir() + "/scripts/slurm/pstrain.sbatch",
                                     "--ps",
                                     "2",
                                     "--workers",
                                     "2",
                                     "--base-port",
                                     std::to_string(FreePortRange(tasks)),
                                     "--job",
                                     job.string(),
                                     "--model-dir",
                                     model_dir.string()};
    if (evaluator) args.push_back("--evaluator");
    args.insert(args.end(), {"--", "--connect-timeout", "60"});
    return std::make_unique<Task>("sbatch", args, env);
  }

 private:
  TempDir tmp_;  // first: removed after the daemons are gone
  std::string socket_;
  std::string conf_;
  std::vector<std::unique_ptr<Task>> daemons_;
};

// The pid of Slurm job `job_id`'s daemon `exe_name` whose TF_CONFIG names task
// `type`:`index`, or -1 (another test's cluster on the same host is not its).
pid_t FindDaemon(const std::string& exe_name, const std::string& type, int index,
                 const std::string& job_id) {
  const std::string task =
      "\"task\":{\"type\":\"" + type + "\",\"index\":" + std::to_string(index) + "}";
  const std::string job = std::string(1, '\0') + "SLURM_JOB_ID=" + job_id + '\0';
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    if (fs::read_symlink(e.path() / "exe", ec).filename() != exe_name || ec) continue;
    std::ifstream in(e.path() / "environ", std::ios::binary);
    const std::string env((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (env.find(task) != std::string::npos && env.find(job) != std::string::npos)
      return static_cast<pid_t>(std::stol(name));
  }
  return -1;
}

// Waits until `file` has a line containing `needle`.
bool WaitForFileLine(const fs::path& file, const std::string& needle, Millis timeout) {
  return PollUntil(
      [&] { return fs::exists(file) && ReadFile(file).find(needle) != std::string::npos; },
      timeout);
}

TEST_CASE("Slurm: sbatch --wait of a 5-task job trains to the end; every task exits 0") {
  SkipUnlessRoot();
  SlurmCluster slurm;
  const fs::path model = slurm.dir() / "model";
  const fs::path out = slurm.dir() / "job.out";
  auto job = DeriveJob("job-fmnist-mlp.json", slurm.dir() / "job.json", 200, 50, model);
  auto sbatch = slurm.Submit(job, model, out);
  const auto status = sbatch->WaitExit(240s);
  const std::string text = fs::exists(out) ? ReadFile(out) : "";
  Note("job output:\n" + text);
  REQUIRE(status == std::optional<int>(0));
  CHECK(sbatch->HasLine("Submitted batch job "));
  for (const char* task : {"chief:0 at localhost:", "ps:0 at localhost:", "ps:1 at localhost:",
                           "worker:0 at localhost:", "worker:1 at localhost:"}) {
    CHECK(text.find(std::string("pstrain slurm-task: ") + task) != std::string::npos);
  }
  CHECK(text.find("pstrain: step 0: 5 tasks (1 chief, 2 ps, 2 workers) on localhost") !=
        std::string::npos);
  CHECK(text.find("step 200/200") != std::string::npos);
  CHECK(text.find("checkpoint ckpt-200 (final) committed") != std::string::npos);
  CHECK(text.find("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged") !=
        std::string::npos);
  CHECK(text.find("pstrain: step 0 exited 0\npstrain: job finished: exit 0\n") !=
        std::string::npos);
  CHECK(ReadFile(model / "checkpoint").find("ckpt-200") != std::string::npos);
}

TEST_CASE(
    "Slurm: scancel --signal=TERM of the job step (with an evaluator) ends in a final checkpoint and exit 0") {
  SkipUnlessRoot();
  SlurmCluster slurm;
  const fs::path model = slurm.dir() / "model";
  const fs::path out = slurm.dir() / "job.out";
  auto job = DeriveJob("job-fmnist-mlp.json", slurm.dir() / "job.json", 10000000, 50, model);
  auto sbatch = slurm.Submit(job, model, out, /*evaluator=*/true);
  REQUIRE(sbatch->WaitForLine("Submitted batch job ", 60s));
  const std::string line = *sbatch->FindLine("Submitted batch job ");
  const std::string job_id = line.substr(line.rfind(' ') + 1);
  REQUIRE(WaitForFileLine(out, "] step 100/", 180s));

  // The step's tasks all get SIGTERM; the ps and workers have it blocked (slurm-task): the
  // chief drains, commits the final checkpoint and shuts them down, and the evaluator
  // (--stop-grace 120) goes on until it has evaluated that checkpoint, then exits 0.
  Task scancel("scancel", {"/usr/bin/scancel", "--signal=TERM", job_id + ".0"}, slurm.Env());
  CHECK(scancel.WaitExit(30s) == std::optional<int>(0));
  const auto status = sbatch->WaitExit(120s);
  const std::string text = fs::exists(out) ? ReadFile(out) : "";
  Note("job output:\n" + text);
  REQUIRE(status == std::optional<int>(0));
  CHECK(text.find("stop requested (SIGTERM)") != std::string::npos);
  const auto final_at = text.find(" (final) committed");
  REQUIRE(final_at != std::string::npos);
  const auto ckpt_at = text.rfind("checkpoint ckpt-", final_at);
  REQUIRE(ckpt_at != std::string::npos);
  const std::string final_ckpt = text.substr(ckpt_at + 11, final_at - ckpt_at - 11);  // "ckpt-N"
  CHECK(ReadFile(model / "checkpoint").find("\"" + final_ckpt + "\"") != std::string::npos);
  CHECK(fs::exists(model / final_ckpt / "MANIFEST"));
  for (const char* task :
       {"[ps:0] shut down", "[ps:1] shut down", "[worker:0] shut down", "[worker:1] shut down"}) {
    CHECK(text.find(task) != std::string::npos);
  }
  CHECK(text.find("cluster shut down: 2 worker(s) and 2 ps task(s) acknowledged") !=
        std::string::npos);
  CHECK(text.find("evaluated the final checkpoint; exiting") != std::string::npos);
  CHECK(text.find("[evaluator:0] SIGTERM: going on until the final checkpoint is evaluated") !=
        std::string::npos);
  CHECK(text.find("pstrain: step 0 exited 0\npstrain: job finished: exit 0\n") !=
        std::string::npos);
  CHECK(text.find("running it again") == std::string::npos);  // the step was not run again
}

TEST_CASE(
    "Slurm: a worker killed mid-job, then scancel --signal=TERM: the chief's exit 0 decides, the step is not run again") {
  SkipUnlessRoot();
  SlurmCluster slurm;
  const fs::path model = slurm.dir() / "model";
  const fs::path out = slurm.dir() / "job.out";
  auto job = DeriveJob("job-fmnist-mlp.json", slurm.dir() / "job.json", 10000000, 50, model);
  auto sbatch = slurm.Submit(job, model, out);
  REQUIRE(sbatch->WaitForLine("Submitted batch job ", 60s));
  const std::string line = *sbatch->FindLine("Submitted batch job ");
  const std::string job_id = line.substr(line.rfind(' ') + 1);
  REQUIRE(WaitForFileLine(out, "] step 100/", 180s));

  // worker:1 dies (SIGKILL: its task exits 137); the chief goes on with worker:0.
  const pid_t worker1 = FindDaemon("pstrain-worker", "worker", 1, job_id);
  REQUIRE(worker1 > 0);
  REQUIRE(::kill(worker1, SIGKILL) == 0);
  REQUIRE(WaitForFileLine(out, "worker:1 lost", 60s));
  Task scancel("scancel", {"/usr/bin/scancel", "--signal=TERM", job_id + ".0"}, slurm.Env());
  CHECK(scancel.WaitExit(30s) == std::optional<int>(0));
  const auto status = sbatch->WaitExit(180s);
  const std::string text = fs::exists(out) ? ReadFile(out) : "";
  Note("job output:\n" + text);
  REQUIRE(status == std::optional<int>(0));
  CHECK(text.find("stop requested (SIGTERM)") != std::string::npos);
  CHECK(text.find(" (final) committed") != std::string::npos);
  CHECK(text.find(", the chief 0: the chief's exit decides") != std::string::npos);
  CHECK(text.find("pstrain: step 0 exited 0\npstrain: job finished: exit 0\n") !=
        std::string::npos);
  CHECK(text.find("running it again") == std::string::npos);
  CHECK_FALSE(fs::exists(slurm.dir() / (".pstrain-chief-exit." + job_id)));
}

}  // namespace
}  // namespace ps::integ
