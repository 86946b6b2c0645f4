#include <carto/util/checked.hpp>
#include <carto/util/numbers.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <limits>
#include <random>

using carto::checked_add;
using carto::checked_mul;
using carto::checked_sub;

namespace {
__extension__ using Wide = __int128;
// Reference: the exact result in 128 bits, and whether it fits in int64.
bool fits(Wide v) {
  return v >= static_cast<Wide>(std::numeric_limits<std::int64_t>::min()) &&
         v <= static_cast<Wide>(std::numeric_limits<std::int64_t>::max());
}
}  // namespace

// Compile time: the helpers stay usable in constant expressions (the symbolic profiler needs it).
static_assert(checked_mul(3'000'000'000, 3'000'000'000, "x") == 9'000'000'000'000'000'000);
static_assert(checked_add(carto::kInt64Max - 1, 1, "x") == carto::kInt64Max);
static_assert(carto::checked_product("x", {2, 3, 7}) == 42);

TEST_CASE("checked arithmetic equals 128-bit arithmetic wherever it fits, and throws elsewhere",
          "[util][checked]") {
  std::mt19937_64 rng(7);
  // Magnitudes spread over every bit width, so both sides of the overflow boundary are hit.
  auto draw = [&] {
    const int bits = static_cast<int>(rng() % 64);
    const auto mag = static_cast<std::int64_t>(rng() >> (64 - bits - 1) >> 1);
    return (rng() & 1) != 0 ? -mag : mag;
  };
  int overflowed = 0;
  int fitted = 0;
  for (int i = 0; i < 20000; ++i) {
    const std::int64_t a = draw();
    const std::int64_t b = draw();
    const Wide product = static_cast<Wide>(a) * b;
    const Wide sum = static_cast<Wide>(a) + b;
    const Wide difference = static_cast<Wide>(a) - b;
    if (fits(product)) {
      REQUIRE(checked_mul(a, b, "product") == static_cast<std::int64_t>(product));
      ++fitted;
    } else {
      REQUIRE_THROWS_AS(checked_mul(a, b, "product"), carto::Error);
      ++overflowed;
    }
    if (fits(sum)) {
      REQUIRE(checked_add(a, b, "sum") == static_cast<std::int64_t>(sum));
    } else {
      REQUIRE_THROWS_AS(checked_add(a, b, "sum"), carto::Error);
    }
    if (fits(difference)) {
      REQUIRE(checked_sub(a, b, "difference") == static_cast<std::int64_t>(difference));
    } else {
      REQUIRE_THROWS_AS(checked_sub(a, b, "difference"), carto::Error);
    }
  }
  // The draw really exercised both outcomes.
  REQUIRE(overflowed > 1000);
  REQUIRE(fitted > 1000);
}

TEST_CASE("an overflow names the quantity, the operands and the limit", "[util][checked]") {
  REQUIRE_THROWS_WITH(
      checked_mul(4294967296, 4294967296, "elements of tensor 'x'"),
      Catch::Contains("elements of tensor 'x' overflows: 4294967296 * 4294967296") &&
          Catch::Contains("9223372036854775807"));
  REQUIRE_THROWS_WITH(
      carto::checked_product("devices of mesh {x:2^32}", {65536, 65536, 65536, 65536}),
      Catch::Contains("devices of mesh"));
  REQUIRE_THROWS_WITH(carto::check_at_most(2000000, carto::kMaxDevices, "the mesh's device count"),
                      Catch::Contains("the mesh's device count is 2000000; at most 1048576"));
  REQUIRE_THROWS_WITH(carto::check_in_range(0, 1, 10, "layers"),
                      Catch::Contains("layers is 0; it must be at least 1"));
  REQUIRE(carto::check_in_range(10, 1, 10, "layers") == 10);
}

TEST_CASE("a double converts to int64 only when finite, whole and in range", "[util][checked]") {
  using carto::checked_to_int64;
  REQUIRE(checked_to_int64(4096.0, "batch") == 4096);
  REQUIRE(checked_to_int64(-3.0, "offset", -10, 10) == -3);
  REQUIRE(checked_to_int64(9007199254740992.0, "big") == 9007199254740992);
  REQUIRE_THROWS_WITH(
      checked_to_int64(4294967296.0, "zero_stage", 0, 3),
      Catch::Contains("zero_stage is 4.29497e+09; it must be a whole number in [0, 3]"));
  REQUIRE_THROWS_WITH(checked_to_int64(1.5, "micro_batches", 1), Catch::Contains("micro_batches"));
  REQUIRE_THROWS_AS(checked_to_int64(std::nan(""), "x"), carto::Error);
  REQUIRE_THROWS_AS(checked_to_int64(std::numeric_limits<double>::infinity(), "x"), carto::Error);
  REQUIRE_THROWS_AS(checked_to_int64(9223372036854775808.0, "x"), carto::Error);
  REQUIRE_THROWS_AS(checked_to_int64(-1.0, "strategy_index"), carto::Error);
}

TEST_CASE("one number parser: the whole text is the number, spaces on either side refused",
          "[util][numbers]") {
  REQUIRE(carto::parse_int64("4096") == 4096);
  REQUIRE(carto::parse_int64("-7") == -7);
  REQUIRE(carto::parse_int64("9223372036854775807") == carto::kInt64Max);
  REQUIRE_FALSE(carto::parse_int64("9223372036854775808"));
  REQUIRE_FALSE(carto::parse_int64(" 1"));
  REQUIRE_FALSE(carto::parse_int64("1 "));
  REQUIRE_FALSE(carto::parse_int64("+1"));
  REQUIRE_FALSE(carto::parse_int64("1.0"));
  REQUIRE_FALSE(carto::parse_int64(""));
  REQUIRE(carto::parse_real("0.1") == 0.1);
  REQUIRE(carto::parse_real("3e-4") == 3e-4);
  REQUIRE(carto::parse_real("-2") == -2.0);
  REQUIRE_FALSE(carto::parse_real(" 0.1"));
  REQUIRE_FALSE(carto::parse_real("0.1 "));
  REQUIRE_FALSE(carto::parse_real("1e309"));
  REQUIRE_FALSE(carto::parse_real("nan"));
  REQUIRE_FALSE(carto::parse_real("inf"));
  REQUIRE_FALSE(carto::parse_real("0.1x"));
  REQUIRE_FALSE(carto::parse_real(""));
}
