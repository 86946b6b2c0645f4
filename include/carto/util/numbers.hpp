// carto/util/numbers.hpp — the one parser for numbers written by users (flags, spec and mesh text).
//
// Design note: the whole text must be the number: no sign other than a leading '-', no leading or
// trailing space (" 0.1" and "0.1 " are both refused), no trailing unit. Integers must fit in
// int64; reals must be finite (no "nan", "inf", or a value like 1e309 that overflows to infinity).
// The parsers return std::nullopt on bad text, so that each caller names its own field and accepted
// form in the message.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string_view>
#include <system_error>

namespace carto {

// A whole number in int64, written in decimal with an optional leading '-'.
[[nodiscard]] inline std::optional<std::int64_t> parse_int64(std::string_view text) {
  if (text.empty()) return std::nullopt;
  std::int64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return v;
}

// A finite real number in decimal or scientific notation ("0.1", "-2", "3e-4").
[[nodiscard]] inline std::optional<double> parse_real(std::string_view text) {
  if (text.empty()) return std::nullopt;
  double v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(v)) {
    return std::nullopt;
  }
  return v;
}

}  // namespace carto
