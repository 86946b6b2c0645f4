// The counter-based RNG: Philox4x32 against Random123's published known-answer vectors, shard
// independence over whole index domains, the arithmetic-only logarithm and cosine of the normals
// against libm in long double, the normals against a double-precision Box–Muller reference, and
// distribution moments within stated tolerances.
#include <carto/runtime/rng.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

using namespace carto;

namespace {

// Random123 1.14, tests/kat_vectors: "philox4x32 R  counter[4] key[2]  output[4]".
struct Kat {
  PhiloxCounter counter;
  PhiloxKey key;
  PhiloxCounter expected;
};
constexpr Kat kKat10[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};
constexpr Kat kKat7[] = {
    {{0, 0, 0, 0}, {0, 0}, {0x5f6fb709, 0x0d893f64, 0x4f121f81, 0x4f730a48}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x5207ddc2, 0x45165e59, 0x4d8ee751, 0x8c52f662}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0x4dfccaba, 0x190a87f0, 0xc47362ba, 0xb6b5242a}},
};

constexpr bool all_kat_pass() {
  for (const Kat& k : kKat10) {
    if (philox4x32<10>(k.counter, k.key) != k.expected) return false;
  }
  for (const Kat& k : kKat7) {
    if (philox4x32<7>(k.counter, k.key) != k.expected) return false;
  }
  return true;
}

struct Moments {
  double mean = 0, variance = 0, skewness = 0, excess_kurtosis = 0;
};
template <class F>
Moments moments(std::int64_t n, F&& value) {
  double sum = 0;
  for (std::int64_t i = 0; i < n; ++i) sum += value(i);
  const double mean = sum / static_cast<double>(n);
  double m2 = 0, m3 = 0, m4 = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const double d = value(i) - mean;
    m2 += d * d;
    m3 += d * d * d;
    m4 += d * d * d * d;
  }
  m2 /= static_cast<double>(n);
  m3 /= static_cast<double>(n);
  m4 /= static_cast<double>(n);
  return {.mean = mean,
          .variance = m2,
          .skewness = m3 / std::pow(m2, 1.5),
          .excess_kurtosis = m4 / (m2 * m2) - 3.0};
}

}  // namespace

TEST_CASE("Philox4x32-10 and -7 reproduce Random123's known-answer vectors", "[rng]") {
  STATIC_REQUIRE(all_kat_pass());
  for (const Kat& k : kKat10) CHECK(philox4x32<10>(k.counter, k.key) == k.expected);
  for (const Kat& k : kKat7) CHECK(philox4x32<7>(k.counter, k.key) == k.expected);
}

TEST_CASE("The element mapping: words of one block, seed and stream in key and counter", "[rng]") {
  const RngStream s{.seed = 0x0123456789abcdefull, .id = 0xfedcba9876543210ull};
  // Element 4·b + w is word w of the block with counter (b, 0, id lo, id hi) and key (seed lo, hi).
  for (std::uint64_t b : {0ull, 1ull, 77ull, (1ull << 33) + 5}) {
    const PhiloxCounter expected =
        philox4x32<10>({static_cast<std::uint32_t>(b), static_cast<std::uint32_t>(b >> 32),
                        0x76543210u, 0xfedcba98u},
                       {0x89abcdefu, 0x01234567u});
    for (std::uint32_t w = 0; w < 4; ++w) {
      CHECK(rng::bits(s, static_cast<std::int64_t>(4 * b + w)) == expected[w]);
    }
  }
  STATIC_REQUIRE(rng::uniform({.seed = 1, .id = 2}, 3) >= 0.0f);
  STATIC_REQUIRE(rng::uniform({.seed = 1, .id = 2}, 3) < 1.0f);
  // Different seeds, streams or indices give different words (no accidental aliasing).
  CHECK(rng::bits({.seed = 1, .id = 0}, 0) != rng::bits({.seed = 2, .id = 0}, 0));
  CHECK(rng::bits({.seed = 1, .id = 0}, 0) != rng::bits({.seed = 1, .id = 1}, 0));
  CHECK(rng::bits({.seed = 1, .id = 0}, 0) != rng::bits({.seed = 1, .id = 0}, 4));
  CHECK(stream_id(RngPurpose::dropout, 3, 7) != stream_id(RngPurpose::parameter_init, 3, 7));
  CHECK(stream_id(RngPurpose::dropout, 3, 7) == ((2ull << 56) | (3ull << 32) | 7ull));
}

TEST_CASE("Any shard regenerates the values of the same global indices", "[rng]") {
  // Global tensor (4, 6, 10); every box of a 2x3x2 split and some uneven boxes.
  const Index global{4, 6, 10};
  const RngStream s{.seed = 42, .id = stream_id(RngPurpose::test, 1, 0)};
  std::vector<float> whole(4 * 6 * 10);
  for (std::size_t i = 0; i < whole.size(); ++i)
    whole[i] = rng::normal(s, static_cast<std::int64_t>(i));

  std::int64_t checked = 0, wrong = 0;
  auto check_box = [&](const Index& offset, const Index& local) {
    const ShardPlacement where{.global_extents = global, .offset = offset};
    std::vector<float> shard(static_cast<std::size_t>(local[0] * local[1] * local[2]));
    for_each_global_index(where, local, [&](std::int64_t l, std::int64_t g) {
      shard[static_cast<std::size_t>(l)] = rng::normal(s, g);
    });
    // Compare through explicit coordinates, independent of for_each_global_index's arithmetic.
    for (std::int64_t a = 0; a < local[0]; ++a)
      for (std::int64_t b = 0; b < local[1]; ++b)
        for (std::int64_t c = 0; c < local[2]; ++c) {
          const std::int64_t g = ((offset[0] + a) * 6 + offset[1] + b) * 10 + offset[2] + c;
          const std::int64_t l = (a * local[1] + b) * local[2] + c;
          ++checked;
          wrong += shard[static_cast<std::size_t>(l)] != whole[static_cast<std::size_t>(g)];
        }
  };
  for (std::int64_t i = 0; i < 2; ++i)
    for (std::int64_t j = 0; j < 3; ++j)
      for (std::int64_t k = 0; k < 2; ++k) check_box({i * 2, j * 2, k * 5}, {2, 2, 5});
  check_box({1, 3, 7}, {3, 2, 3});
  check_box({0, 0, 0}, {4, 6, 10});
  CHECK(checked == 12 * 20 + 18 + 240);
  CHECK(wrong == 0);

  // The placement is validated.
  CHECK_THROWS_AS(for_each_global_index({.global_extents = global, .offset = {3, 0, 0}},
                                        Index{2, 6, 10}, [](std::int64_t, std::int64_t) {}),
                  Error);
}

// The relative error of `value` against `reference` (0 when both are 0).
double relative_error(double value, long double reference) {
  const long double diff = std::fabs(static_cast<long double>(value) - reference);
  return diff == 0 ? 0.0 : static_cast<double>(diff / std::fabs(reference));
}

TEST_CASE("rng's logarithm is within 2^-50 of libm's in long double", "[rng]") {
  using rng::detail::log_dyadic;
  STATIC_REQUIRE(log_dyadic(1, 0) == 0.0);
  STATIC_REQUIRE(log_dyadic(std::uint64_t{1} << 32, 32) == 0.0);
  STATIC_REQUIRE(log_dyadic(2, 0) == std::numbers::ln2);
  STATIC_REQUIRE(log_dyadic(1, 32) == -32 * std::numbers::ln2);
  // long double is wider than double here (x86-64, aarch64); where it is not, the reference's
  // own error (about 2^-53) still fits the bound.
  constexpr double kBound = 0x1.0p-50;
  double worst = 0;
  std::int64_t wrong = 0, checked = 0;
  auto check = [&](std::uint64_t m, int shift) {
    const long double ref = std::log(std::ldexp(static_cast<long double>(m), -shift));
    const double err = relative_error(log_dyadic(m, shift), ref);
    worst = std::max(worst, err);
    wrong += err > kBound;
    ++checked;
  };
  const RngStream s{.seed = 7, .id = stream_id(RngPurpose::test, 4, 0)};
  for (int e = 0; e <= 52; ++e) {  // every exponent, random mantissas, u = m·2^-32 and m·2^-e
    for (std::int64_t j = 0; j < 2000; ++j) {
      const std::uint64_t hi = std::uint64_t{rng::bits(s, 2 * j)} << 32 | rng::bits(s, 2 * j + 1);
      const std::uint64_t m = (std::uint64_t{1} << e) | (hi & ((std::uint64_t{1} << e) - 1));
      check(m, 32);
      if (m != std::uint64_t{1} << e) check(m, e);  // u in (1, 2): ln u = ln f exactly
    }
  }
  // u1 = (w + 1)·2^-32 next to 1, where ln u1 ≈ u1 - 1 is tiny, and next to √½ and √2·2^-1.
  for (std::uint64_t j = 0; j < 5000; ++j) {
    check((std::uint64_t{1} << 32) - j, 32);
    check(3037000499ull - 2500 + j, 32);  // ⌊√½ · 2^32⌋ = 3037000499
  }
  INFO("worst relative error " << worst << " (bound 2^-50 = " << kBound << ") over " << checked);
  CHECK(wrong == 0);
  CHECK(checked > 200000);
}

TEST_CASE("rng's cos(2πu) is within 2^-50 of libm's in long double, next to its zeros too",
          "[rng]") {
  using rng::detail::cos_turns;
  STATIC_REQUIRE(cos_turns(0.0) == 1.0);
  STATIC_REQUIRE(cos_turns(0.25) == 0.0);
  STATIC_REQUIRE(cos_turns(0.5) == -1.0);
  STATIC_REQUIRE(cos_turns(0.75) == 0.0);
  // The reference measures u from the nearest zero or extremum of the cosine (an exact subtraction
  // in long double) and calls sinl or cosl there, so that it stays accurate next to the zeros.
  auto reference = [](double u) {
    const long double two_pi = 2 * std::numbers::pi_v<long double>;
    const long double w = u;
    if (w < 0.125L) return std::cos(two_pi * w);
    if (w < 0.375L) return std::sin(two_pi * (0.25L - w));
    if (w < 0.625L) return -std::cos(two_pi * (w - 0.5L));
    if (w < 0.875L) return std::sin(two_pi * (w - 0.75L));
    return std::cos(two_pi * (w - 1));
  };
  constexpr double kBound = 0x1.0p-50;
  double worst = 0;
  std::int64_t wrong = 0, checked = 0;
  auto check = [&](std::uint32_t word) {
    const double u = static_cast<double>(word) * 0x1.0p-32;  // rng::normal's u2
    const double err = relative_error(cos_turns(u), reference(u));
    worst = std::max(worst, err);
    wrong += err > kBound;
    ++checked;
  };
  const RngStream s{.seed = 8, .id = stream_id(RngPurpose::test, 5, 0)};
  for (std::int64_t j = 0; j < 200000; ++j) check(rng::bits(s, j));
  for (std::uint32_t j = 0; j < 3000; ++j) {  // next to every multiple of 1/8 turn
    for (std::uint64_t eighth = 0; eighth <= 8; ++eighth) {
      const std::uint64_t center = eighth << 29;
      if (center + j < (std::uint64_t{1} << 32)) check(static_cast<std::uint32_t>(center + j));
      if (center >= j + 1 && center - j - 1 < (std::uint64_t{1} << 32))
        check(static_cast<std::uint32_t>(center - j - 1));
    }
  }
  INFO("worst relative error " << worst << " (bound 2^-50 = " << kBound << ") over " << checked);
  CHECK(wrong == 0);
}

// The normals against Box–Muller evaluated the textbook way, std::log and std::cos in double,
// rounded to float. That reference is itself off by a few double ulps and, next to the zeros of
// the cosine, by the rounding of 2π·u2 (at most 2^-53·2π·6.67 < 2^-48 absolute), so the bound is
// two float ulps of the reference plus 2^-45. The two floats are equal unless the exact value lies
// within about 2^-48 of a float rounding boundary, which happens for a few indices in 2^24; more
// than 16 unequal of 2^20 means a real difference.
TEST_CASE("rng::normal matches a double-precision Box-Muller reference within two float ulps",
          "[rng]") {
  const RngStream s{.seed = 99, .id = stream_id(RngPurpose::parameter_init, 17, 0)};
  constexpr std::int64_t n = 1 << 20;
  std::int64_t outside = 0, unequal = 0;
  double worst_ulps = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    const PhiloxCounter b = rng::block(s, static_cast<std::uint64_t>(i) / 2);
    const std::size_t w = 2 * static_cast<std::size_t>(i % 2);
    const double u1 = (static_cast<double>(b[w]) + 1.0) * 0x1.0p-32;
    const double u2 = static_cast<double>(b[w + 1]) * 0x1.0p-32;
    const auto ref =
        static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
    const float got = rng::normal(s, i);
    const double ulp =
        std::nextafter(std::fabs(ref), std::numeric_limits<float>::infinity()) - std::fabs(ref);
    const double diff = std::fabs(static_cast<double>(got) - ref);
    worst_ulps = std::max(worst_ulps, diff / ulp);
    outside += diff > 2 * ulp + 0x1.0p-45;
    unequal += got != ref;
  }
  INFO("worst difference " << worst_ulps << " float ulps; " << unequal << " of " << n
                           << " unequal");
  CHECK(outside == 0);
  CHECK(unequal <= 16);
  // init_normal scales by the standard deviation in float.
  CHECK(rng::init_normal(s, 12345, 0.02f) == 0.02f * rng::normal(s, 12345));
}

// Tolerances: with n samples, a sample mean has standard error sigma/sqrt(n), a sample variance
// sqrt((mu4 - sigma^4)/n), skewness sqrt(6/n), excess kurtosis sqrt(24/n). The seeds are fixed, so
// the checks are deterministic; 5 standard errors keeps a correct generator passing for any seed
// with probability > 1 - 6e-7 per check, and a wrong transform (e.g. a bad scale) fails by far
// more.
TEST_CASE("Uniform, normal and keep-mask moments", "[rng]") {
  constexpr std::int64_t n = 1 << 20;
  const double root_n = std::sqrt(static_cast<double>(n));
  const RngStream s{.seed = 2024, .id = stream_id(RngPurpose::test, 2, 0)};

  SECTION("uniform in [0, 1): mean 1/2, variance 1/12, flat over 64 bins") {
    std::vector<std::int64_t> bins(64, 0);
    float lo = 1, hi = 0;
    const Moments m =
        moments(n, [&](std::int64_t i) { return static_cast<double>(rng::uniform(s, i)); });
    for (std::int64_t i = 0; i < n; ++i) {
      const float u = rng::uniform(s, i);
      lo = std::min(lo, u);
      hi = std::max(hi, u);
      ++bins[static_cast<std::size_t>(u * 64)];
    }
    CHECK(lo >= 0.0f);
    CHECK(hi < 1.0f);
    CHECK(std::fabs(m.mean - 0.5) <= 5 * std::sqrt(1.0 / 12) / root_n);
    CHECK(std::fabs(m.variance - 1.0 / 12) <= 5 * std::sqrt(1.0 / 80 - 1.0 / 144) / root_n);
    // Chi-square with 63 degrees of freedom: mean 63, sd sqrt(126) = 11.2; 5 sd above is 119.
    const double expected = static_cast<double>(n) / 64;
    double chi2 = 0;
    for (std::int64_t b : bins)
      chi2 += (static_cast<double>(b) - expected) * (static_cast<double>(b) - expected) / expected;
    CHECK(chi2 <= 63 + 5 * std::sqrt(126.0));
  }
  SECTION("normal: mean 0, variance 1, skewness 0, excess kurtosis 0") {
    const Moments m =
        moments(n, [&](std::int64_t i) { return static_cast<double>(rng::normal(s, i)); });
    CHECK(std::fabs(m.mean) <= 5 / root_n);
    CHECK(std::fabs(m.variance - 1) <= 5 * std::sqrt(2.0) / root_n);
    CHECK(std::fabs(m.skewness) <= 5 * std::sqrt(6.0) / root_n);
    CHECK(std::fabs(m.excess_kurtosis) <= 5 * std::sqrt(24.0) / root_n);
    // Pairs from one Box-Muller block are uncorrelated: E[z_2i z_2i+1] = 0 with sd 1/sqrt(n/2).
    double cross = 0;
    for (std::int64_t i = 0; i < n; i += 2)
      cross += static_cast<double>(rng::normal(s, i)) * rng::normal(s, i + 1);
    CHECK(std::fabs(cross / (n / 2)) <= 5 / std::sqrt(n / 2.0));
  }
  SECTION("init_normal has the GPT-2 standard deviation 0.02") {
    const Moments m =
        moments(n, [&](std::int64_t i) { return static_cast<double>(rng::init_normal(s, i)); });
    CHECK(std::fabs(std::sqrt(m.variance) - 0.02) <= 0.02 * 5 / std::sqrt(2.0 * n));
  }
  SECTION("keep masks keep a fraction 1 - p") {
    for (float p : {0.1f, 0.5f, 0.9f}) {
      std::int64_t kept = 0;
      for (std::int64_t i = 0; i < n; ++i) kept += rng::keep(s, i, p);
      const double frac = static_cast<double>(kept) / n;
      CHECK(std::fabs(frac - (1 - p)) <= 5 * std::sqrt(p * (1 - p)) / root_n);
    }
    for (std::int64_t i = 0; i < 1000; ++i) CHECK(rng::keep(s, i, 0.0f));
  }
}
