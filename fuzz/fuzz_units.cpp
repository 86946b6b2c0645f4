// fuzz/fuzz_units.cpp — the unit parsers on any bytes: parse_bytes (memory sizes), parse_dtype and
// parse_search_space. A size that parses and is below 1 PiB prints (format_bytes) as a size that
// parses back within the print's rounding (two decimals: 0.5 % of the value, or exact below 1 KiB).
#include <carto/search/space.hpp>
#include <carto/spec/dtype.hpp>
#include <carto/util/units.hpp>
#include <cmath>

#include "fuzz_support.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using namespace carto;
  const std::string_view text = fuzz::as_text(data, size);
  if (const auto bytes = fuzz::parsed([](std::string_view t) { return parse_bytes(t); }, text)) {
    if (*bytes < 0) fuzz::broken("parse_bytes returned a negative size", text, "");
    constexpr std::int64_t kPiB = std::int64_t{1} << 50;
    if (*bytes < kPiB) {
      const std::string shown = format_bytes(*bytes);
      std::int64_t back = 0;
      try {
        back = parse_bytes(shown);
      } catch (const Error& e) {
        fuzz::broken("format_bytes printed a size parse_bytes refuses", text,
                     shown + " -> " + e.what());
      }
      const double error = std::fabs(static_cast<double>(back) - static_cast<double>(*bytes));
      if (error > 0.005 * static_cast<double>(*bytes) + 1.0) {
        fuzz::broken("format_bytes and parse_bytes disagree", text, shown);
      }
    }
  }
  (void)parse_dtype(text);
  (void)fuzz::parsed([](std::string_view t) { return parse_search_space(t); }, text);
  return 0;
}
