// Text for people: numbers, sizes, durations and tables, as every pstrain program prints
// them. Pure functions; safe from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ps {

// The most bytes of input an error or log line quotes.
inline constexpr size_t kMaxQuotedBytes = 256;
// `text` if it has at most `max_bytes` bytes; else its first max_bytes bytes (fewer, so
// as not to end inside a UTF-8 sequence) followed by "… (N bytes more)", N counting what
// was cut.
std::string CutText(std::string_view text, size_t max_bytes = kMaxQuotedBytes);
// Input (a token, a line, a field of a data file, a value of a config) as an error or log
// line quotes it: quote + CutText(text) + quote. Every error path that quotes input uses it.
std::string QuoteInput(std::string_view text, char quote = '\'');

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
