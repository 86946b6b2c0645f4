// Small residual-block graphs for the search's tests (the DP against brute force, the outer
// loops of search()).
#pragma once

#include <carto/graph.hpp>
#include <cstdint>

namespace carto::testing {

enum class BlockShape { mlp, small, prenorm };
enum class Prefix { gelu, einsum };

// prefix (its own group): a gelu over the input, or an einsum x = in·W0 whose output is Partial
// when its contraction is split (the blocks then receive a Partial residual); then `blocks`
// residual blocks:
//   mlp:   y = x + W2·gelu(W1·x)      small: y = x + W·x
//   prenorm: y = x + W2·dropout(gelu(bias(W1·layernorm(x)))), whose branch after the layernorm is
//   long enough for the DP's memoized segments (x rides along unread)
inline Graph make_graph(std::int64_t b, std::int64_t h, std::int64_t f, BlockShape shape,
                        int blocks, Prefix prefix = Prefix::gelu) {
  Graph g{};
  const TensorId in = g.input(TensorShape{{"b", b}, {"h", h}}, DType::bf16);
  g.begin_group("prefix", GroupKind::layer);
  TensorId x{};
  if (prefix == Prefix::einsum) {
    const TensorId w0 = g.parameter(TensorShape{{"h", h}, {"h", h}}, DType::bf16);  // (H, H)
    x = g.einsum("bi,ih->bh", in, w0);
  } else {
    x = g.gelu(in);
  }
  g.end_group();
  for (int i = 0; i < blocks; ++i) {
    g.begin_group(LayerName("block.").append(std::int64_t{i}), GroupKind::transformer_block);
    TensorId y{};
    if (shape == BlockShape::prenorm) {
      const TensorId gamma = g.parameter(TensorShape{{"h", h}}, DType::bf16);
      const TensorId beta = g.parameter(TensorShape{{"h", h}}, DType::bf16);
      const TensorId w1 = g.parameter(TensorShape{{"h", h}, {"f", f}}, DType::bf16);
      const TensorId b1 = g.parameter(TensorShape{{"f", f}}, DType::bf16);
      const TensorId w2 = g.parameter(TensorShape{{"f", f}, {"h", h}}, DType::bf16);
      const TensorId up = g.einsum("bh,hf->bf", g.layernorm(x, gamma, beta, 1), w1);  // (B, F)
      y = g.einsum("bf,fh->bh", g.dropout(g.gelu(g.bias(up, b1)), 0.1), w2);          // (B, H)
    } else if (shape == BlockShape::mlp) {
      const TensorId w1 = g.parameter(TensorShape{{"h", h}, {"f", f}}, DType::bf16);
      const TensorId w2 = g.parameter(TensorShape{{"f", f}, {"h", h}}, DType::bf16);
      y = g.einsum("bh,hf->bf", g.gelu(g.einsum("bh,hf->bf", x, w1)), w2);
    } else {
      const TensorId w = g.parameter(TensorShape{{"h", h}, {"h", h}}, DType::bf16);  // (H, H)
      y = g.einsum("bh,ho->bo", x, w);
    }
    x = g.add(x, y);
    g.end_group();
  }
  return g;
}

}  // namespace carto::testing
