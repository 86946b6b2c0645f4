// carto/util/units.hpp — memory sizes as people write them: "80GiB", "40 GB", "512MiB", "1000000".
//
// Design note: binary units (KiB, MiB, GiB, TiB, PiB = 2^10..2^50) and decimal units (kB, KB, MB,
// GB, TB, PB = 10^3..10^15) are both accepted, case-sensitively as written here, with an optional
// space and an optional fraction ("1.5GiB"); the result is rounded down to whole bytes and must fit
// in int64. A plain number is bytes. Errors name the text and the accepted forms. format_bytes
// prints only forms parse_bytes reads, and what it prints reads back to within the printed
// precision (half a unit of the last digit; one unit where rounding to nearest would pass 2^63-1,
// so it rounds down there): parse_bytes(format_bytes(n)) is n, to that precision, for every n >= 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "carto/error.hpp"

namespace carto {

inline std::int64_t parse_bytes(std::string_view text) {
  auto bad = [&](std::string_view why) -> std::int64_t {
    detail::fail(
        "carto: cannot read the memory size '", text, "': ", why,
        "; write a number of bytes or a number with one of B, KiB, MiB, GiB, TiB, PiB, kB, "
        "MB, GB, TB, PB (e.g. 80GiB)");
  };
  std::size_t i = 0;
  std::int64_t whole = 0;
  std::size_t digits = 0;
  while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
    const int digit = text[i] - '0';
    if (whole > (INT64_MAX - digit) / 10) return bad("it is too large; at most 2^63-1 bytes");
    whole = whole * 10 + digit;
    ++i;
    ++digits;
  }
  double fraction = 0.0;
  if (i < text.size() && text[i] == '.') {
    ++i;
    double scale = 0.1;
    while (i < text.size() && text[i] >= '0' && text[i] <= '9') {
      fraction += scale * (text[i] - '0');
      scale /= 10;
      ++i;
      ++digits;
    }
  }
  if (digits == 0) return bad("it does not start with a number");
  if (i < text.size() && text[i] == ' ') ++i;
  const std::string_view unit = text.substr(i);
  struct Unit {
    std::string_view name;
    double factor;
  };
  constexpr Unit kUnits[] = {{"", 1},
                             {"B", 1},
                             {"KiB", 1024.0},
                             {"MiB", 1024.0 * 1024},
                             {"GiB", 1024.0 * 1024 * 1024},
                             {"TiB", 1024.0 * 1024 * 1024 * 1024},
                             {"PiB", 1024.0 * 1024 * 1024 * 1024 * 1024},
                             {"kB", 1e3},
                             {"KB", 1e3},
                             {"MB", 1e6},
                             {"GB", 1e9},
                             {"TB", 1e12},
                             {"PB", 1e15}};
  for (const Unit& u : kUnits) {
    if (u.name == unit) {
      if (u.factor == 1 && fraction != 0.0) return bad("a byte count is a whole number");
      if (u.factor == 1) return whole;  // exact: a double would round 2^63-1 up to 2^63
      const double value = (static_cast<double>(whole) + fraction) * u.factor;
      // 2^63 is exact in a double and every double below it converts to int64.
      if (!(value < 9223372036854775808.0)) return bad("it is too large; at most 2^63-1 bytes");
      return static_cast<std::int64_t>(std::floor(value));
    }
  }
  return bad(detail::concat("unknown unit '", unit, "'"));
}

// 85899345920 -> "80.00 GiB"; below 1 KiB: "512 B"; at most "8191.99 PiB" (2^63-1).
inline std::string format_bytes(std::int64_t bytes) {
  constexpr const char* kNames[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes);
  double unit = 1.0;
  int u = 0;
  while (std::fabs(v) >= 1024.0 && u < 5) {
    v /= 1024.0;
    unit *= 1024.0;
    ++u;
  }
  if (u == 0) return detail::concat(bytes, " B");
  // Rounded to nearest unless that reaches 2^63 (8192.00 PiB), which parse_bytes refuses: then the
  // largest two-digit value below it (bytes is below 2^63, though v may round up to it).
  constexpr double kTwo63 = 9223372036854775808.0;
  if (std::round(v * 100) / 100 * unit >= kTwo63) v = (std::ceil(kTwo63 / unit * 100) - 1) / 100;
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f %s", v, kNames[u]);
  return buf;
}

}  // namespace carto
