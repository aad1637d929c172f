// The exit-code table every pstrain executable follows (docs/reference/exit-codes.md).
#include <catch2/catch.hpp>

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
  // A restart cannot fix these.
  CHECK(ExitCodeFor(DataLoss("no checkpoint could be restored")) == 1);
  CHECK(ExitCodeFor(PermissionDenied("secret mismatch")) == 1);
  CHECK(ExitCodeFor(FailedPrecondition("did not acknowledge Shutdown: ps:1")) == 1);
  CHECK(ExitCodeFor(NotFound("no job file")) == 1);
  CHECK(ExitCodeFor(Internal("x")) == 1);
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
