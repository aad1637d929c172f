#include "libps/prom/process.h"

#include <sys/resource.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

namespace ps::prom {

namespace {
const double kStartUnixTime =
    std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}  // namespace

void WriteProcessMetrics(Writer& w) {
  rusage ru{};
  if (::getrusage(RUSAGE_SELF, &ru) == 0) {
    const double cpu = static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
                       static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
    w.Counter("process_cpu_seconds_total", "Total user and system CPU time spent in seconds.", cpu);
  }
  // /proc/self/statm: size and resident set, in pages.
  std::ifstream statm("/proc/self/statm");
  uint64_t size_pages = 0, resident_pages = 0;
  if (statm >> size_pages >> resident_pages) {
    const double page = static_cast<double>(::sysconf(_SC_PAGESIZE));
    w.Gauge("process_virtual_memory_bytes", "Virtual memory size in bytes.",
            static_cast<double>(size_pages) * page);
    w.Gauge("process_resident_memory_bytes", "Resident memory size in bytes.",
            static_cast<double>(resident_pages) * page);
  }
  std::error_code ec;
  double fds = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/self/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec)) {
    ++fds;
  }
  if (!ec) w.Gauge("process_open_fds", "Number of open file descriptors.", fds);
  rlimit rl{};
  if (::getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY) {
    w.Gauge("process_max_fds", "Maximum number of open file descriptors.",
            static_cast<double>(rl.rlim_cur));
  }
  w.Gauge("process_start_time_seconds", "Start time of the process since unix epoch in seconds.",
          kStartUnixTime);
}

}  // namespace ps::prom
