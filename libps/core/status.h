// Status and Result<T>: the error currency of libps (after Arrow's status.h/result.h).
// Anything that touches input, disk, network or configuration returns one of these.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <variant>

namespace ps {

enum class Code : int {
  kOk = 0,
  kInvalidArgument,  // bad user input: config, flags, job file
  kNotFound,
  kAlreadyExists,
  kOutOfRange,
  kDataLoss,     // corrupt or truncated file/frame
  kUnavailable,  // peer unreachable or disconnected; retrying may help
  kDeadlineExceeded,
  kProtocol,          // peer violated the wire protocol
  kPermissionDenied,  // wrong cluster id or secret
  kAborted,           // operation cancelled (shutdown, stale generation)
  kFailedPrecondition,
  kIo,  // local disk/OS error
  kInternal,
  kDraining,  // the peer is stopping: it takes no new work, another peer may
};

const char* CodeName(Code code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Code code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return {}; }
  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: task.index: 3 is out of range for 2 worker tasks"
  std::string ToString() const;
  // Returns a copy whose message is "<context>: <message>".
  Status WithContext(const std::string& context) const;

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

inline Status InvalidArgument(std::string m) { return {Code::kInvalidArgument, std::move(m)}; }
inline Status NotFound(std::string m) { return {Code::kNotFound, std::move(m)}; }
inline Status OutOfRange(std::string m) { return {Code::kOutOfRange, std::move(m)}; }
inline Status DataLoss(std::string m) { return {Code::kDataLoss, std::move(m)}; }
inline Status Unavailable(std::string m) { return {Code::kUnavailable, std::move(m)}; }
inline Status DeadlineExceeded(std::string m) { return {Code::kDeadlineExceeded, std::move(m)}; }
inline Status ProtocolError(std::string m) { return {Code::kProtocol, std::move(m)}; }
inline Status PermissionDenied(std::string m) { return {Code::kPermissionDenied, std::move(m)}; }
inline Status Aborted(std::string m) { return {Code::kAborted, std::move(m)}; }
inline Status Draining(std::string m) { return {Code::kDraining, std::move(m)}; }
inline Status FailedPrecondition(std::string m) {
  return {Code::kFailedPrecondition, std::move(m)};
}
inline Status IoError(std::string m) { return {Code::kIo, std::move(m)}; }
inline Status Internal(std::string m) { return {Code::kInternal, std::move(m)}; }

namespace internal {
// Both print one line on stderr and abort, in every build type (not assert: release
// builds define NDEBUG).
// PS_ASSERT's failure: "pstrain: internal assertion failed: <cond> at <file>:<line>".
[[noreturn]] void AssertFail(const char* cond, const char* file, int line);
// Result::value() (or * or ->) of an error:
// "pstrain: internal error: value() of a Result holding an error: <status.ToString()>".
[[noreturn]] void ValueOfError(const Status& status);
}  // namespace internal

// Result<T>: a value or a non-OK Status. value(), * and -> on an error abort the
// process (internal::ValueOfError): check ok() first, or use PS_ASSIGN_OR_RETURN.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}         // NOLINT: implicit by design
  Result(Status status) : status_(std::move(status)) {  // NOLINT: implicit by design
    if (status_.ok()) [[unlikely]] {
      internal::AssertFail("Result constructed from an OK status", __FILE__, __LINE__);
    }
  }

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & {
    CheckValue();
    return *value_;
  }
  const T& value() const& {
    CheckValue();
    return *value_;
  }
  T&& value() && {
    CheckValue();
    return std::move(*value_);
  }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }
  T ValueOr(T other) const& { return ok() ? *value_ : std::move(other); }

 private:
  void CheckValue() const {
    if (!ok()) [[unlikely]]
      internal::ValueOfError(status_);
  }

  Status status_;
  std::optional<T> value_;
};

}  // namespace ps

#define PS_CONCAT_INNER(a, b) a##b
#define PS_CONCAT(a, b) PS_CONCAT_INNER(a, b)

#define PS_RETURN_IF_ERROR(expr)     \
  do {                               \
    ::ps::Status _ps_st = (expr);    \
    if (!_ps_st.ok()) return _ps_st; \
  } while (0)

// NOLINTBEGIN(bugprone-macro-parentheses): `lhs` is a declaration ("auto x"), which
// parentheses would break.
#define PS_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                             \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()

// PS_ASSIGN_OR_RETURN(auto x, MakeX());
#define PS_ASSIGN_OR_RETURN(lhs, rexpr) \
  PS_ASSIGN_OR_RETURN_IMPL(PS_CONCAT(_ps_result_, __LINE__), lhs, rexpr)
// NOLINTEND(bugprone-macro-parentheses)

// For impossible states only — never to validate input (STYLE.md, Errors).
#define PS_ASSERT(cond)                                                 \
  do {                                                                  \
    if (!(cond)) ::ps::internal::AssertFail(#cond, __FILE__, __LINE__); \
  } while (0)
