#include "libps/core/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <mutex>

#include "libps/core/text.h"

namespace ps::log {
namespace {
std::mutex g_mu;
std::string g_tag;  // guarded by g_mu
std::atomic<int> g_level{static_cast<int>(Level::kInfo)};

char LevelChar(Level level) {
  switch (level) {
    case Level::kDebug:
      return 'D';
    case Level::kInfo:
      return 'I';
    case Level::kWarning:
      return 'W';
    case Level::kError:
      return 'E';
  }
  return '?';
}
}  // namespace

void SetTag(std::string tag) {
  std::lock_guard lock(g_mu);
  g_tag = std::move(tag);
}

void SetLevel(Level level) { g_level.store(static_cast<int>(level)); }

bool ParseLevel(std::string_view text, Level* level) {
  if (text == "debug")
    *level = Level::kDebug;
  else if (text == "info")
    *level = Level::kInfo;
  else if (text == "warning")
    *level = Level::kWarning;
  else if (text == "error")
    *level = Level::kError;
  else
    return false;
  return true;
}

bool Enabled(Level level) { return static_cast<int>(level) >= g_level.load(); }

namespace {
// The room CutText's "… (N bytes more)" takes at most: 3 + 2 + 20 digits + 11.
constexpr size_t kCutMarkBytes = 40;

// `text` cut so that it fits in `room` bytes, the cut mark included.
std::string_view Fit(std::string_view text, size_t room, std::string* storage) {
  if (text.size() <= room) return text;
  *storage = CutText(text, room > kCutMarkBytes ? room - kCutMarkBytes : 0);
  return *storage;
}
}  // namespace

std::string BoundLine(std::string_view line) {
  std::string cut;
  return std::string(Fit(line, kMaxLineBytes - 1, &cut));
}

void Write(Level level, std::string_view message) {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t secs = system_clock::to_time_t(now);
  int millis = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%dT%H:%M:%S", &tm);
  std::lock_guard lock(g_mu);
  const std::string_view tag = g_tag.empty() ? std::string_view("pstrain") : g_tag;
  // "<stamp>.mmmZ L [tag] " and the "\n"
  const size_t fixed = std::strlen(stamp) + 5 + 3 + tag.size() + 3 + 1;
  std::string cut;
  message = Fit(message, kMaxLineBytes > fixed ? kMaxLineBytes - fixed : 0, &cut);
  std::fprintf(stderr, "%s.%03dZ %c [%.*s] %.*s\n", stamp, millis, LevelChar(level),
               static_cast<int>(tag.size()), tag.data(), static_cast<int>(message.size()),
               message.data());
  std::fflush(stderr);
}

}  // namespace ps::log
