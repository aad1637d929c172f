// Text for people: numbers, sizes, durations and tables, as every pstrain program prints
// them. Pure functions; safe from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ps {

// v with `decimals` digits after the point: Fixed(0.81234, 2) == "0.81".
std::string Fixed(double v, int decimals);
// "512 B", "3.1 KiB", "1.2 MiB", "2.0 GiB".
std::string HumanBytes(uint64_t bytes);
// "4.2 s", "42 s", "3 min 5 s", "2 h 7 min"; "-" for a negative or non-finite value.
std::string FormatDuration(double seconds);
// Rows as aligned columns (two spaces apart), each line prefixed by `indent`, trailing
// spaces trimmed, one "\n" per row.
std::string TableText(const std::vector<std::vector<std::string>>& rows,
                      const std::string& indent = "");

}  // namespace ps
