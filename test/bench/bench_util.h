// Shared by the benchmark programs: the machine's load, fatal errors named by the program
// (a benchmark is not a test: any failure ends the run with exit status 1), flag values.
#pragma once

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "libps/core/status.h"

namespace ps::bench {

using Clock = std::chrono::steady_clock;

// "<program>: <what>" on stderr, exit 1.
[[noreturn]] inline void Die(const std::string& what) {
  std::fprintf(stderr, "%s: %s\n", program_invocation_short_name, what.c_str());
  std::exit(1);
}

// Dies with "<what>: <status>" unless `st` is OK.
inline void Check(const Status& st, const std::string& what) {
  if (!st.ok()) Die(what + ": " + st.ToString());
}

template <typename T>
T Must(Result<T> r, const std::string& what) {
  if (!r.ok()) Die(what + ": " + r.status().ToString());
  return std::move(*r);
}

// "1.52 1.20 0.98": the machine's load averages, printed so a reader can judge the noise.
inline std::string LoadAverage() {
  FILE* f = std::fopen("/proc/loadavg", "r");
  if (f == nullptr) return "?";
  double a = 0, b = 0, c = 0;
  int n = std::fscanf(f, "%lf %lf %lf", &a, &b, &c);
  std::fclose(f);
  if (n != 3) return "?";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f %.2f %.2f", a, b, c);
  return buf;
}

inline double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// The value after flag argv[*i] (advancing *i); dies naming the flag when there is none.
inline std::string FlagValue(int argc, char** argv, int* i) {
  if (*i + 1 >= argc) Die(std::string("missing value for ") + argv[*i]);
  return argv[++*i];
}

}  // namespace ps::bench
