// cpu/vector_math.hpp — reductions and exp in forms the compiler vectorizes (internal).
//
// Design note: carto::cpu builds without -march flags (CI machines differ), so the compiler targets
// the baseline vector ISA (SSE2 on x86-64) and, without -ffast-math, vectorizes only what keeps
// every rounding of the source. Two things in the kernels would stay scalar:
//  - a float reduction (s += x[j]) is one dependent chain the compiler may not reorder. sum_lanes
//    and max_lanes keep kLanes independent partial results in a fixed order (lane l takes the
//    terms j ≡ l mod kLanes, then the lanes are added pairwise), which the compiler maps onto
//    vector registers. The order is part of the source, so the result does not depend on the
//    vector width the compiler picks: the same bits on every machine, and an error bound no worse
//    than the plain sum's (Higham §4.2: pairwise and blocked sums only shorten the chains).
//  - std::exp is a libm call per element. exp_approx is Cephes' expf (Moshier, range reduction to
//    |r| <= ln2/2 with ln 2 split in two, then a degree-7 polynomial), written branch-free so the
//    compiler inlines and vectorizes it. Its error is below 2 ulp over the range it serves (the
//    same as glibc's bound, which the kernel tests assume; they measure 0.96 ulp at worst over
//    8.7 million arguments), see the function.
// The kernels mark their element loops `#pragma omp simd` (honoured under -fopenmp-simd, which the
// target sets; no OpenMP runtime): that states the iterations are independent, which also covers
// the in-place calls (y == x) that a compiler's run-time overlap check would send down the scalar
// path.
//
// CARTO_VECTOR_CLONES on a kernel's loop function compiles it three times, for the baseline ISA,
// AVX2 and AVX-512, and the dynamic loader picks one for the CPU it runs on (GCC and Clang's
// target_clones, an ifunc; glibc on x86-64 only, elsewhere the one baseline build): wider vectors
// where the machine has them, without a -march flag. The clones run the same operations in the
// same order (-ffp-contract=off keeps the AVX-512 clone from fusing multiply-adds), so every
// machine computes the same bits in these loops (GEMMs are OpenBLAS's, which picks its own
// kernels).
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>

// A build may define CARTO_VECTOR_CLONES itself (empty: the baseline code alone).
#ifndef CARTO_VECTOR_CLONES
#if defined(__x86_64__) && defined(__GLIBC__) && defined(__has_attribute)
#if __has_attribute(target_clones)
#define CARTO_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#endif
#ifndef CARTO_VECTOR_CLONES
#define CARTO_VECTOR_CLONES
#endif
// On the helpers a clone calls (these below, a kernel's row loops): inlined into each clone, so
// that they are compiled for its ISA rather than called in their baseline build.
#if defined(__GNUC__)
#define CARTO_VECTOR_INLINE [[gnu::always_inline]] inline
#else
#define CARTO_VECTOR_INLINE inline
#endif

namespace carto::cpu::detail {

// 16 floats: four SSE registers, two AVX, one AVX-512 — enough independent adds to hide latency.
inline constexpr std::int64_t kLanes = 16;

// Σ_{j<n} term(j), in lanes (see the design note). T is float, or double for sums kept exact.
template <class T, class Term>
CARTO_VECTOR_INLINE T sum_lanes(std::int64_t n, Term&& term) {
  T lane[kLanes] = {};
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) lane[l] += term(j + l);
  }
  for (std::int64_t l = 0; j + l < n; ++l) lane[l] += term(j + l);
  for (std::int64_t width = kLanes / 2; width >= 1; width /= 2) {
    for (std::int64_t l = 0; l < width; ++l) lane[l] += lane[l + width];
  }
  return lane[0];
}

// max_{j<n} term(j), -inf for n = 0.
template <class Term>
CARTO_VECTOR_INLINE float max_lanes(std::int64_t n, Term&& term) {
  float lane[kLanes];
  std::fill(lane, lane + kLanes, -std::numeric_limits<float>::infinity());
  std::int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes) {
    for (std::int64_t l = 0; l < kLanes; ++l) lane[l] = std::max(lane[l], term(j + l));
  }
  for (std::int64_t l = 0; j + l < n; ++l) lane[l] = std::max(lane[l], term(j + l));
  for (std::int64_t width = kLanes / 2; width >= 1; width /= 2) {
    for (std::int64_t l = 0; l < width; ++l) lane[l] = std::max(lane[l], lane[l + width]);
  }
  return lane[0];
}

// e^x in fp32, branch-free. Relative error below 2 ulp (Cephes expf: peak 1.7e-7 over
// [-87.3, 88.4]) where the result is a normal float; x < -87.336 (where e^x < FLT_MIN) gives 0
// instead of a subnormal, x > 88.376 gives +inf (e^x > 2^127.5, within 35% of FLT_MAX), NaN gives
// NaN. The kernels call it on arguments <= 0 (softmax, attention, cross-entropy) and <= 80 (GELU).
CARTO_VECTOR_INLINE float exp_approx(float x) {
  constexpr float kLow = -87.33654475f;  // ln(FLT_MIN): 2^n stays a normal float
  constexpr float kHigh = 88.37626266f;  // ln(2^127.5): n <= 127
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kShifter = 0x1.8p23f;     // adding it rounds to an integer, kept in the low bits
  constexpr float kLn2High = 0.693359375f;  // 355/512: n·kLn2High is exact
  constexpr float kLn2Low = -2.12194440e-4f;  // ln 2 - kLn2High
  const float c = std::min(std::max(x, kLow), kHigh);
  const float shifted = c * kLog2e + kShifter;
  const float n = shifted - kShifter;  // round(c·log2 e)
  const float r = (c - n * kLn2High) - n * kLn2Low;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;  // e^r
  const std::int32_t exponent =
      std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kShifter);  // n
  const float y = p * std::bit_cast<float>((exponent + 127) << 23);                  // p · 2^n
  return x < kLow ? 0.0f : (x > kHigh ? std::numeric_limits<float>::infinity() : y);
}

// d (=, +=) v: how a backward kernel stores into an output in CopyMode assign (Accumulate false)
// or accumulate. Assigning v equals adding it to a zero, bit for bit.
template <bool Accumulate>
CARTO_VECTOR_INLINE void store(float& d, float v) {
  if constexpr (Accumulate) {
    d += v;
  } else {
    d = v;
  }
}

}  // namespace carto::cpu::detail
