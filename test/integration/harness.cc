#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include "test/integration/harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <stdexcept>

#include <catch2/catch.hpp>

#include "libps/ckpt/checkpoint_dir.h"

namespace ps::integ {

namespace {

std::string RequiredEnv(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') {
    FAIL(std::string(name) + " is not set (run the integration tests through meson test)");
  }
  return v;
}

// PSTRAIN_TEST_TIME_SCALE: a factor >= 1 on the timeouts of Task's waits.
Millis Scaled(Millis timeout) {
  static const double scale = [] {
    const char* v = std::getenv("PSTRAIN_TEST_TIME_SCALE");
    double s = v != nullptr ? std::atof(v) : 1.0;
    return s >= 1.0 ? s : 1.0;
  }();
  return Millis(static_cast<int64_t>(static_cast<double>(timeout.count()) * scale));
}

// Every line of every task of the current test case, in arrival order.
struct Transcript {
  std::mutex mu;
  std::vector<std::string> lines;
  void Add(std::string line) {
    std::lock_guard lock(mu);
    lines.push_back(std::move(line));
  }
  std::vector<std::string> Take() {
    std::lock_guard lock(mu);
    return std::exchange(lines, {});
  }
};

Transcript& GlobalTranscript() {
  static Transcript t;
  return t;
}

std::string Elapsed() {
  static const auto start = std::chrono::steady_clock::now();
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, "%8.3f", s);
  return buf;
}

// Prints the transcript of a failed test case (of every test case when
// PSTRAIN_INTEG_VERBOSE is set and not "0") to stderr.
struct TranscriptListener : Catch::TestEventListenerBase {
  using TestEventListenerBase::TestEventListenerBase;
  void testCaseStarting(const Catch::TestCaseInfo& info) override {
    GlobalTranscript().Take();
    TestEventListenerBase::testCaseStarting(info);
  }
  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    auto lines = GlobalTranscript().Take();
    const char* verbose = std::getenv("PSTRAIN_INTEG_VERBOSE");
    if (stats.totals.assertions.failed > 0 ||
        (verbose != nullptr && *verbose != '\0' && *verbose != '0')) {
      std::cerr << "---- output of the processes of \"" << stats.testInfo.name << "\" ("
                << lines.size() << " lines) ----\n";
      for (const auto& l : lines) std::cerr << l << "\n";
      std::cerr << "---- end of output ----" << std::endl;
    }
    TestEventListenerBase::testCaseEnded(stats);
  }
};

}  // namespace

CATCH_REGISTER_LISTENER(TranscriptListener)

void Note(const std::string& line) { GlobalTranscript().Add(Elapsed() + " [test] " + line); }

std::string BuildDir() { return RequiredEnv("PSTRAIN_BUILD_DIR"); }
std::string SourceDir() { return RequiredEnv("PSTRAIN_SOURCE_DIR"); }

std::string DaemonPath(cluster::TaskType type) {
  std::string role = cluster::TaskTypeName(type);
  return BuildDir() + "/daemons/" + role + "/pstrain-" + role;
}

std::string LauncherPath() { return BuildDir() + "/launcher/pstrain"; }

std::vector<uint16_t> FreePorts(int n) {
  std::vector<int> fds;
  std::vector<uint16_t> ports;
  for (int i = 0; i < n; ++i) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    REQUIRE(fd >= 0);
    fds.push_back(fd);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
    socklen_t len = sizeof addr;
    REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
    ports.push_back(ntohs(addr.sin_port));
  }
  for (int fd : fds) ::close(fd);
  return ports;
}

cluster::ClusterSpec LocalCluster() {
  auto spec = cluster::ReadClusterFile(SourceDir() + "/configs/cluster-local.json");
  REQUIRE(spec.ok());
  REQUIRE(spec->count(cluster::TaskType::kChief) == 1);
  REQUIRE(spec->count(cluster::TaskType::kWorker) == 2);
  REQUIRE(spec->count(cluster::TaskType::kPs) == 2);
  auto ids = spec->AllTasks();
  auto ports = FreePorts(static_cast<int>(ids.size()));
  for (size_t i = 0; i < ids.size(); ++i)
    spec->of(ids[i].type)[static_cast<size_t>(ids[i].index)].port = ports[i];
  return *spec;
}

Json ReadConfig(const std::string& name) {
  auto json = ReadJsonFile(SourceDir() + "/configs/" + name);
  INFO(json.status().ToString());
  REQUIRE(json.ok());
  return *json;
}

void WriteFile(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::trunc);
  out << text;
  out.close();
  REQUIRE(out.good());
}

std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<Json> ReadJsonLines(const std::filesystem::path& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = ParseJson(line, path.string());
    INFO(line);
    REQUIRE(j.ok());
    out.push_back(*j);
  }
  return out;
}

void WriteClusterFile(const cluster::ClusterSpec& spec, const std::filesystem::path& path) {
  Json cluster = Json::object();
  for (auto type : cluster::kAllTaskTypes) {
    if (spec.count(type) == 0) continue;
    Json list = Json::array();
    for (const auto& hp : spec.of(type)) list.push_back(hp.ToString());
    cluster[cluster::TaskTypeName(type)] = list;
  }
  WriteFile(path, Json{{"cluster", cluster}}.dump(2) + "\n");
}

std::filesystem::path DeriveJob(const std::string& config_name, const std::filesystem::path& path,
                                int64_t steps, int64_t log_every_steps,
                                const std::filesystem::path& model_dir, const Json& overrides) {
  Json job = ReadConfig(config_name);
  job["steps"] = steps;
  job["log_every_steps"] = log_every_steps;
  job["model_dir"] = model_dir.string();
  for (auto it = overrides.begin(); it != overrides.end(); ++it) job[it.key()] = it.value();
  WriteFile(path, job.dump(2) + "\n");
  return path;
}

std::filesystem::path DeriveCheckpointJob(const std::string& config_name,
                                          const std::filesystem::path& path, int64_t steps,
                                          int64_t log_every_steps,
                                          const std::filesystem::path& model_dir,
                                          int64_t every_steps, int max_to_keep) {
  Json checkpoint = {
      {"every_steps", every_steps}, {"every_seconds", 0}, {"max_to_keep", max_to_keep}};
  return DeriveJob(config_name, path, steps, log_every_steps, model_dir,
                   Json{{"checkpoint", checkpoint}});
}

uint64_t FlipByte(const std::filesystem::path& path, std::optional<uint64_t> offset) {
  std::string bytes = ReadFile(path);
  INFO(path.string());
  REQUIRE(!bytes.empty());
  const uint64_t at = offset.value_or(bytes.size() / 2);
  REQUIRE(at < bytes.size());
  bytes[at] = static_cast<char>(~static_cast<unsigned char>(bytes[at]));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  REQUIRE(out.good());
  Note("flipped the byte at offset " + std::to_string(at) + " of " + path.string());
  return at;
}

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/pstrain-integ-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  REQUIRE(::mkdtemp(buf.data()) != nullptr);
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

Tmpfs::Tmpfs(const std::filesystem::path& owner, const std::filesystem::path& dir, int mib,
             int64_t inodes)
    : dir_(dir) {
  std::filesystem::create_directories(dir);
  std::string opts = "size=" + std::to_string(mib) + "m";
  if (inodes > 0) opts += ",nr_inodes=" + std::to_string(inodes);
  if (::mount("tmpfs", dir.c_str(), "tmpfs", 0, opts.c_str()) != 0) {
    const int err = errno;
    if (err == EPERM) {
      std::filesystem::remove_all(owner);
      std::printf("SKIP: mounting a tmpfs needs root (CAP_SYS_ADMIN): %s\n", std::strerror(err));
      std::fflush(stdout);
      std::_Exit(77);
    }
    FAIL("mount tmpfs on " << dir << ": " << std::strerror(err));
  }
}

Tmpfs::~Tmpfs() { ::umount2(dir_.c_str(), MNT_DETACH); }

namespace {
// Marks the output closed when destroyed. The on_line callback owns the only reference
// and lives in Subprocess's reader thread, which destroys it after the child's last
// line (end of file on the pipe).
struct EofMark {
  explicit EofMark(std::shared_ptr<Task::Output> o) : out(std::move(o)) {}
  EofMark(const EofMark&) = delete;
  EofMark& operator=(const EofMark&) = delete;
  std::shared_ptr<Task::Output> out;
  ~EofMark() {
    std::lock_guard lock(out->mu);
    out->closed = true;
    out->cv.notify_all();
  }
};
}  // namespace

Task::Task(std::string name, std::vector<std::string> argv,
           std::vector<std::pair<std::string, std::string>> env,
           std::vector<std::string> env_remove)
    : name_(std::move(name)), out_(std::make_shared<Output>()) {
  launcher::SpawnOptions o;
  o.argv = std::move(argv);
  o.env = std::move(env);
  if (std::find(env_remove.begin(), env_remove.end(), "OPENBLAS_NUM_THREADS") == env_remove.end()) {
    o.env.emplace_back("OPENBLAS_NUM_THREADS", "1");
  }
  o.env_remove = std::move(env_remove);
  std::string command;
  for (const auto& a : o.argv) command += (command.empty() ? "" : " ") + a;
  o.on_line = [out = out_, eof = std::make_shared<EofMark>(out_),
               label = "[" + name_ + "] "](const std::string& line) {
    GlobalTranscript().Add(Elapsed() + " " + label + line);
    std::lock_guard lock(out->mu);
    out->lines.push_back(line);
    out->cv.notify_all();
  };
  auto p = launcher::Subprocess::Spawn(std::move(o));
  INFO("cannot start " << name_ << ": " << p.status().ToString());
  REQUIRE(p.ok());
  process_ = std::move(*p);
  Note("started " + name_ + " (pid " + std::to_string(process_->pid()) + "): " + command);
}

Task::~Task() {
  if (process_ && process_->Running()) {
    Note("killing " + name_ + " (still running at the end of the test)");
    process_->Signal(SIGKILL);
  }
  process_.reset();
}

bool Task::WaitForLine(const std::string& needle, Millis timeout) {
  timeout = Scaled(timeout);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t checked = 0;
  std::unique_lock lock(out_->mu);
  for (;;) {
    for (; checked < out_->lines.size(); ++checked) {
      if (out_->lines[checked].find(needle) != std::string::npos) return true;
    }
    if (out_->closed) break;
    if (out_->cv.wait_until(lock, deadline) == std::cv_status::timeout &&
        checked == out_->lines.size())
      break;
  }
  lock.unlock();
  Note("gave up waiting for \"" + needle + "\" from " + name_);
  return false;
}

std::optional<std::string> Task::FindLine(const std::string& needle) const {
  std::lock_guard lock(out_->mu);
  for (const auto& l : out_->lines) {
    if (l.find(needle) != std::string::npos) return l;
  }
  return std::nullopt;
}

size_t Task::LineCount() const {
  std::lock_guard lock(out_->mu);
  return out_->lines.size();
}

bool Task::WaitForLineFrom(const std::string& needle, size_t first, Millis timeout) {
  timeout = Scaled(timeout);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  size_t checked = first;
  std::unique_lock lock(out_->mu);
  for (;;) {
    for (; checked < out_->lines.size(); ++checked) {
      if (out_->lines[checked].find(needle) != std::string::npos) return true;
    }
    if (out_->closed) break;
    if (out_->cv.wait_until(lock, deadline) == std::cv_status::timeout &&
        checked >= out_->lines.size())
      break;
  }
  lock.unlock();
  Note("gave up waiting for \"" + needle + "\" from " + name_ + " after line " +
       std::to_string(first));
  return false;
}

std::vector<std::string> Task::Lines() const {
  std::lock_guard lock(out_->mu);
  return out_->lines;
}

std::optional<int> Task::WaitExit(Millis timeout) {
  timeout = Scaled(timeout);
  auto deadline = std::chrono::steady_clock::now() + timeout;
  auto status = process_->WaitFor(timeout);
  if (!status) return std::nullopt;
  // The reader thread may still be delivering the last lines: wait for end of file
  // (bounded: a grandchild could hold the pipe open).
  std::unique_lock lock(out_->mu);
  out_->cv.wait_until(lock, std::max(deadline, std::chrono::steady_clock::now() + 5s),
                      [&] { return out_->closed; });
  lock.unlock();
  Note(name_ + " exited with status " + std::to_string(*status));
  return status;
}

std::unique_ptr<Task> StartDaemon(const cluster::ClusterSpec& spec, cluster::TaskId id,
                                  std::vector<std::string> args,
                                  std::vector<std::string> env_remove, EnvVars env) {
  return StartDaemonWithTfConfig(id.type, id.ToString(), cluster::ToTfConfigJson(spec, id),
                                 std::move(args), std::move(env_remove), std::move(env));
}

std::unique_ptr<Task> StartDaemonWithTfConfig(cluster::TaskType type, const std::string& name,
                                              const std::string& tf_config,
                                              std::vector<std::string> args,
                                              std::vector<std::string> env_remove, EnvVars env) {
  std::vector<std::string> argv{DaemonPath(type)};
  for (auto& a : args) argv.push_back(std::move(a));
  env.emplace_back("TF_CONFIG", tf_config);
  return std::make_unique<Task>(name, std::move(argv), std::move(env), std::move(env_remove));
}

Task& Tasks::Add(std::unique_ptr<Task> task) {
  tasks_.push_back(std::move(task));
  return *tasks_.back();
}

Task& Tasks::Replace(std::unique_ptr<Task> task) {
  for (auto& t : tasks_) {
    if (t->name() == task->name()) {
      t = std::move(task);
      return *t;
    }
  }
  return Add(std::move(task));
}

Task& Tasks::operator[](const std::string& name) {
  for (auto& t : tasks_) {
    if (t->name() == name) return *t;
  }
  FAIL("no task named " << name);
  throw std::logic_error("unreachable");
}

void TrainToEnd(const std::filesystem::path& job, Millis timeout) {
  auto spec = LocalCluster();
  Tasks tasks;
  for (auto id : {kPs0, kPs1, kWorker0, kWorker1}) tasks.Add(StartDaemon(spec, id));
  tasks.Add(StartDaemon(spec, kChief, {"--job", job.string()}));
  tasks.ExpectAllExit(0, timeout);
}

void Tasks::ExpectAllExit(int expected, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto& t : tasks_) {
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    auto status = t->WaitExit(std::max(left, Millis(0)));
    INFO(t->name() << (status ? " exited with " + std::to_string(*status)
                              : std::string(" is still running")));
    CHECK(status == std::optional<int>(expected));
  }
}

void Tasks::ExpectExit(const std::vector<cluster::TaskId>& ids, int expected, Millis timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  for (const auto& id : ids) {
    Task& t = (*this)[id];
    auto left = std::chrono::duration_cast<Millis>(deadline - std::chrono::steady_clock::now());
    auto status = t.WaitExit(std::max(left, Millis(0)));
    INFO(t.name() << (status ? " exited with " + std::to_string(*status)
                             : std::string(" is still running")));
    CHECK(status == std::optional<int>(expected));
  }
}

std::unique_ptr<Task> StartLauncher(std::vector<std::string> args, const std::string& name) {
  std::vector<std::string> argv{LauncherPath()};
  for (auto& a : args) argv.push_back(std::move(a));
  return std::make_unique<Task>(name, std::move(argv));
}

std::vector<int64_t> VerifiedCheckpoints(const std::filesystem::path& model_dir) {
  auto all = ckpt::ListCheckpoints(model_dir.string());
  INFO(all.status().ToString());
  REQUIRE(all.ok());
  std::vector<int64_t> steps;
  for (const auto& c : *all) {
    Status st = ckpt::VerifyCheckpoint(c.dir, ckpt::Verify::kFull);
    INFO(c.dir << ": " << st.ToString());
    CHECK(st.ok());
    steps.push_back(c.manifest.global_step);
  }
  return steps;
}

}  // namespace ps::integ
