// Logging: one line per record to stderr, "2026-11-22T09:51:16.123Z I [ps:0] message".
// A line is at most kMaxLineBytes: a longer message is cut (CutText, libps/core/text.h).
// Thread-safe; any thread may call.
#pragma once

#include <cstddef>
#include <sstream>
#include <string>
#include <string_view>

namespace ps::log {

enum class Level : int { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

// The longest line the logger writes, its "\n" included (4 KiB).
inline constexpr size_t kMaxLineBytes = 4096;
// `line` cut (CutText) so that it and a "\n" fit in kMaxLineBytes: for a line printed
// without the logger, such as a daemon's last one.
std::string BoundLine(std::string_view line);

// Sets the tag printed in every line, e.g. "chief:0". Call once at start-up.
void SetTag(std::string tag);
void SetLevel(Level level);
// Parses "debug" | "info" | "warning" | "error".
bool ParseLevel(std::string_view text, Level* level);
bool Enabled(Level level);
void Write(Level level, std::string_view message);

class Line {
 public:
  explicit Line(Level level) : level_(level) {}
  ~Line() { Write(level_, stream_.str()); }
  template <typename T>
  Line& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace ps::log

namespace ps::log {
// Turns the streamed Line into void so PS_LOG is a single expression (safe in an unbraced if).
struct Voidify {
  void operator&(const Line&) const {}
};
}  // namespace ps::log

// PS_LOG(Info) << "text " << value;  — evaluates the operands only when the level is on.
// NOLINTBEGIN(bugprone-macro-parentheses): the expansion is the left operand of <<.
#define PS_LOG(level)                             \
  !::ps::log::Enabled(::ps::log::Level::k##level) \
      ? (void)0                                   \
      : ::ps::log::Voidify() & ::ps::log::Line(::ps::log::Level::k##level)
// NOLINTEND(bugprone-macro-parentheses)
