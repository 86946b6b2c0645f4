// carto/layers/attention.hpp — causal multi-head self-attention, materialized or fused.
//
// Design note: x (B, S, H) -> (B, S, H) with a fused QKV projection W_qkv (H, 3H) + bias, heads
// a dividing H, d = H / a, scores scaled by 1/sqrt(d) and causally masked, attention dropout, an
// output projection (H, H) + bias and the residual-branch dropout. Two kinds:
//  - materialized (Megatron-LM as counted by Korthikanti et al. 2022 §4.1): QKᵀ, scale, softmax,
//    dropout and P·V are separate ops; backward keeps Q and K, the softmax output, its dropout mask
//    and output, and V (with the QKV input and the projection input: 11sbh + 5as²b bytes at 16
//    bits);
//  - fused (flash-style, Dao et al. 2022): one op keeps only Q, K, V, its output and the fp32
//    logsumexp per row; its dropout mask is regenerated from the RNG state in backward.
// Q, K and V are views of the one QKV output (B, S, 3H); the merge of heads is a view too.
#pragma once

#include <cstdint>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/layers/basic.hpp"
#include "carto/profile/options.hpp"
#include "carto/util/checked.hpp"

namespace carto {

namespace detail {
// 1/sqrt(x) by Newton's method on sqrt (constexpr; exact to double rounding for the head sizes
// used).
constexpr double inverse_sqrt(double x) {
  double r = x > 1 ? x : 1;
  for (int i = 0; i < 64; ++i) r = 0.5 * (r + x / r);
  return 1.0 / r;
}

// Whether T is a (B, S, H) carto::Tensor whose H splits into Heads heads.
template <class T, std::int64_t Heads>
consteval bool heads_fit() {
  if constexpr (is_tensor<T>::value) {
    if constexpr (T::rank == 3) return Heads >= 1 && T::shape_type::static_extents[2] % Heads == 0;
  }
  return false;
}
}  // namespace detail

struct AttentionSpec {
  std::int64_t heads = 1;
  AttentionKind kind = AttentionKind::materialized;
  double dropout = 0.1;  // attention-probability and output dropout; 0 removes both
};

constexpr TensorId multi_head_attention(Graph& g, TensorId x, const AttentionSpec& spec) {
  const TensorShape xs = g.tensor(x).shape;  // (B, S, H)
  if (xs.rank() != 3) detail::fail("carto: attention takes (B, S, H); got ", xs);
  const std::int64_t h = xs.dims()[2].extent;
  if (spec.heads < 1 || h % spec.heads != 0) {
    detail::fail("carto: attention with ", spec.heads, " heads over hidden ", h,
                 ": the number of heads must divide the hidden size");
  }
  const double factor = detail::inverse_sqrt(static_cast<double>(h / spec.heads));
  // 3H is checked: a hidden size above (2^63-1) / 3 would wrap to a negative width.
  const std::int64_t qkv_width = checked_mul(3, h, "the fused QKV width 3 * hidden of attention");
  const TensorId qkv = linear(g, x, {.out_name = "qkv", .out_features = qkv_width});  // (B, S, 3H)
  const TensorId q = g.split_heads(qkv, 3, 0, spec.heads);  // (B, a, S, d)
  const TensorId k = g.split_heads(qkv, 3, 1, spec.heads);  // (B, a, S, d)
  const TensorId v = g.split_heads(qkv, 3, 2, spec.heads);  // (B, a, S, d)
  TensorId context;                                         // (B, a, S, d)
  if (spec.kind == AttentionKind::fused) {
    context = g.fused_attention(q, k, v, factor, Masking::causal, spec.dropout);
  } else {
    const TensorId scores = g.einsum("bnqd,bnkd->bnqk", q, k);     // (B, a, S, S)
    const TensorId scaled = g.scale(scores, factor);               // (B, a, S, S)
    const TensorId probs = g.softmax(scaled, 3, Masking::causal);  // (B, a, S, S)
    const TensorId dropped = dropout(g, probs, spec.dropout);      // (B, a, S, S)
    context = g.einsum("bnqk,bnkd->bnqd", dropped, v);             // (B, a, S, d)
  }
  const TensorId merged = g.merge_heads(context, xs.dims()[2].name);  // (B, S, H)
  const TensorId out = linear(g, merged, {.out_name = xs.dims()[2].name, .out_features = h});
  return dropout(g, out, spec.dropout);  // (B, S, H)
}

// Typed: MultiHeadAttention<Tensor<bf16, Shape<B, S, H>>, 12>{.kind = AttentionKind::fused}.
template <class T, std::int64_t Heads>
struct MultiHeadAttention {
  static_assert(
      detail::heads_fit<T, Heads>(),
      "carto: MultiHeadAttention<T, Heads> takes T = Tensor<..., Shape<B, S, H>> with Heads "
      "dividing H");
  using input_type = T;
  using output_type = T;
  AttentionKind kind = AttentionKind::materialized;
  double dropout = 0.1;
  constexpr TensorId build(Graph& g, TensorId x) const {
    return multi_head_attention(g, x, {.heads = Heads, .kind = kind, .dropout = dropout});
  }
};

}  // namespace carto
