// carto/layers/transformer.hpp — the MLP and the pre-LN transformer block (GPT-2).
//
// Design note: Mlp is (B, S, H) -> Linear (B, S, r·H) -> GELU -> Linear (B, S, H) -> dropout, r the
// ffn ratio (4 in GPT). TransformerBlock is x + Attn(LN(x)), then y + Mlp(LN(y)) (Radford et al.
// 2019: layernorm at the input of each sub-block). Under Korthikanti et al. 2022's assumptions a
// block keeps s·b·h·(34 + 5as/h) bytes for backward: attention 11sbh + 5as²b, MLP 19sbh, the two
// layernorm inputs 4sbh.
#pragma once

#include <cstdint>

#include "carto/graph/graph.hpp"
#include "carto/layers/attention.hpp"
#include "carto/layers/basic.hpp"
#include "carto/profile/options.hpp"
#include "carto/util/checked.hpp"

namespace carto {

struct MlpSpec {
  std::int64_t ffn_ratio = 4;
  double dropout = 0.1;
};

constexpr TensorId mlp(Graph& g, TensorId x, const MlpSpec& spec) {
  const TensorShape xs = g.tensor(x).shape;  // (B, S, H)
  const DimExtent hidden = xs.dims()[xs.rank() - 1];
  if (spec.ffn_ratio < 1)
    detail::fail("carto: an MLP's ffn ratio must be positive; got ", spec.ffn_ratio);
  const std::int64_t ffn_width =
      checked_mul(spec.ffn_ratio, hidden.extent, "the MLP width ffn_ratio * hidden");
  const TensorId up = linear(g, x, {.out_name = "ffn", .out_features = ffn_width});  // (B, S, 4H)
  const TensorId act = gelu(g, up);                                                  // (B, S, 4H)
  const TensorId down =
      linear(g, act, {.out_name = hidden.name, .out_features = hidden.extent});  // (B, S, H)
  return dropout(g, down, spec.dropout);                                         // (B, S, H)
}

struct BlockSpec {
  std::int64_t heads = 1;
  std::int64_t ffn_ratio = 4;
  AttentionKind attention = AttentionKind::materialized;
  double dropout = 0.1;
};

constexpr TensorId transformer_block(Graph& g, TensorId x, const BlockSpec& spec) {
  const TensorId attn = multi_head_attention(
      g, layer_norm(g, x), {.heads = spec.heads, .kind = spec.attention, .dropout = spec.dropout});
  const TensorId y = g.add(x, attn);  // (B, S, H)
  const TensorId m =
      mlp(g, layer_norm(g, y), {.ffn_ratio = spec.ffn_ratio, .dropout = spec.dropout});
  return g.add(y, m);  // (B, S, H)
}

template <class T, std::int64_t Ratio = 4>
struct Mlp {
  static_assert(is_tensor<T>::value, "carto: Mlp takes a carto::Tensor type");
  using input_type = T;
  using output_type = T;
  double dropout = 0.1;
  constexpr TensorId build(Graph& g, TensorId x) const {
    return mlp(g, x, {.ffn_ratio = Ratio, .dropout = dropout});
  }
};

template <class T, std::int64_t Heads, std::int64_t Ratio = 4>
struct TransformerBlock {
  static_assert(
      detail::heads_fit<T, Heads>(),
      "carto: TransformerBlock<T, Heads> takes T = Tensor<..., Shape<B, S, H>> with Heads "
      "dividing H");
  using input_type = T;
  using output_type = T;
  AttentionKind attention = AttentionKind::materialized;
  double dropout = 0.1;
  constexpr TensorId build(Graph& g, TensorId x) const {
    return transformer_block(
        g, x, {.heads = Heads, .ffn_ratio = Ratio, .attention = attention, .dropout = dropout});
  }
};

}  // namespace carto
