// carto/layers/gpt.hpp — GPT configurations, presets, the GPT graph builder and Gpt<Config>.
//
// Design note: a GptConfig is a plain value (usable in constexpr and read at run time). The graph
// is embedding -> `layers` pre-LN transformer blocks -> final layernorm -> LM head ->
// cross-entropy, one group each ("embedding", "block.0" ... "block.{l-1}", "final_layernorm",
// "lm_head", "cross_entropy"). Its parameters are 12lh² + 13lh + (V + s)h + 2h: Narayanan et al.
// 2021 §5.1's P = 12lh²(1 + 13/(12h) + (V+s)/(12lh)) plus the final layernorm (2h), which that
// formula leaves out; an untied LM head adds Vh. Invariants (check_config): every size positive,
// heads divide hidden. Gpt<Config> takes a type with either `static constexpr GptConfig config` or
// static members layers, hidden, heads, vocab, seq (optional ffn_ratio, tied_lm_head);
// GptOf<preset> wraps a constexpr GptConfig object.
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
#include "carto/layers/basic.hpp"
#include "carto/layers/embedding.hpp"
#include "carto/layers/transformer.hpp"
#include "carto/profile/options.hpp"
#include "carto/profile/schedule.hpp"

namespace carto {

struct GptConfig {
  std::string_view name{};
  std::int64_t layers = 1;
  std::int64_t hidden = 1;
  std::int64_t heads = 1;
  std::int64_t vocab = 1;
  std::int64_t seq = 1;
  std::int64_t ffn_ratio = 4;  // Mlp h -> ratio·h -> h
  bool tied_lm_head = true;
};

// GPT-2 (Radford et al. 2019, Table 2; vocabulary 50257, context 1024); GPT-3-family configs of
// Korthikanti et al. 2022 Table 3 (22B, 175B, 530B, 1T); Narayanan et al. 2021 Table 1 rows
// (vocabulary 51200 and sequence 2048 as in that paper).
inline constexpr std::array<GptConfig, 18> kModelPresets{{
    {.name = "gpt2-124m", .layers = 12, .hidden = 768, .heads = 12, .vocab = 50257, .seq = 1024},
    {.name = "gpt2-350m", .layers = 24, .hidden = 1024, .heads = 16, .vocab = 50257, .seq = 1024},
    {.name = "gpt2-774m", .layers = 36, .hidden = 1280, .heads = 20, .vocab = 50257, .seq = 1024},
    {.name = "gpt2-1.5b", .layers = 48, .hidden = 1600, .heads = 25, .vocab = 50257, .seq = 1024},
    {.name = "gpt3-22b", .layers = 48, .hidden = 6144, .heads = 64, .vocab = 51200, .seq = 2048},
    {.name = "gpt3-175b", .layers = 96, .hidden = 12288, .heads = 96, .vocab = 51200, .seq = 2048},
    {.name = "gpt3-530b",
     .layers = 105,
     .hidden = 20480,
     .heads = 128,
     .vocab = 51200,
     .seq = 2048},
    {.name = "gpt3-1t", .layers = 128, .hidden = 25600, .heads = 160, .vocab = 51200, .seq = 2048},
    {.name = "megatron-1.7b",
     .layers = 24,
     .hidden = 2304,
     .heads = 24,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-3.6b",
     .layers = 30,
     .hidden = 3072,
     .heads = 32,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-7.5b",
     .layers = 36,
     .hidden = 4096,
     .heads = 32,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-18b",
     .layers = 40,
     .hidden = 6144,
     .heads = 48,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-39b",
     .layers = 48,
     .hidden = 8192,
     .heads = 64,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-76b",
     .layers = 60,
     .hidden = 10240,
     .heads = 80,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-145b",
     .layers = 80,
     .hidden = 12288,
     .heads = 96,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-310b",
     .layers = 96,
     .hidden = 16384,
     .heads = 128,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-530b",
     .layers = 105,
     .hidden = 20480,
     .heads = 128,
     .vocab = 51200,
     .seq = 2048},
    {.name = "megatron-1t",
     .layers = 128,
     .hidden = 25600,
     .heads = 160,
     .vocab = 51200,
     .seq = 2048},
}};

constexpr std::span<const GptConfig> model_presets() { return kModelPresets; }

constexpr std::optional<GptConfig> find_model(std::string_view name) {
  for (const GptConfig& c : kModelPresets) {
    if (c.name == name) return c;
  }
  return std::nullopt;
}

// nullopt when the config is valid, else one message naming the problem and what would be right.
constexpr std::optional<std::string> check_config(const GptConfig& c) {
  const std::pair<std::string_view, std::int64_t> sizes[] = {
      {"layers", c.layers}, {"hidden", c.hidden}, {"heads", c.heads},
      {"vocab", c.vocab},   {"seq", c.seq},       {"ffn_ratio", c.ffn_ratio}};
  for (const auto& [what, value] : sizes) {
    if (value < 1) {
      return "model '" + std::string(c.name) + "': " + std::string(what) + " is " +
             (value < 0 ? "-" + decimal(-value) : decimal(value)) +
             "; it must be a positive integer";
    }
  }
  if (c.hidden % c.heads != 0) {
    return "model '" + std::string(c.name) + "': heads (" + decimal(c.heads) +
           ") must divide hidden (" + decimal(c.hidden) + "); hidden / heads is the head size";
  }
  // The widest dims a block makes from hidden: the fused QKV (3 hidden) and the MLP (ffn_ratio
  // hidden) must be representable, or they would wrap negative far from the cause.
  constexpr std::int64_t kMax = 0x7fffffffffffffff;
  const std::pair<std::string_view, std::int64_t> widths[] = {
      {"3 * hidden (the fused QKV)", 3}, {"ffn_ratio * hidden (the MLP)", c.ffn_ratio}};
  for (const auto& [what, factor] : widths) {
    if (c.hidden > kMax / factor) {
      return "model '" + std::string(c.name) + "': hidden is " + decimal(c.hidden) + "; " +
             std::string(what) + " exceeds 2^63-1; use a smaller hidden size";
    }
  }
  return std::nullopt;
}

namespace detail {
constexpr void require_valid(const GptConfig& c, const ProfileOptions& o) {
  if (auto problem = check_config(c)) fail("carto: ", *problem);
  if (o.batch < 1) fail("carto: the batch size must be a positive integer; got ", o.batch);
  if (!(o.dropout >= 0.0 && o.dropout < 1.0)) {
    fail("carto: the dropout probability must be in [0, 1); got ", o.dropout);
  }
}
}  // namespace detail

// The graph of one GPT training step (forward; the profiler derives backward).
constexpr Graph build_gpt(const GptConfig& c, const ProfileOptions& o) {
  detail::require_valid(c, o);
  const DType dt = compute_dtype(o.precision);
  Graph g{};
  const TensorShape tokens{{"batch", o.batch}, {"seq", c.seq}};
  const TensorId ids = g.input(tokens, DType::fp32, TensorKind::index);      // (B, S) int32
  const TensorId targets = g.input(tokens, DType::fp32, TensorKind::index);  // (B, S) int32

  g.begin_group("embedding", GroupKind::embedding);
  const EmbeddingOutput emb = embedding(g, ids,
                                        {.vocab = c.vocab,
                                         .positions = c.seq,
                                         .hidden = c.hidden,
                                         .dtype = dt,
                                         .dropout = o.dropout});
  g.end_group();
  TensorId x = emb.output;  // (B, S, H)
  for (std::int64_t i = 0; i < c.layers; ++i) {
    g.begin_group(LayerName("block.").append(i), GroupKind::transformer_block);
    x = transformer_block(g, x,
                          {.heads = c.heads,
                           .ffn_ratio = c.ffn_ratio,
                           .attention = o.attention,
                           .dropout = o.dropout});
    g.end_group();
  }
  g.begin_group("final_layernorm", GroupKind::layer);
  x = layer_norm(g, x);  // (B, S, H)
  g.end_group();
  g.begin_group("lm_head", GroupKind::head);
  const TensorId logits = lm_head(
      g, x, emb.table, c.tied_lm_head ? LmHeadWeights::tied : LmHeadWeights::untied, c.vocab);
  g.end_group();
  g.begin_group("cross_entropy", GroupKind::loss);
  g.set_result(cross_entropy(g, logits, targets));
  g.end_group();
  return g;
}

// Profile of one training step of a GPT (one device, unsharded).
constexpr ModelProfile profile_gpt(const GptConfig& c, const ProfileOptions& o) {
  const Graph g = build_gpt(c, o);
  return profile_graph(g, o);
}

// ---- compile-time form
// ---------------------------------------------------------------------------

namespace detail {
template <class C>
consteval GptConfig gpt_config_of() {
  if constexpr (requires { C::config; }) {
    return C::config;
  } else {
    static_assert(
        requires {
          C::layers;
          C::hidden;
          C::heads;
          C::vocab;
          C::seq;
        },
        "carto: Gpt<Config> needs Config::config (a GptConfig) or static members layers, "
        "hidden, heads, vocab and seq");
    GptConfig c{.name = "custom",
                .layers = C::layers,
                .hidden = C::hidden,
                .heads = C::heads,
                .vocab = C::vocab,
                .seq = C::seq};
    if constexpr (requires { C::ffn_ratio; }) c.ffn_ratio = C::ffn_ratio;
    if constexpr (requires { C::tied_lm_head; }) c.tied_lm_head = C::tied_lm_head;
    if constexpr (requires { C::name; }) c.name = C::name;
    return c;
  }
}
}  // namespace detail

template <class Config>
struct Gpt {
  static constexpr GptConfig config = detail::gpt_config_of<Config>();
  static_assert(config.layers > 0 && config.hidden > 0 && config.heads > 0 && config.vocab > 0 &&
                    config.seq > 0 && config.ffn_ratio > 0,
                "carto: Gpt<Config>: every size must be positive");
  static_assert(config.hidden % config.heads == 0, "carto: Gpt<Config>: heads must divide hidden");

  static constexpr Graph graph(const ProfileOptions& o = {}) { return build_gpt(config, o); }
  static constexpr ModelProfile profile(const ProfileOptions& o = {}) {
    return profile_gpt(config, o);
  }
};

template <const GptConfig& C>
struct ConfigRef {
  static constexpr GptConfig config = C;
};
// Gpt over a constexpr GptConfig object: GptOf<kModelPresets[0]>.
template <const GptConfig& C>
using GptOf = Gpt<ConfigRef<C>>;

}  // namespace carto
