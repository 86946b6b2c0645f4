// carto/runtime/bf16.hpp — bfloat16 storage: conversion to and from fp32.
//
// Design note: bf16 is the upper half of an IEEE-754 binary32 (1 sign, 8 exponent, 7 fraction
// bits), so widening is exact (append 16 zero bits) and narrowing rounds the dropped 16 bits to
// nearest, ties to even, as CUDA's __float2bfloat16_rn and PyTorch do. Its unit roundoff is 2^-8
// (8 significand bits counting the hidden one). NaN stays NaN (a quiet NaN, sign kept); an fp32
// value past the largest finite bf16 (0x7F7F, about 3.39e38) after rounding becomes infinity, as
// round-to-nearest prescribes. Host code only, constexpr, no CUDA header: the CPU backend, the
// communicators and the tests share these two functions, and the CUDA kernels match them bit for
// bit (their tests compare).
#pragma once

#include <bit>
#include <cstdint>

namespace carto {

// bf16 unit roundoff (relative error of one rounding to nearest): 2^-8.
inline constexpr double kBf16Unit = 0x1.0p-8;

struct Bf16 {
  std::uint16_t bits = 0;
};
static_assert(sizeof(Bf16) == 2);

// fp32 -> bf16, round to nearest even.
constexpr Bf16 to_bf16(float value) {
  const auto u = std::bit_cast<std::uint32_t>(value);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
    return {static_cast<std::uint16_t>((u >> 16) | 0x0040u)};  // NaN: keep it a (quiet) NaN
  }
  const std::uint32_t lsb = (u >> 16) & 1u;
  return {static_cast<std::uint16_t>((u + 0x7FFFu + lsb) >> 16)};
}

// bf16 -> fp32, exact.
constexpr float to_float(Bf16 value) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(value.bits) << 16);
}

// The fp32 value rounded through bf16 (what a store to bf16 and a load back give).
constexpr float round_to_bf16(float value) { return to_float(to_bf16(value)); }

}  // namespace carto
