// carto/profile/options.hpp — what a profile assumes: precision, attention kind, recomputation,
// dropout, layernorm statistics.
//
// Design note: the options are enum class tags and named fields (designated initializers), so a
// call reads ProfileOptions{.batch = 8, .recompute = Recompute::full}. Bytes per parameter follow
// ZeRO (Rajbhandari et al. 2019, arXiv 1910.02054, §3.1): mixed precision keeps bf16 parameters and
// gradients and fp32 master weights plus AdamW m and v, 2 + 2 + 12 = 16 bytes; fp32 keeps fp32
// parameters and gradients and AdamW m and v, 4 + 4 + 8 = 16 bytes.
#pragma once

#include <cstdint>
#include <string_view>

#include "carto/spec/dtype.hpp"

namespace carto {

enum class AttentionKind : std::uint8_t { materialized, fused };
enum class Recompute : std::uint8_t { none, full };
enum class Precision : std::uint8_t { fp32, mixed_bf16 };
enum class LayerNormStats : std::uint8_t { counted, ignored };
// Dropout masks: kept for backward (1 byte per element, as Korthikanti et al. 2022 count them), or
// regenerated in backward from the counter-based RNG (carto's runtime, runtime/rng.hpp), which
// keeps nothing.
enum class DropoutMasks : std::uint8_t { stored, regenerated };

struct ProfileOptions {
  std::int64_t batch = 1;
  Precision precision = Precision::mixed_bf16;
  AttentionKind attention = AttentionKind::materialized;
  Recompute recompute = Recompute::none;  // full: checkpoint every transformer block
  double dropout = 0.1;                   // 0 removes the dropout ops and their masks
  LayerNormStats layernorm_stats =
      LayerNormStats::counted;  // ignored: Korthikanti et al.'s assumption
};

// The dtype of activations and parameters (what the matmuls read).
constexpr DType compute_dtype(Precision p) {
  return p == Precision::fp32 ? DType::fp32 : DType::bf16;
}
// Optimizer-state bytes per parameter: fp32 master copy (mixed only) + AdamW m and v.
constexpr std::int64_t optimizer_bytes_per_param(Precision p) {
  return p == Precision::fp32 ? 8 : 12;
}
// Parameters + gradients + optimizer states per parameter (ZeRO §3.1: 16 in both policies).
constexpr std::int64_t model_state_bytes_per_param(Precision p) {
  return 2 * size_bytes(compute_dtype(p)) + optimizer_bytes_per_param(p);
}
constexpr std::int64_t model_state_bytes(std::int64_t params, Precision p) {
  return params * model_state_bytes_per_param(p);
}

constexpr std::string_view to_string_view(AttentionKind k) {
  return k == AttentionKind::fused ? "fused" : "materialized";
}
constexpr std::string_view to_string_view(Recompute r) {
  return r == Recompute::full ? "full" : "none";
}
constexpr std::string_view to_string_view(Precision p) {
  return p == Precision::fp32 ? "fp32" : "mixed_bf16";
}
constexpr std::string_view to_string_view(DropoutMasks m) {
  return m == DropoutMasks::regenerated ? "regenerated" : "stored";
}
constexpr std::string_view to_string_view(LayerNormStats s) {
  return s == LayerNormStats::ignored ? "ignored" : "counted";
}

}  // namespace carto
