// The exit-code rule every pstrain executable follows (docs/reference/exit-codes.md).
#include <stdlib.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>

#include "libps/core/files.h"
#include "libps/daemon/daemon.h"

namespace ps::daemon {
namespace {

TEST_CASE("exit codes: 0 ok, 2 bad configuration, 138 retryable, 1 otherwise") {
  CHECK(kExitOk == 0);
  CHECK(kExitFailure == 1);
  CHECK(kExitUsage == 2);
  CHECK(kExitRetryable == 138);

  CHECK(ExitCodeFor(Status::Ok()) == 0);
  CHECK(ExitCodeFor(InvalidArgument("TF_CONFIG.task.index: must be >= 0, got -1")) == 2);
  // A restart fixes these: a ps that never came back, a model dir that cannot be written.
  CHECK(ExitCodeFor(Unavailable("ps:1 did not come back within 2 s")) == 138);
  CHECK(ExitCodeFor(IoError("/mnt/model/ckpt-20/MANIFEST: write: Input/output error")) == 138);
  CHECK(ExitCodeFor(DeadlineExceeded("ps:0: Pull did not complete within 30000 ms")) == 138);
  // A restart cannot fix these.
  CHECK(ExitCodeFor(DataLoss("no checkpoint could be restored")) == 1);
  CHECK(ExitCodeFor(PermissionDenied("secret mismatch")) == 1);
  CHECK(ExitCodeFor(FailedPrecondition("did not acknowledge Shutdown: ps:1")) == 1);
  CHECK(ExitCodeFor(NotFound("no job file")) == 1);
  CHECK(ExitCodeFor(Internal("x")) == 1);
}

// The cause of a failed file operation decides, not the file: the same errno gives the
// same exit code for a data file, a job file and the model dir.
TEST_CASE("errno causes: what no restart changes exits 2, a failed read or write 138") {
  for (int err : {EISDIR, ENOTDIR, EACCES, EPERM, ELOOP, ENAMETOOLONG, EROFS}) {
    INFO(std::strerror(err));
    CHECK(ExitCodeFor(ErrnoStatus("/data/train", "read", err)) == 2);
  }
  for (int err : {EIO, ENOSPC, EMFILE, EDQUOT}) {
    INFO(std::strerror(err));
    CHECK(ExitCodeFor(ErrnoStatus("/data/train", "read", err)) == 138);
  }
  CHECK(ErrnoStatus("/x", "open", ENOENT).code() == Code::kNotFound);
  CHECK(ErrnoStatus("/x", "read", EISDIR).message() == "/x: read: Is a directory");
}

// TF_CONFIG as the evaluator reads it (NamesNoTask): set for this process, then restored.
class ScopedTfConfig {
 public:
  explicit ScopedTfConfig(const char* value) {
    if (const char* old = std::getenv("TF_CONFIG")) old_ = old;
    if (value != nullptr)
      ::setenv("TF_CONFIG", value, 1);
    else
      ::unsetenv("TF_CONFIG");
  }
  ~ScopedTfConfig() {
    if (old_)
      ::setenv("TF_CONFIG", old_->c_str(), 1);
    else
      ::unsetenv("TF_CONFIG");
  }

 private:
  std::optional<std::string> old_;
};

TEST_CASE("NamesNoTask: TF_CONFIG unset, empty, blank or without a task names none") {
  DaemonFlags flags;
  for (const char* v : {static_cast<const char*>(nullptr), "", " \n", "{}", "{\"cluster\": {}}",
                        "{\"environment\": \"cloud\"}"}) {
    INFO((v == nullptr ? "unset" : v));
    ScopedTfConfig env(v);
    CHECK(NamesNoTask(flags));
  }
  for (const char* v :
       {"{\"cluster\": ", "[]", "{\"task\": {\"type\": \"evaluator\", \"index\": 0}}",
        "{\"cluster\": {\"ps\": [\"h:1\"]}}"}) {
    INFO(v);
    ScopedTfConfig env(v);
    CHECK_FALSE(NamesNoTask(flags));
  }
  ScopedTfConfig env("{}");
  DaemonFlags file;
  file.tf_config_file = "/etc/tf_config.json";
  CHECK_FALSE(NamesNoTask(file));
  DaemonFlags index;
  index.task_index = 0;
  CHECK_FALSE(NamesNoTask(index));
}

TEST_CASE("retryable exits, as Kubeflow's ExitCode restart policy reads them") {
  for (int code : {0, 1, 2, 3, 126, 127}) {
    INFO(code);
    CHECK_FALSE(IsRetryableExit(code));
  }
  for (int code : {128, 130, 137, 138, 139, 143, 255}) {
    INFO(code);
    CHECK(IsRetryableExit(code));
  }
}

}  // namespace
}  // namespace ps::daemon
