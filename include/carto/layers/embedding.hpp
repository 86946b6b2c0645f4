// carto/layers/embedding.hpp — token + learned position embedding, the LM head, cross-entropy.
//
// Design note: token ids are int32 graph inputs (TensorKind::index) of shape (B, S). The embedding
// gathers rows of the token table wte (V, H), adds the position table wpe (S, H) broadcast over the
// batch (a bias op) and applies dropout (GPT-2's embedding dropout). The LM head maps (B, S, H) to
// logits (B, S, V) by the token table transposed (tied, as GPT-2 and Narayanan et al. 2021's
// parameter count assume) or by its own (V, H) table (untied). Cross-entropy averages
// -log softmax(logits)[target] over the tokens to an fp32 scalar. Embedding lookups are no matmul;
// the LM head is (2·B·S·H·V forward FLOPs).
#pragma once

#include <cstdint>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/layers/basic.hpp"

namespace carto {

struct EmbeddingSpec {
  std::int64_t vocab = 1;
  std::int64_t positions = 1;  // the sequence length the position table covers
  std::int64_t hidden = 1;
  DType dtype = DType::bf16;
  double dropout = 0.1;
};

struct EmbeddingOutput {
  TensorId output{};  // (B, S, H)
  TensorId table{};   // wte (V, H), for a tied LM head
};

constexpr EmbeddingOutput embedding(Graph& g, TensorId ids, const EmbeddingSpec& spec) {
  const TensorShape& is = g.tensor(ids).shape;  // (B, S)
  if (is.rank() != 2 || is.dims()[1].extent != spec.positions) {
    detail::fail("carto: embedding takes ids (B, S) with S = ", spec.positions, " positions; got ",
                 is);
  }
  const TensorId wte = g.parameter({{"vocab", spec.vocab}, {"hidden", spec.hidden}}, spec.dtype);
  const TensorId wpe = g.parameter({{"seq", spec.positions}, {"hidden", spec.hidden}}, spec.dtype);
  const TensorId tokens = g.gather(wte, ids);   // (B, S, H)
  const TensorId summed = g.bias(tokens, wpe);  // (B, S, H)
  return {.output = dropout(g, summed, spec.dropout), .table = wte};
}

enum class LmHeadWeights : std::uint8_t { tied, untied };

// logits (B, S, V) = x (B, S, H) · tableᵀ; `tied` uses `table`, `untied` makes a (V, H) parameter.
constexpr TensorId lm_head(Graph& g, TensorId x, TensorId table, LmHeadWeights weights,
                           std::int64_t vocab) {
  const TensorShape& xs = g.tensor(x).shape;
  const TensorId w =
      weights == LmHeadWeights::tied
          ? table
          : g.parameter({{"vocab", vocab}, xs.dims()[xs.rank() - 1]}, g.tensor(x).dtype);
  return g.einsum("bsh,vh->bsv", x, w);  // (B, S, V)
}

constexpr TensorId cross_entropy(Graph& g, TensorId logits, TensorId targets) {
  return g.softmax_cross_entropy(logits, targets);  // fp32 scalar
}

}  // namespace carto
