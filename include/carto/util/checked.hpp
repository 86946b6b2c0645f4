// carto/util/checked.hpp — sizes that cannot overflow: checked int64 arithmetic and sane bounds.
//
// Design note: every count carto computes from user input (elements of a shape, devices of a mesh,
// FLOPs and bytes of a step) goes through checked_mul / checked_add, which throw a carto::Error
// that names the quantity and the limit instead of wrapping around. They are constexpr: at compile
// time an overflow stops compilation at the (non-constexpr) throw, at run time it throws.
// check_at_most bounds the sizes whose work grows with them (mesh devices, layers, ranks) with
// limits stated here, so that a huge value is refused at once rather than exhausting memory or
// time. checked_to_int64 converts a double (a value read from JSON or a flag) only after checking
// it is finite, whole and in range, since casting an out-of-range double to an integer is
// undefined.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>

#include "carto/error.hpp"

namespace carto {

inline constexpr std::int64_t kInt64Max = std::numeric_limits<std::int64_t>::max();

// Upper bounds on sizes whose work grows with them. Larger values are refused with a message naming
// the bound. 2^20 devices is beyond any cluster built; a mesh's devices are walked one by one.
inline constexpr std::int64_t kMaxDevices = std::int64_t{1} << 20;
// Layers of one model: the graph holds every layer's ops, the profiler walks them one by one.
inline constexpr std::int64_t kMaxLayers = 10'000;
// Thread ranks in one process (the CPU backend starts one thread per rank).
inline constexpr std::int64_t kMaxThreadRanks = 256;

namespace detail {
[[noreturn]] inline void overflow(std::string_view what, std::int64_t a, std::string_view op,
                                  std::int64_t b) {
  fail("carto: ", what, " overflows: ", a, " ", op, " ", b,
       " exceeds the largest representable count 9223372036854775807 (2^63-1); use smaller sizes");
}
[[noreturn]] inline void above_bound(std::string_view what, std::int64_t value, std::int64_t limit,
                                     std::string_view hint) {
  fail("carto: ", what, " is ", value, "; at most ", limit, " is supported",
       hint.empty() ? "" : " (", hint, hint.empty() ? "" : ")");
}
[[noreturn]] inline void below_bound(std::string_view what, std::int64_t value,
                                     std::int64_t least) {
  fail("carto: ", what, " is ", value, "; it must be at least ", least);
}
[[noreturn]] inline void bad_conversion(std::string_view what, double value, std::int64_t lo,
                                        std::int64_t hi) {
  fail("carto: ", what, " is ", value, "; it must be a whole number in [", lo, ", ", hi, "]");
}
}  // namespace detail

// a * b, or a carto::Error naming `what` when the product does not fit in int64.
[[nodiscard]] constexpr std::int64_t checked_mul(std::int64_t a, std::int64_t b,
                                                 std::string_view what) {
  std::int64_t r = 0;
  if (__builtin_mul_overflow(a, b, &r)) detail::overflow(what, a, "*", b);
  return r;
}

// a + b, or a carto::Error naming `what` when the sum does not fit in int64.
[[nodiscard]] constexpr std::int64_t checked_add(std::int64_t a, std::int64_t b,
                                                 std::string_view what) {
  std::int64_t r = 0;
  if (__builtin_add_overflow(a, b, &r)) detail::overflow(what, a, "+", b);
  return r;
}

// a - b, or a carto::Error naming `what` when the difference does not fit in int64.
[[nodiscard]] constexpr std::int64_t checked_sub(std::int64_t a, std::int64_t b,
                                                 std::string_view what) {
  std::int64_t r = 0;
  if (__builtin_sub_overflow(a, b, &r)) detail::overflow(what, a, "-", b);
  return r;
}

// The product of several factors, each step checked: checked_product("elements", {a, b, c}).
[[nodiscard]] constexpr std::int64_t checked_product(std::string_view what,
                                                     std::initializer_list<std::int64_t> factors) {
  std::int64_t r = 1;
  for (std::int64_t f : factors) r = checked_mul(r, f, what);
  return r;
}

// `value` when it is at most `limit`; otherwise a carto::Error naming `what`, the value and the
// limit (and `hint`, when given, in parentheses).
constexpr std::int64_t check_at_most(std::int64_t value, std::int64_t limit, std::string_view what,
                                     std::string_view hint = {}) {
  if (value > limit) detail::above_bound(what, value, limit, hint);
  return value;
}

// `value` when it is in [least, limit]; otherwise a carto::Error naming `what`.
constexpr std::int64_t check_in_range(std::int64_t value, std::int64_t least, std::int64_t limit,
                                      std::string_view what, std::string_view hint = {}) {
  if (value < least) detail::below_bound(what, value, least);
  return check_at_most(value, limit, what, hint);
}

// A double that must hold a whole number in [lo, hi] (a count read from JSON or a flag), converted
// only after the check: NaN, infinities, fractions and out-of-range values are a carto::Error.
[[nodiscard]] inline std::int64_t checked_to_int64(double value, std::string_view what,
                                                   std::int64_t lo = 0,
                                                   std::int64_t hi = kInt64Max) {
  // 2^63 is exactly representable; every double below it converts without overflow.
  constexpr double kTwo63 = 9223372036854775808.0;
  if (!std::isfinite(value) || value != std::floor(value) || value < -kTwo63 || value >= kTwo63) {
    detail::bad_conversion(what, value, lo, hi);
  }
  const auto v = static_cast<std::int64_t>(value);
  if (v < lo || v > hi) detail::bad_conversion(what, value, lo, hi);
  return v;
}

}  // namespace carto
