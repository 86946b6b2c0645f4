// carto/runtime/rng.hpp — the counter-based random numbers of parameters and dropout masks.
//
// Design note (DESIGN.md §7): every random value is a pure function of (seed, stream id, global
// element index), computed by Philox4x32-10 (Salmon, Moraes, Dror, Shaw 2011, "Parallel random
// numbers: as easy as 1, 2, 3", SC'11). A device that holds any shard of a tensor computes exactly
// the values a single device computes for the same global indices, with no state to carry and no
// communication; a recomputed block (activation checkpointing) regenerates the same dropout masks.
//
// Mapping (fixed; changing it changes every run's numbers):
//  - key     = (seed low 32 bits, seed high 32 bits);
//  - counter = (block low, block high, stream low, stream high), block = index / 4 for 32-bit
//    words (word index % 4 of the output) and index / 2 for normals (words 2·(index % 2) and
//    2·(index % 2) + 1 feed one Box–Muller transform);
//  - uniform: the top 24 bits of the word times 2^-24, a float in [0, 1) with every value exact;
//  - normal: Box–Muller, sqrt(-2 ln u1) · cos(2π u2) in double with u1 in (0, 1], u2 in [0, 1),
//    rounded once to float (|z| ≤ 6.67);
//  - keep (dropout): uniform >= probability, so P(keep) = 1 - ceil(p·2^24)/2^24.
// A stream id serves one purpose (one parameter's init, one dropout op at one micro-batch):
// stream_id() packs (purpose, object, step) so that different purposes never share a stream.
//
// Host and device (CUDA) compute the same bits. Everything here is CARTO_HOST_DEVICE: integer
// arithmetic, IEEE-754 double +, -, ·, / and sqrt (correctly rounded on the CPU and on the GPU),
// and one double -> float rounding to nearest. The logarithm and the cosine of Box–Muller are
// carto's own (rng::detail::log_dyadic, rng::detail::cos_turns below: exact range reduction, then
// a short series), not std::log/std::cos, whose last bits differ between libm and CUDA's
// libdevice. The two agree only if no compiler fuses a·b + c into one rounding: the CPU backend
// compiles with -ffp-contract=off (also GCC's default in ISO C++ mode) and the CUDA file that calls
// rng::normal with nvcc --fmad=false. All but rng::normal (which calls sqrt) is constexpr.
#pragma once

#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>

#include "carto/error.hpp"
#include "carto/spec/layout.hpp"

// Marks a function that host code and CUDA device code both call (empty for a host compiler).
#ifndef CARTO_HOST_DEVICE
#if defined(__CUDACC__)
#define CARTO_HOST_DEVICE __host__ __device__
#else
#define CARTO_HOST_DEVICE
#endif
#endif

namespace carto {

using PhiloxCounter = std::array<std::uint32_t, 4>;
using PhiloxKey = std::array<std::uint32_t, 2>;

// Philox4x32 with `Rounds` rounds (10 is the published default, Random123's philox4x32_R).
template <int Rounds = 10>
CARTO_HOST_DEVICE constexpr PhiloxCounter philox4x32(PhiloxCounter counter, PhiloxKey key) {
  constexpr std::uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;
  constexpr std::uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  for (int round = 0; round < Rounds; ++round) {
    if (round > 0) {  // the key schedule bumps before rounds 2..R
      key[0] += kWeyl0;
      key[1] += kWeyl1;
    }
    const std::uint64_t p0 = std::uint64_t{kMul0} * counter[0];
    const std::uint64_t p1 = std::uint64_t{kMul1} * counter[2];
    const auto hi0 = static_cast<std::uint32_t>(p0 >> 32), lo0 = static_cast<std::uint32_t>(p0);
    const auto hi1 = static_cast<std::uint32_t>(p1 >> 32), lo1 = static_cast<std::uint32_t>(p1);
    counter = {hi1 ^ counter[1] ^ key[0], lo1, hi0 ^ counter[3] ^ key[1], lo0};
  }
  return counter;
}

// One random stream: a run's seed and a stream id.
struct RngStream {
  std::uint64_t seed = 0;
  std::uint64_t id = 0;
};

enum class RngPurpose : std::uint8_t { parameter_init = 1, dropout = 2, test = 3 };

// id = purpose (8 bits) | object (24 bits: a parameter or op number) | step (32 bits: the optimizer
// step times micro-batches plus the micro-batch, for dropout; 0 for init).
constexpr std::uint64_t stream_id(RngPurpose purpose, std::uint32_t object, std::uint32_t step) {
  if (object >= (1u << 24))
    detail::fail("carto: stream_id object ", object, " needs more than 24 bits");
  return (std::uint64_t{static_cast<std::uint8_t>(purpose)} << 56) | (std::uint64_t{object} << 32) |
         step;
}

namespace rng {

CARTO_HOST_DEVICE constexpr PhiloxCounter block(RngStream s, std::uint64_t block_index) {
  return philox4x32<10>(
      {static_cast<std::uint32_t>(block_index), static_cast<std::uint32_t>(block_index >> 32),
       static_cast<std::uint32_t>(s.id), static_cast<std::uint32_t>(s.id >> 32)},
      {static_cast<std::uint32_t>(s.seed), static_cast<std::uint32_t>(s.seed >> 32)});
}

CARTO_HOST_DEVICE constexpr float word_to_uniform(std::uint32_t word) {
  return static_cast<float>(word >> 8) * 0x1.0p-24f;  // [0, 1), exact
}

// 32 random bits for element `index`.
CARTO_HOST_DEVICE constexpr std::uint32_t bits(RngStream s, std::int64_t index) {
  const auto i = static_cast<std::uint64_t>(index);
  return block(s, i / 4)[i % 4];
}

// Uniform in [0, 1).
CARTO_HOST_DEVICE constexpr float uniform(RngStream s, std::int64_t index) {
  return word_to_uniform(bits(s, index));
}

// Dropout's mask from the element's random word (a kernel that computes a whole block at once
// calls this on each of its four words).
CARTO_HOST_DEVICE constexpr bool keep_of_word(std::uint32_t word, float probability) {
  return word_to_uniform(word) >= probability;
}

// Dropout: whether element `index` is kept when each element is dropped with `probability`.
CARTO_HOST_DEVICE constexpr bool keep(RngStream s, std::int64_t index, float probability) {
  return keep_of_word(bits(s, index), probability);
}

namespace detail {

// ln(m · 2^-shift) for an integer m in [1, 2^53), in double, with a relative error below 2^-50
// (measured by test_rng against long double over every exponent).
// Range reduction, exact: m = 2^e · f with f in [√½, √2) (a power-of-two scaling). Then
// ln f = 2 atanh(s), s = (f - 1)/(f + 1), |s| <= 3 - 2√2 < 0.1716, by the series
// 2 s Σ_k s^2k / (2k + 1) for k <= 11: the first term left out is below 0.1716^24 / 25 < 2^-64 of
// the sum. f - 1 is exact (Sterbenz), so ln f keeps its relative accuracy as f -> 1 (u1 -> 1).
// ln u = (e - shift) ln 2 + ln f has no harmful cancellation: when e = shift, ln u = ln f, and
// otherwise |(e - shift) ln 2| >= 2 |ln f|.
CARTO_HOST_DEVICE constexpr double log_dyadic(std::uint64_t m, int shift) {
  constexpr double kLn2 = 0x1.62e42fefa39efp-1;    // ln 2 rounded to nearest
  constexpr double kSqrt2 = 0x1.6a09e667f3bcdp+0;  // √2 rounded to nearest
  int e = 0;                                       // floor(log2 m)
  for (int step = 32; step > 0; step /= 2) {
    if ((m >> (e + step)) != 0) e += step;
  }
  double f = static_cast<double>(m) / static_cast<double>(std::uint64_t{1} << e);  // [1, 2), exact
  if (f >= kSqrt2) {
    f *= 0.5;
    ++e;
  }
  const double s = (f - 1.0) / (f + 1.0);
  const double z = s * s;
  double series = 1.0 / 23.0;
  for (int k = 10; k >= 0; --k) series = series * z + 1.0 / static_cast<double>(2 * k + 1);
  return static_cast<double>(e - shift) * kLn2 + 2.0 * s * series;
}

// cos(2π u) for u in [0, 1) with at most 52 fraction bits (rng::normal's u2 has 32), in double,
// with a relative error below 2^-50 (an absolute one below 2^-60 next to the zeros u = 1/4, 3/4).
// Range reduction, exact because u counts turns: 4u = q + r with q an integer and |r| <= 1/2, so
// cos(2π u) = cos(q π/2 + x) with x = r π/2 in [-π/4, π/4], which is ±cos x or ±sin x by q mod 4.
// sin x and cos x by their Taylor series in nested form, x·(1 - x²/(2·3)·(1 - x²/(4·5)·(...))) to
// x^17 and 1 - x²/(1·2)·(1 - x²/(3·4)·(...)) to x^18: the first terms left out are below
// (π/4)^19/19! < 2^-63 and (π/4)^20/20! < 2^-68. Near the zeros of the cosine the result is
// ±sin x with x tiny and exact up to its one rounding, so the relative accuracy holds there too.
CARTO_HOST_DEVICE constexpr double cos_turns(double u) {
  constexpr double kHalfPi = 0x1.921fb54442d18p+0;  // π/2 rounded to nearest
  const double t = 4.0 * u;
  const auto q = static_cast<std::int64_t>(t + 0.5);  // nearest integer (t >= 0)
  const double x = (t - static_cast<double>(q)) * kHalfPi;
  const double z = x * x;
  double sin_x = 1.0, cos_x = 1.0;
  for (int k = 8; k >= 1; --k) sin_x = 1.0 - z * sin_x / static_cast<double>((2 * k) * (2 * k + 1));
  for (int k = 9; k >= 1; --k) cos_x = 1.0 - z * cos_x / static_cast<double>((2 * k - 1) * (2 * k));
  sin_x *= x;
  switch (q % 4) {
    case 0: return cos_x;
    case 1: return -sin_x;
    case 2: return -cos_x;
    default: return sin_x;
  }
}

CARTO_HOST_DEVICE inline double sqrt_rn(double x) {
#if defined(__CUDA_ARCH__)
  return ::sqrt(x);  // IEEE-754 correctly rounded, as on the host
#else
  return std::sqrt(x);
#endif
}

}  // namespace detail

// Standard normal by Box–Muller from two random words:
// sqrt(-2 ln u1) · cos(2π u2), u1 = (first + 1)·2^-32 in (0, 1], u2 = second·2^-32 in [0, 1).
// Its double value is within about 2^-49 (relative) of the exact one, so the float returned is the
// exact value rounded to nearest but for a fraction of about 2^-24 of the inputs (one ulp off).
CARTO_HOST_DEVICE inline float normal_of_words(std::uint32_t first, std::uint32_t second) {
  const double log_u1 = detail::log_dyadic(std::uint64_t{first} + 1, 32);  // [-32 ln 2, 0]
  const double u2 = static_cast<double>(second) * 0x1.0p-32;
  return static_cast<float>(detail::sqrt_rn(-2.0 * log_u1) * detail::cos_turns(u2));
}

// The normal of element `index`: words 2·(index % 2) and 2·(index % 2) + 1 of block index / 2.
CARTO_HOST_DEVICE inline float normal(RngStream s, std::int64_t index) {
  const auto i = static_cast<std::uint64_t>(index);
  const PhiloxCounter b = block(s, i / 2);
  const std::size_t w = 2 * (i % 2);
  return normal_of_words(b[w], b[w + 1]);
}

// GPT-2's parameter initialisation: normal with standard deviation 0.02.
inline constexpr float kGpt2InitStd = 0.02f;
CARTO_HOST_DEVICE inline float init_normal(RngStream s, std::int64_t index,
                                           float stddev = kGpt2InitStd) {
  return stddev * normal(s, index);
}

}  // namespace rng

// Where a local shard sits inside its global tensor: local element (i0, ..., ir) has the global
// row-major index Σ (offset[d] + i_d) · global_stride[d]. spec/layout.hpp's device_slice gives the
// offset. An empty placement means the local tensor is the whole tensor.
struct ShardPlacement {
  Index global_extents{};
  Index offset{};
};

// The global row-major strides of a placed local box and its offsets (zero for an empty placement,
// whose global extents are the local ones). Validates that the box lies inside the global tensor.
struct GlobalIndexer {
  Index stride{};
  Index offset{};
  GlobalIndexer(const ShardPlacement& where, const Index& local) {
    const Index& global = where.global_extents.empty() ? local : where.global_extents;
    CARTO_CHECK(global.size() == local.size() &&
                    (where.offset.empty() || where.offset.size() == local.size()),
                "a ShardPlacement of rank ", global.size(), " (offset rank ", where.offset.size(),
                ") for a local box of rank ", local.size());
    stride = global;
    offset = global;
    std::int64_t s = 1;
    for (std::size_t d = global.size(); d-- > 0;) {
      offset[d] = where.offset.empty() ? 0 : where.offset[d];
      CARTO_CHECK(offset[d] >= 0 && local[d] >= 0 && offset[d] + local[d] <= global[d], "dim ", d,
                  ": local box [", offset[d], ", ", offset[d] + local[d],
                  ") lies outside the global extent ", global[d]);
      stride[d] = s;
      s *= global[d];
    }
  }
  // The global index of the local element at `coord` (one coordinate per dim).
  [[nodiscard]] std::int64_t global_index(const Index& coord) const {
    std::int64_t g = 0;
    for (std::size_t d = 0; d < coord.size(); ++d) g += (offset[d] + coord[d]) * stride[d];
    return g;
  }
};

// Calls f(local_linear_index, global_linear_index) for every element of a local box of extents
// `local` (row-major, innermost fastest), in local order.
template <class F>
void for_each_global_index(const ShardPlacement& where, const Index& local, F&& f) {
  const GlobalIndexer indexer(where, local);
  const std::size_t rank = local.size();
  std::int64_t numel = 1;
  for (std::int64_t e : local) numel *= e;
  if (numel == 0) return;
  if (rank == 0) {
    f(0, 0);
    return;
  }
  const std::int64_t inner = local[rank - 1];
  Index coord = local;
  for (std::int64_t& c : coord) c = 0;
  for (std::int64_t row_start = 0; row_start < numel; row_start += inner) {
    const std::int64_t base = indexer.global_index(coord);
    for (std::int64_t j = 0; j < inner; ++j) f(row_start + j, base + j);
    for (std::size_t d = rank - 1; d-- > 0;) {  // odometer over the outer dims
      if (++coord[d] < local[d]) break;
      coord[d] = 0;
    }
  }
}

}  // namespace carto
