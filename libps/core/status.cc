#include "libps/core/status.h"

#include <cstdio>
#include <cstdlib>

namespace ps {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk:
      return "OK";
    case Code::kInvalidArgument:
      return "InvalidArgument";
    case Code::kNotFound:
      return "NotFound";
    case Code::kAlreadyExists:
      return "AlreadyExists";
    case Code::kOutOfRange:
      return "OutOfRange";
    case Code::kDataLoss:
      return "DataLoss";
    case Code::kUnavailable:
      return "Unavailable";
    case Code::kDeadlineExceeded:
      return "DeadlineExceeded";
    case Code::kProtocol:
      return "ProtocolError";
    case Code::kPermissionDenied:
      return "PermissionDenied";
    case Code::kAborted:
      return "Aborted";
    case Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Code::kIo:
      return "IoError";
    case Code::kInternal:
      return "Internal";
    case Code::kDraining:
      return "Draining";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

Status Status::WithContext(const std::string& context) const {
  if (ok()) return *this;
  return Status(code_, context + ": " + message_);
}

namespace internal {
void AssertFail(const char* cond, const char* file, int line) {
  std::fprintf(stderr, "pstrain: internal assertion failed: %s at %s:%d\n", cond, file, line);
  std::abort();
}

void ValueOfError(const Status& status) {
  std::fprintf(stderr, "pstrain: internal error: value() of a Result holding an error: %s\n",
               status.ToString().c_str());
  std::abort();
}
}  // namespace internal

}  // namespace ps
