// bf16.hpp against a reference that rounds by the definition instead of bit tricks: the two bf16
// neighbours of a float (truncation, and the next bf16 away from zero) compared in double, the
// nearer one taken and ties going to the even significand. Checked on every 65536th float (one per
// bf16 value, at a varying offset inside it), on every tie pattern of every exponent, and on the
// special values.
#include <bit>
#include <carto/runtime/bf16.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <sstream>
#include <string>

using namespace carto;

namespace {

float from_bits(std::uint32_t b) { return std::bit_cast<float>(b); }
std::uint32_t bits_of(float f) { return std::bit_cast<std::uint32_t>(f); }

// Round to nearest even by the definition, for a finite or infinite non-NaN x. Candidates are the
// truncation t (toward zero) and the next bf16 magnitude above it (which may be infinity: 0x7F80).
std::uint16_t reference_bits(float x) {
  const std::uint32_t u = bits_of(x);
  const auto sign = static_cast<std::uint16_t>(u >> 31 << 15);
  const std::uint32_t magnitude = u & 0x7FFFFFFFu;
  if (magnitude == 0x7F800000u) return static_cast<std::uint16_t>(sign | 0x7F80u);  // ±inf
  const auto low = static_cast<std::uint16_t>(magnitude >> 16);
  const auto high = static_cast<std::uint16_t>(low + 1);
  const double exact = from_bits(magnitude);
  const double below = from_bits(static_cast<std::uint32_t>(low) << 16);
  // Past the largest finite bf16 the upper neighbour is what round-to-nearest calls infinity:
  // the value 2^128 (where the next binade would start), so the halfway point is 0x7F7F8000.
  const double above = high == 0x7F80u ? std::ldexp(1.0, 128)
                                       : double{from_bits(static_cast<std::uint32_t>(high) << 16)};
  const double down = exact - below, up = above - exact;
  std::uint16_t pick = 0;
  if (down < up) {
    pick = low;
  } else if (up < down) {
    pick = high;
  } else {
    pick = (low & 1u) == 0 ? low : high;  // a tie: the even significand
  }
  return static_cast<std::uint16_t>(sign | pick);
}

std::string hex(std::uint32_t v) {
  std::ostringstream s;
  s << "0x" << std::hex << v;
  return s.str();
}

// Counts the floats whose to_bf16 differs from the reference (NaNs: must stay a quiet NaN of the
// same sign), and reports the first.
struct Mismatches {
  std::int64_t checked = 0, wrong = 0;
  std::string first;
  void check(std::uint32_t u) {
    ++checked;
    const float x = from_bits(u);
    const Bf16 got = to_bf16(x);
    bool ok = false;
    std::uint32_t want = 0;
    if (std::isnan(x)) {
      const bool nan = (got.bits & 0x7F80u) == 0x7F80u && (got.bits & 0x007Fu) != 0;
      ok = nan && (got.bits & 0x0040u) != 0 && (got.bits >> 15) == (u >> 31) &&
           std::isnan(to_float(got));
      want = (u >> 16) | 0x40u;
    } else {
      want = reference_bits(x);
      ok = got.bits == want;
      // Widening is exact and round_to_bf16 is their composition.
      ok = ok && bits_of(to_float(got)) == static_cast<std::uint32_t>(got.bits) << 16 &&
           bits_of(round_to_bf16(x)) == static_cast<std::uint32_t>(want) << 16;
    }
    if (!ok && wrong++ == 0) {
      first = "to_bf16(" + hex(u) + ") = " + hex(got.bits) + ", expected " + hex(want);
    }
  }
};

}  // namespace

TEST_CASE("to_bf16 rounds to nearest even on one float per bf16 value", "[bf16]") {
  Mismatches m;
  // Step 65536 + 4099: every bf16 value's range of 65536 floats is visited about once, at an
  // offset that walks through the dropped half (below, at and above the halfway point).
  for (std::uint64_t u = 0; u <= 0xFFFFFFFFull; u += 65536 + 4099) {
    m.check(static_cast<std::uint32_t>(u));
  }
  INFO(m.checked << " floats; first mismatch: " << m.first);
  CHECK(m.checked > 60000);
  CHECK(m.wrong == 0);
}

TEST_CASE("to_bf16 breaks every tie toward the even significand", "[bf16]") {
  Mismatches m;
  std::int64_t even_kept = 0, odd_kept = 0;
  // Every upper half (sign, exponent, 7 fraction bits) with the dropped half exactly 0x8000, and
  // its two neighbours 0x7FFF and 0x8001.
  for (std::uint32_t upper = 0; upper <= 0xFFFFu; ++upper) {
    if ((upper & 0x7F80u) == 0x7F80u) continue;  // inf and NaN patterns: below
    const std::uint32_t tie = upper << 16 | 0x8000u;
    m.check(tie);
    m.check(tie - 1);
    m.check(tie + 1);
    const Bf16 got = to_bf16(from_bits(tie));
    if ((upper & 1u) == 0) {
      even_kept += got.bits == upper;
    } else {
      odd_kept += got.bits == ((upper + 1) & 0xFFFFu);
    }
  }
  INFO(m.checked << " floats; first mismatch: " << m.first);
  CHECK(m.wrong == 0);
  CHECK(even_kept == 0xFF00 / 2);  // an even kept bit stays
  CHECK(odd_kept == 0xFF00 / 2);   // an odd one rounds up (carrying into the exponent)
}

TEST_CASE("bf16 special values: zeros, subnormals, the largest finite, overflow, inf, NaN",
          "[bf16]") {
  CHECK(to_bf16(0.0f).bits == 0x0000u);
  CHECK(to_bf16(-0.0f).bits == 0x8000u);
  CHECK(to_bf16(1.0f).bits == 0x3F80u);
  CHECK(to_bf16(from_bits(0x00000001u)).bits == 0x0000u);  // the smallest subnormal: to +0
  CHECK(to_bf16(from_bits(0x00008000u)).bits == 0x0000u);  // half the smallest bf16 one: tie, even
  CHECK(to_bf16(from_bits(0x00018000u)).bits == 0x0002u);  // tie, odd: up
  CHECK(to_bf16(from_bits(0x007FFFFFu)).bits == 0x0080u);  // the largest subnormal: to FLT_MIN
  CHECK(to_bf16(from_bits(0x7F7F7FFFu)).bits == 0x7F7Fu);  // below halfway: the largest finite
  CHECK(to_bf16(std::numeric_limits<float>::max()).bits == 0x7F80u);  // past it: infinity
  CHECK(to_bf16(-std::numeric_limits<float>::max()).bits == 0xFF80u);
  CHECK(to_bf16(std::numeric_limits<float>::infinity()).bits == 0x7F80u);
  CHECK(to_bf16(-std::numeric_limits<float>::infinity()).bits == 0xFF80u);
  Mismatches m;
  // NaNs: quiet and signalling, both signs, payloads only in the dropped half (which truncation
  // would turn into infinity).
  for (const std::uint32_t u : {0x7FC00000u, 0xFFC00000u, 0x7F800001u, 0xFF800001u, 0x7F80FFFFu,
                                0x7FFFFFFFu, 0xFFFFFFFFu, 0x7FBFFFFFu}) {
    m.check(u);
  }
  INFO(m.first);
  CHECK(m.wrong == 0);
  STATIC_REQUIRE(to_bf16(3.0f).bits == 0x4040u);       // constexpr
  STATIC_REQUIRE(round_to_bf16(1.00390625f) == 1.0f);  // 1 + 2^-8: a tie, to the even 1
  STATIC_REQUIRE(kBf16Unit == 0x1.0p-8);
}

TEST_CASE("one bf16 rounding is within kBf16Unit relative error", "[bf16]") {
  double worst = 0;
  for (std::uint32_t u = 0x00800000u; u < 0x7F000000u; u += 9973) {  // normal floats
    const float x = from_bits(u);
    worst = std::max(worst, std::fabs(double{round_to_bf16(x)} - x) / x);
  }
  INFO("worst relative error " << worst);
  CHECK(worst <= kBf16Unit);
  CHECK(worst > kBf16Unit / 2);  // and the bound is nearly reached
}
