// carto/spec/dtype.hpp — element types and their sizes.
//
// Design note: a dtype is an enum class value; its size and name are constexpr functions, so the
// profiler can compute bytes at compile time. fp8 formats follow the OCP 8-bit floating point
// specification (E4M3 and E5M2), one byte each.
#pragma once

#include <cstdint>
#include <optional>
#include <ostream>
#include <string_view>

namespace carto {

enum class DType : std::uint8_t { fp32, bf16, fp16, fp8_e4m3, fp8_e5m2 };

inline constexpr DType kAllDTypes[] = {DType::fp32, DType::bf16, DType::fp16, DType::fp8_e4m3,
                                       DType::fp8_e5m2};

constexpr std::int64_t size_bytes(DType type) {
  switch (type) {
    case DType::fp32: return 4;
    case DType::bf16: return 2;
    case DType::fp16: return 2;
    case DType::fp8_e4m3: return 1;
    case DType::fp8_e5m2: return 1;
  }
  return 0;
}

constexpr std::string_view to_string_view(DType type) {
  switch (type) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp8_e4m3: return "fp8_e4m3";
    case DType::fp8_e5m2: return "fp8_e5m2";
  }
  return "?";
}

// Parses the names printed by to_string_view; nullopt for anything else.
constexpr std::optional<DType> parse_dtype(std::string_view text) {
  for (DType type : kAllDTypes) {
    if (to_string_view(type) == text) return type;
  }
  return std::nullopt;
}

inline std::ostream& operator<<(std::ostream& out, DType type) {
  return out << to_string_view(type);
}

}  // namespace carto
