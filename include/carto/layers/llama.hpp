// carto/layers/llama.hpp — Llama-family layers (RMSNorm, SwiGLU, rotary grouped-query attention),
// LlamaConfig, presets, build_llama and Llama<Config>.
//
// Design note: the block is pre-norm like GPT's, x + Attn(RMSNorm(x)), then y + SwiGLU(RMSNorm(y)),
// with Llama's choices: RMSNorm (Zhang & Sennrich 2019: γ, no β, no mean), a SwiGLU MLP (Shazeer
// 2020: gate and up projections h -> f, fused into one h -> 2f projection whose columns interleave
// gate and up, silu(gate)·up as one fused silu_mul op, down f -> h),
// rotary position embeddings on q and k (Su et al. 2021; θ = rope_theta), grouped-query attention
// (kv_heads dividing heads; K and V of kv_heads·d, d = hidden / heads), no dropout, and, by config
// flags, no biases and an untied LM head. Q, K and V come from one fused projection (B, S,
// n·(g+2)·d) in per-group order (each group's g query heads, its key head, its value head:
// Megatron-LM's GQA layout), so the search carries one tensor through the projection, as for
// GPT's fused QKV, where three projections would keep three live whose specs multiply its
// states (a Llama3-8B block on a 2x2 mesh: minutes against seconds); gate and up likewise (on a
// 3-axis mesh of 64 devices the two kept three quarters of a block's labels). V, a view of it,
// keeps the fused buffer saved (2sb(h + 2nd) bytes, not 2sbnd). Q is viewed as (B, n, g, S, d) — n
// key/value heads, g = heads / n query heads per group — and K, V as (B, n, S, d), so the attention
// einsums carry a group index (bngqd,bnkd->bngqk and bngqk,bnkd->bngqd): a split of n (the
// key/value heads) or of g (query heads within a group) is an einsum strategy like any other, and
// no split separates a query head from its key/value head. The graph is embedding (a gather of the
// token table, no position table) -> `layers` blocks -> final RMSNorm -> LM head -> cross-entropy,
// groups named as build_gpt names them. Parameters: l(2h² + 2h·n·d + 3hf + 2h) + Vh (+ Vh untied)
// + h. ProfileOptions::dropout is not read (Llama trains without dropout); norm_eps is carried for
// the runtime (the profile does not depend on it).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/layers/attention.hpp"
#include "carto/layers/basic.hpp"
#include "carto/layers/embedding.hpp"
#include "carto/profile/options.hpp"
#include "carto/profile/schedule.hpp"
#include "carto/util/checked.hpp"

namespace carto {

// RMSNorm over the last dim, with gamma.
constexpr TensorId rms_norm(Graph& g, TensorId x) {
  const std::size_t dim = g.tensor(x).shape.rank() - 1;
  const DimExtent last = g.tensor(x).shape.dims()[dim];
  const TensorId gamma = g.parameter({last}, g.tensor(x).dtype);
  return g.rmsnorm(x, gamma, dim);
}

struct SwiGluSpec {
  std::int64_t ffn_hidden = 1;
  Bias bias = Bias::none;
};

// down(silu(gate(x)) · up(x)): (B, S, H) -> (B, S, H).
constexpr TensorId swiglu(Graph& g, TensorId x, const SwiGluSpec& spec) {
  const TensorShape xs = g.tensor(x).shape;
  const DimExtent hidden = xs.dims()[xs.rank() - 1];
  if (spec.ffn_hidden < 1)
    detail::fail("carto: SwiGLU's ffn_hidden must be positive; got ", spec.ffn_hidden);
  // One fused gate/up projection (B, S, 2F) with gate and up columns interleaved (column (j, part)
  // is 2j + part: split_heads with F heads of one column, two parts), so a split of its columns
  // over any t | F devices gives each piece matching gate and up columns, and the DP sees one
  // tensor where two projections would keep two live (their specs multiply the MLP's states).
  const std::int64_t width =
      checked_mul(2, spec.ffn_hidden, "the fused gate/up width 2 * ffn_hidden");
  const TensorId fused =
      linear(g, x, {.out_name = "gate_up", .out_features = width, .bias = spec.bias});
  const TensorId gate = g.split_heads(fused, 2, 0, spec.ffn_hidden);  // (B, F, S, 1)
  const TensorId up = g.split_heads(fused, 2, 1, spec.ffn_hidden);    // (B, F, S, 1)
  const TensorId act = g.merge_heads(g.silu_mul(gate, up), "ffn");    // (B, S, F)
  return linear(g, act,
                {.out_name = hidden.name, .out_features = hidden.extent, .bias = spec.bias});
}

struct GqaSpec {
  std::int64_t heads = 1;
  std::int64_t kv_heads = 1;
  double rope_theta = 10000.0;
  AttentionKind kind = AttentionKind::materialized;
  Bias bias = Bias::none;
};

// Causal grouped-query self-attention with rotary q and k: (B, S, H) -> (B, S, H).
constexpr TensorId grouped_query_attention(Graph& g, TensorId x, const GqaSpec& spec) {
  const TensorShape xs = g.tensor(x).shape;  // (B, S, H)
  if (xs.rank() != 3) detail::fail("carto: attention takes (B, S, H); got ", xs);
  const std::int64_t h = xs.dims()[2].extent;
  if (spec.heads < 1 || h % spec.heads != 0 || spec.kv_heads < 1 ||
      spec.heads % spec.kv_heads != 0) {
    detail::fail("carto: grouped-query attention with ", spec.heads, " heads and ", spec.kv_heads,
                 " key/value heads over hidden ", h,
                 ": heads must divide hidden and kv_heads must divide heads");
  }
  const std::int64_t d = h / spec.heads;
  const std::int64_t n = spec.kv_heads;
  const std::int64_t group = spec.heads / n;
  const double factor = detail::inverse_sqrt(static_cast<double>(d));
  // One fused QKV projection (B, S, n·(g+2)·d) in per-group order: each key/value head's g query
  // heads, its key head and its value head (Megatron-LM's GQA layout), so a split of its columns
  // over t | n devices keeps whole groups, and the DP sees one tensor where three projections
  // would keep three live (their specs multiply the states of the attention branch).
  const std::int64_t qkv_width =
      checked_product("the fused QKV width (heads + 2 kv_heads) * head_dim", {n, group + 2, d});
  const TensorId qkv =
      linear(g, x, {.out_name = "qkv", .out_features = qkv_width, .bias = spec.bias});
  const TensorId q = g.rotary(g.split_groups(qkv, n, group, group + 2),
                              spec.rope_theta);  // (B, n, g, S, d)
  const TensorId k =
      g.rotary(g.split_heads(qkv, group + 2, group, n), spec.rope_theta);  // (B, n, S, d)
  const TensorId v = g.split_heads(qkv, group + 2, group + 1, n);          // (B, n, S, d)
  TensorId context;                                                        // (B, n, g, S, d)
  if (spec.kind == AttentionKind::fused) {
    context = g.fused_attention(q, k, v, factor, Masking::causal, 0.0);
  } else {
    const TensorId scores = g.einsum("bngqd,bnkd->bngqk", q, k);  // (B, n, g, S, S)
    const TensorId probs = g.softmax(g.scale(scores, factor), 4, Masking::causal);
    context = g.einsum("bngqk,bnkd->bngqd", probs, v);
  }
  const TensorId merged = g.merge_heads(context, xs.dims()[2].name);  // (B, S, H)
  return linear(g, merged, {.out_name = xs.dims()[2].name, .out_features = h, .bias = spec.bias});
}

struct LlamaBlockSpec {
  std::int64_t heads = 1;
  std::int64_t kv_heads = 1;
  std::int64_t ffn_hidden = 1;
  double rope_theta = 10000.0;
  AttentionKind attention = AttentionKind::materialized;
  Bias bias = Bias::none;
};

constexpr TensorId llama_block(Graph& g, TensorId x, const LlamaBlockSpec& spec) {
  const TensorId attn = grouped_query_attention(g, rms_norm(g, x),
                                                {.heads = spec.heads,
                                                 .kv_heads = spec.kv_heads,
                                                 .rope_theta = spec.rope_theta,
                                                 .kind = spec.attention,
                                                 .bias = spec.bias});
  const TensorId y = g.add(x, attn);
  const TensorId m = swiglu(g, rms_norm(g, y), {.ffn_hidden = spec.ffn_hidden, .bias = spec.bias});
  return g.add(y, m);
}

// ---- config and presets ------------------------------------------------------------------------

struct LlamaConfig {
  std::string_view name{};
  std::int64_t layers = 1;
  std::int64_t hidden = 1;
  std::int64_t heads = 1;
  std::int64_t kv_heads = 1;
  std::int64_t ffn_hidden = 1;
  std::int64_t vocab = 1;
  std::int64_t seq = 1;
  double rope_theta = 500000.0;
  double norm_eps = 1e-5;
  bool tied_lm_head = false;
  bool biases = false;
};

// Llama 3 (Dubey et al. 2024, Table 3, and the released configs: vocabulary 128,256, context
// 8192 in pre-training).
inline constexpr std::array<LlamaConfig, 3> kLlamaPresets{{
    {.name = "llama3-8b",
     .layers = 32,
     .hidden = 4096,
     .heads = 32,
     .kv_heads = 8,
     .ffn_hidden = 14336,
     .vocab = 128256,
     .seq = 8192},
    {.name = "llama3-70b",
     .layers = 80,
     .hidden = 8192,
     .heads = 64,
     .kv_heads = 8,
     .ffn_hidden = 28672,
     .vocab = 128256,
     .seq = 8192},
    {.name = "llama3-405b",
     .layers = 126,
     .hidden = 16384,
     .heads = 128,
     .kv_heads = 8,
     .ffn_hidden = 53248,
     .vocab = 128256,
     .seq = 8192},
}};

constexpr std::span<const LlamaConfig> llama_presets() { return kLlamaPresets; }

constexpr std::optional<LlamaConfig> find_llama(std::string_view name) {
  for (const LlamaConfig& c : kLlamaPresets) {
    if (c.name == name) return c;
  }
  return std::nullopt;
}

// nullopt when the config is valid, else one message naming the problem and what would be right.
constexpr std::optional<std::string> check_config(const LlamaConfig& c) {
  const std::pair<std::string_view, std::int64_t> sizes[] = {{"layers", c.layers},
                                                             {"hidden", c.hidden},
                                                             {"heads", c.heads},
                                                             {"kv_heads", c.kv_heads},
                                                             {"ffn_hidden", c.ffn_hidden},
                                                             {"vocab", c.vocab},
                                                             {"seq", c.seq}};
  const std::string model = "model '" + std::string(c.name) + "': ";
  for (const auto& [what, value] : sizes) {
    if (value < 1) {
      return model + std::string(what) + " is " +
             (value < 0 ? "-" + decimal(-value) : decimal(value)) +
             "; it must be a positive integer";
    }
  }
  if (c.hidden % c.heads != 0) {
    return model + "heads (" + decimal(c.heads) + ") must divide hidden (" + decimal(c.hidden) +
           "); hidden / heads is the head size";
  }
  if (c.heads % c.kv_heads != 0) {
    return model + "kv_heads (" + decimal(c.kv_heads) + ") must divide heads (" + decimal(c.heads) +
           "); each key/value head serves heads / kv_heads query heads";
  }
  if ((c.hidden / c.heads) % 2 != 0) {
    return model + "the head size hidden / heads (" + decimal(c.hidden / c.heads) +
           ") must be even; rotary embeddings rotate pairs";
  }
  if (!(c.rope_theta > 1.0) || !(c.norm_eps > 0.0)) {
    return model + "rope_theta must be above 1 and norm_eps positive";
  }
  // The widest dim a block makes from the sizes: the fused QKV, (heads + 2 kv_heads) head_dim =
  // hidden + 2 kv_heads head_dim, must be representable, or it would wrap negative far from the
  // cause. kv_heads head_dim <= hidden, so only the sum can overflow.
  const std::int64_t kv_width = c.kv_heads * (c.hidden / c.heads);
  if (kv_width > (kInt64Max - c.hidden) / 2) {
    return model + "hidden is " + decimal(c.hidden) + " with " + decimal(c.heads) + " heads and " +
           decimal(c.kv_heads) +
           " kv_heads; (heads + 2 * kv_heads) * head_dim (the fused QKV) exceeds 2^63-1; use a "
           "smaller hidden size";
  }
  return std::nullopt;
}

// The graph of one Llama training step (forward; the profiler derives backward).
constexpr Graph build_llama(const LlamaConfig& c, const ProfileOptions& o) {
  if (auto problem = check_config(c)) detail::fail("carto: ", *problem);
  if (o.batch < 1) detail::fail("carto: the batch size must be a positive integer; got ", o.batch);
  const DType dt = compute_dtype(o.precision);
  const Bias bias = c.biases ? Bias::with : Bias::none;
  Graph g{};
  const TensorShape tokens{{"batch", o.batch}, {"seq", c.seq}};
  const TensorId ids = g.input(tokens, DType::fp32, TensorKind::index);
  const TensorId targets = g.input(tokens, DType::fp32, TensorKind::index);

  g.begin_group("embedding", GroupKind::embedding);
  const TensorId table = g.parameter({{"vocab", c.vocab}, {"hidden", c.hidden}}, dt);
  TensorId x = g.gather(table, ids);  // (B, S, H)
  g.end_group();
  for (std::int64_t i = 0; i < c.layers; ++i) {
    g.begin_group(LayerName("block.").append(i), GroupKind::transformer_block);
    x = llama_block(g, x,
                    {.heads = c.heads,
                     .kv_heads = c.kv_heads,
                     .ffn_hidden = c.ffn_hidden,
                     .rope_theta = c.rope_theta,
                     .attention = o.attention,
                     .bias = bias});
    g.end_group();
  }
  g.begin_group("final_norm", GroupKind::layer);
  x = rms_norm(g, x);
  g.end_group();
  g.begin_group("lm_head", GroupKind::head);
  const TensorId logits =
      lm_head(g, x, table, c.tied_lm_head ? LmHeadWeights::tied : LmHeadWeights::untied, c.vocab);
  g.end_group();
  g.begin_group("cross_entropy", GroupKind::loss);
  g.set_result(cross_entropy(g, logits, targets));
  g.end_group();
  return g;
}

constexpr ModelProfile profile_llama(const LlamaConfig& c, const ProfileOptions& o) {
  const Graph g = build_llama(c, o);
  return profile_graph(g, o);
}

// ---- compile-time form
// ---------------------------------------------------------------------------

namespace detail {
template <class C>
consteval LlamaConfig llama_config_of() {
  if constexpr (requires { C::config; }) {
    return C::config;
  } else {
    static_assert(
        requires {
          C::layers;
          C::hidden;
          C::heads;
          C::kv_heads;
          C::ffn_hidden;
          C::vocab;
          C::seq;
        },
        "carto: Llama<Config> needs Config::config (a LlamaConfig) or static members layers, "
        "hidden, heads, kv_heads, ffn_hidden, vocab and seq");
    LlamaConfig c{.name = "custom",
                  .layers = C::layers,
                  .hidden = C::hidden,
                  .heads = C::heads,
                  .kv_heads = C::kv_heads,
                  .ffn_hidden = C::ffn_hidden,
                  .vocab = C::vocab,
                  .seq = C::seq};
    if constexpr (requires { C::rope_theta; }) c.rope_theta = C::rope_theta;
    if constexpr (requires { C::norm_eps; }) c.norm_eps = C::norm_eps;
    if constexpr (requires { C::tied_lm_head; }) c.tied_lm_head = C::tied_lm_head;
    if constexpr (requires { C::biases; }) c.biases = C::biases;
    if constexpr (requires { C::name; }) c.name = C::name;
    return c;
  }
}
}  // namespace detail

template <class Config>
struct Llama {
  static constexpr LlamaConfig config = detail::llama_config_of<Config>();
  static_assert(config.layers > 0 && config.hidden > 0 && config.heads > 0 && config.kv_heads > 0 &&
                    config.ffn_hidden > 0 && config.vocab > 0 && config.seq > 0,
                "carto: Llama<Config>: every size must be positive");
  static_assert(config.hidden % config.heads == 0,
                "carto: Llama<Config>: heads must divide hidden");
  static_assert(config.heads % config.kv_heads == 0,
                "carto: Llama<Config>: kv_heads must divide heads");
  static_assert((config.hidden / config.heads) % 2 == 0,
                "carto: Llama<Config>: the head size must be even (rotary pairs)");

  static constexpr Graph graph(const ProfileOptions& o = {}) { return build_llama(config, o); }
  static constexpr ModelProfile profile(const ProfileOptions& o = {}) {
    return profile_llama(config, o);
  }
};

template <const LlamaConfig& C>
struct LlamaConfigRef {
  static constexpr LlamaConfig config = C;
};
// Llama over a constexpr LlamaConfig object: LlamaOf<kLlamaPresets[0]>.
template <const LlamaConfig& C>
using LlamaOf = Llama<LlamaConfigRef<C>>;

// Typed: RmsNorm<Tensor<bf16, Shape<B, S, H>>> for Sequential.
template <class T>
struct RmsNorm {
  using input_type = T;
  using output_type = T;
  constexpr TensorId build(Graph& g, TensorId x) const { return rms_norm(g, x); }
};

// Typed: SwiGlu<Tensor<bf16, Shape<B, S, H>>, F> for Sequential.
template <class T, std::int64_t Ffn>
struct SwiGlu {
  static_assert(is_tensor<T>::value && Ffn > 0,
                "carto: SwiGlu<T, F> takes a carto::Tensor and F > 0");
  using input_type = T;
  using output_type = T;
  constexpr TensorId build(Graph& g, TensorId x) const { return swiglu(g, x, {.ffn_hidden = Ffn}); }
};

// Typed: GroupedQueryAttention<Tensor<bf16, Shape<B, S, H>>, Heads, KvHeads> for Sequential.
template <class T, std::int64_t Heads, std::int64_t KvHeads>
struct GroupedQueryAttention {
  static_assert(detail::heads_fit<T, Heads>() && KvHeads >= 1 && Heads % KvHeads == 0,
                "carto: GroupedQueryAttention<T, Heads, KvHeads> takes T = Tensor<..., Shape<B, S, "
                "H>> with Heads dividing H and KvHeads dividing Heads");
  using input_type = T;
  using output_type = T;
  AttentionKind kind = AttentionKind::materialized;
  double rope_theta = 500000.0;
  constexpr TensorId build(Graph& g, TensorId x) const {
    return grouped_query_attention(
        g, x, {.heads = Heads, .kv_heads = KvHeads, .rope_theta = rope_theta, .kind = kind});
  }
};

}  // namespace carto
