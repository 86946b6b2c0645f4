// Llama-family models against closed forms derived from the architecture (Dubey et al. 2024 for
// the configs), independent of the profiler's walk: parameters (the published totals), matmul
// FLOPs per step, activation bytes saved per block (materialized and fused attention, with and
// without recomputation); and the new ops' strategies (rules of strategy.hpp's design note).
//
// Notation: l layers, h hidden, a heads, n kv heads, d = h/a, f ffn_hidden, V vocabulary, s
// sequence, b batch; values bf16 (2 bytes), statistics fp32.
// Parameters per block: q and o projections h·h each, k and v h·n·d each (q, k, v as one fused
// projection of h + 2nd columns), gate/up/down h·f each,
// two RMSNorm gammas h each: 2h² + 2hnd + 3hf + 2h. Whole model: l·(that) + Vh (embedding) + Vh
// (untied LM head) + h (final RMSNorm).
// Matmul FLOPs, forward, per block: 2bs(2h² + 2hnd + 3hf) for the projections, plus 2bs²h for
// QKᵀ (b·a·s·s·d multiply-adds) and 2bs²h for P·V; the LM head 2bshV. An einsum's backward is
// twice its forward (input and weight gradients, or both inputs' gradients); fused attention's
// backward is 10bs²h (recomputed QKᵀ, dV, dP, dQ, dK) against its 4bs²h forward. So
//   materialized step = 3·l·(2bs(2h² + 2hnd + 3hf) + 4bs²h) + 6bshV,
//   fused step        = l·(6bs(2h² + 2hnd + 3hf) + 14bs²h) + 6bshV,
// and full recomputation adds one forward of every block, l·(2bs(2h² + 2hnd + 3hf) + 4bs²h).
// Saved bytes per block (no dropout in Llama): the block input x and the first norm's output (2sbh
// each), rotated q (2sbh), rotated k (2sb·nd), v — a view of the fused QKV projection's output
// (B, S, n(g+2)d), so its whole buffer of 2sb(h + 2nd) (a saved view keeps its storage) — the
// attention context (2sbh: the output projection's input, a view of it), the residual y and the
// second norm's output (2sbh each), gate, up and silu(gate)·up (2sbf each) — 14sbh + 6sbnd + 6sbf
// — plus, materialized, the
// softmax output (2as²b), or, fused, the fp32 logsumexp per query row (4asb). Counted RMSNorm
// statistics add one fp32 rstd per row per norm: 8sb. Full recomputation keeps x alone: 2sbh.
#include <carto/layers.hpp>
#include <carto/profile.hpp>
#include <carto/search/strategy.hpp>
#include <catch2/catch.hpp>
#include <limits>
#include <optional>
#include <string>
#include <utility>

using namespace carto;

namespace {

std::int64_t closed_params(const LlamaConfig& c) {
  const std::int64_t h = c.hidden, nd = c.kv_heads * (c.hidden / c.heads), f = c.ffn_hidden;
  return c.layers * (2 * h * h + 2 * h * nd + 3 * h * f + 2 * h) +
         c.vocab * h * (c.tied_lm_head ? 1 : 2) + h;
}

std::int64_t projections_forward(const LlamaConfig& c, std::int64_t b) {
  const std::int64_t h = c.hidden, nd = c.kv_heads * (c.hidden / c.heads), f = c.ffn_hidden;
  return 2 * b * c.seq * (2 * h * h + 2 * h * nd + 3 * h * f);
}

std::int64_t closed_step_flops(const LlamaConfig& c, std::int64_t b, AttentionKind kind,
                               Recompute recompute) {
  const std::int64_t s = c.seq, h = c.hidden;
  const std::int64_t core = b * s * s * h;  // b·a·s·s·d
  const std::int64_t block_forward = projections_forward(c, b) + 4 * core;
  const std::int64_t block_step =
      kind == AttentionKind::fused ? 3 * projections_forward(c, b) + 14 * core : 3 * block_forward;
  return c.layers * block_step + 6 * b * s * h * c.vocab +
         (recompute == Recompute::full ? c.layers * block_forward : 0);
}

std::int64_t closed_saved_per_block(const LlamaConfig& c, std::int64_t b, AttentionKind kind,
                                    bool stats) {
  const std::int64_t s = c.seq, h = c.hidden, a = c.heads;
  const std::int64_t nd = c.kv_heads * (h / a);
  const std::int64_t base = 14 * s * b * h + 6 * s * b * nd + 6 * s * b * c.ffn_hidden;
  const std::int64_t attention = kind == AttentionKind::fused ? 4 * a * s * b : 2 * a * s * s * b;
  return base + attention + (stats ? 8 * s * b : 0);
}

// 8B: per block 2·4096² + 2·4096·1024 + 3·4096·14336 + 2·4096 = 33554432 + 8388608 + 176160768
// + 8192 = 218112000; 32 blocks 6979584000; embedding and head 2·128256·4096 = 1050673152; final
// norm 4096: 8030261248.
static_assert(build_llama(*find_llama("llama3-8b"), {}).num_params() == 8'030'261'248,
              "Llama 3 8B has 8,030,261,248 parameters");

struct TinyLlama {
  static constexpr std::int64_t layers = 2, hidden = 32, heads = 4, kv_heads = 2, ffn_hidden = 48,
                                vocab = 40, seq = 8;
};
static_assert(Llama<TinyLlama>::config.kv_heads == 2);
static_assert(LlamaOf<kLlamaPresets[1]>::config.hidden == 8192);

constexpr ProfileOptions kBase{.precision = Precision::mixed_bf16,
                               .attention = AttentionKind::materialized,
                               .recompute = Recompute::none,
                               .dropout = 0.0,
                               .layernorm_stats = LayerNormStats::ignored};

}  // namespace

TEST_CASE("Llama 3 parameters: the published totals and the closed form", "[profile][llama]") {
  REQUIRE(llama_presets().size() == 3);
  for (const LlamaConfig& c : llama_presets()) {
    INFO(c.name);
    REQUIRE(!check_config(c));
    REQUIRE(build_llama(c, kBase).num_params() == closed_params(c));
  }
  const auto params = [](std::string_view name) {
    return static_cast<double>(build_llama(*find_llama(name), kBase).num_params());
  };
  // 8.03 B and 70.6 B as rounded; 405 B as the paper writes 405.85 B (the leading digits).
  REQUIRE(std::llround(params("llama3-8b") / 1e7) == 803);
  REQUIRE(std::llround(params("llama3-70b") / 1e8) == 706);
  REQUIRE(static_cast<std::int64_t>(params("llama3-405b") / 1e9) == 405);
  // The profile counts the same parameters.
  REQUIRE(Llama<TinyLlama>::profile(kBase).params == closed_params(Llama<TinyLlama>::config));
  LlamaConfig tied = Llama<TinyLlama>::config;
  tied.tied_lm_head = true;
  REQUIRE(build_llama(tied, kBase).num_params() == closed_params(tied));
  tied.biases = true;  // biases on the seven projections: 2h + 2nd + 2f + h
  REQUIRE(build_llama(tied, kBase).num_params() ==
          closed_params(tied) + 2 * (2 * 32 + 2 * 16 + 2 * 48 + 32));
}

TEST_CASE("Llama matmul FLOPs per step = the closed form, fused and materialized, recompute",
          "[profile][llama]") {
  std::vector<LlamaConfig> configs(llama_presets().begin(), llama_presets().end());
  configs.push_back(Llama<TinyLlama>::config);
  for (LlamaConfig c : configs) {
    if (c.layers > 4) c.layers = 2;  // the per-block form is the same at every depth
    for (AttentionKind kind : {AttentionKind::materialized, AttentionKind::fused}) {
      for (Recompute r : {Recompute::none, Recompute::full}) {
        for (std::int64_t b : {1, 3}) {
          INFO(c.name << " kind " << static_cast<int>(kind) << " recompute " << static_cast<int>(r)
                      << " b " << b);
          ProfileOptions o = kBase;
          o.batch = b, o.attention = kind, o.recompute = r;
          const ModelProfile p = profile_llama(c, o);
          REQUIRE(p.flops.matmul_step == closed_step_flops(c, b, kind, r));
          REQUIRE(p.flops.step == p.flops.forward + p.flops.backward + p.flops.recompute);
        }
      }
    }
  }
}

TEST_CASE("Llama saved bytes per block = the closed form", "[profile][llama]") {
  for (LlamaConfig c : {Llama<TinyLlama>::config, *find_llama("llama3-8b")}) {
    c.layers = 2;
    for (std::int64_t seq : {std::int64_t{8}, std::int64_t{64}}) {
      c.seq = seq;
      for (AttentionKind kind : {AttentionKind::materialized, AttentionKind::fused}) {
        for (LayerNormStats stats : {LayerNormStats::ignored, LayerNormStats::counted}) {
          INFO(c.name << " seq " << seq << " kind " << static_cast<int>(kind));
          ProfileOptions o = kBase;
          o.batch = 2, o.attention = kind, o.layernorm_stats = stats;
          REQUIRE(profile_llama(c, o).memory.activation_bytes_per_layer ==
                  closed_saved_per_block(c, 2, kind, stats == LayerNormStats::counted));
          o.recompute = Recompute::full;
          REQUIRE(profile_llama(c, o).memory.activation_bytes_per_layer ==
                  2 * c.seq * 2 * c.hidden);
        }
      }
    }
  }
}

TEST_CASE("Llama configs: bad values get one clear message", "[profile][llama][config]") {
  LlamaConfig c = *find_llama("llama3-8b");
  c.kv_heads = 5;
  REQUIRE(check_config(c).value() ==
          "model 'llama3-8b': kv_heads (5) must divide heads (32); each key/value head serves "
          "heads / kv_heads query heads");
  REQUIRE_THROWS_WITH(build_llama(c, kBase), Catch::Contains("kv_heads (5) must divide heads"));
  REQUIRE(!find_llama("llama3-1t"));
}

TEST_CASE("Llama configs: a fused QKV width past 2^63-1 is refused, not wrapped",
          "[profile][llama][config]") {
  // Around the largest head size whose fused QKV width (heads + 2 kv_heads) * head_dim fits,
  // check_config refuses exactly the configs whose width, multiplied out with an overflow check,
  // passes 2^63-1.
  const std::int64_t max = std::numeric_limits<std::int64_t>::max();
  int refused = 0, accepted = 0;
  for (const auto& [heads, kv_heads] :
       {std::pair<std::int64_t, std::int64_t>{32, 8}, {1, 1}, {64, 64}, {6, 2}, {128, 8}}) {
    const std::int64_t per_head = heads + 2 * kv_heads;  // the QKV width in head sizes
    const std::int64_t edge = max / per_head;            // the largest head size that fits
    for (std::int64_t d = edge - 4; d <= edge + 4; ++d) {
      if (d % 2 != 0 || d > max / heads) continue;  // rotary pairs; hidden itself must fit
      LlamaConfig c = *find_llama("llama3-8b");
      c.heads = heads;
      c.kv_heads = kv_heads;
      c.hidden = heads * d;
      std::int64_t width = 0;
      const bool wraps = __builtin_mul_overflow(per_head, d, &width);
      INFO("heads " << heads << ", kv_heads " << kv_heads << ", head size " << d);
      const std::optional<std::string> problem = check_config(c);
      REQUIRE(problem.has_value() == wraps);
      if (wraps) {
        ++refused;
        REQUIRE_THAT(*problem, Catch::Contains("hidden is " + std::to_string(c.hidden)) &&
                                   Catch::Contains("(the fused QKV) exceeds 2^63-1"));
        REQUIRE_THROWS_WITH(build_llama(c, kBase), Catch::Contains("(the fused QKV)"));
      } else {
        ++accepted;
      }
    }
  }
  REQUIRE(refused >= 5);
  REQUIRE(accepted >= 5);
}

TEST_CASE("Llama ops: strategies follow the stated rules", "[search][llama]") {
  const Graph g = Llama<TinyLlama>::graph({.batch = 2, .attention = AttentionKind::fused});
  const DeviceMesh mesh{{"x", 2}, {"y", 2}};
  int rotary = 0, distributed = 0, gqa_group_split = 0;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    const std::vector<Strategy> all =
        enumerate_strategies(g, OpId{static_cast<std::int32_t>(k)}, mesh);
    INFO("op " << k << " " << to_string_view(op.kind));
    REQUIRE(!all.empty());
    for (const Strategy& s : all) {
      if (op.kind == OpKind::rotary) {
        REQUIRE(s.sharding.output.dims()[s.sharding.output.rank() - 1].empty());
        ++rotary;
      }
      if (op.kind == OpKind::rmsnorm && s.sharding.variant == OpVariant::distributed_statistics) {
        // One fp32 per row, forward and backward, over each axis of the normalized dim.
        REQUIRE(!s.forward.empty());
        REQUIRE(s.forward.size() == s.backward.size());
        const TensorShape local =
            local_shape(g.tensor(op.inputs[0]).shape, s.sharding.inputs[0], mesh);
        REQUIRE(s.forward[0].bytes == local.numel() / local.dims()[2].extent * 4);
        ++distributed;
      }
      if (op.kind == OpKind::silu_mul) {
        REQUIRE(!s.sharding.output.is_partial());
        REQUIRE(s.sharding.inputs[0] == s.sharding.output);
        REQUIRE(s.sharding.inputs[1] == s.sharding.output);
      }
      if (op.kind == OpKind::fused_attention && !s.sharding.inputs[0].dims()[2].empty()) {
        // Query heads within a group split: k and v replicated over that axis, their gradients
        // Partial over it.
        REQUIRE(s.sharding.inputs[1].rank() == 4);
        for (const AxisName& a : s.sharding.inputs[0].dims()[2]) {
          REQUIRE(!s.sharding.inputs[1].uses(a));
          REQUIRE(detail::has_axis(s.gradients[1].partial(), a));
        }
        ++gqa_group_split;
      }
    }
  }
  REQUIRE(rotary > 0);
  REQUIRE(distributed > 0);
  REQUIRE(gqa_group_split > 0);
  // A split head dim is refused by rotary's rule, naming it.
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Op& op = g.ops()[k];
    if (op.kind != OpKind::rotary) continue;
    ShardingSpec x = ShardingSpec::replicated(g.tensor(op.inputs[0]).shape.rank());
    ShardingSpec split;
    for (std::size_t d = 0; d + 1 < x.rank(); ++d) split.add_dim({});
    split.add_dim({AxisName("x")});
    REQUIRE_THROWS_WITH(make_strategy(g, OpId{static_cast<std::int32_t>(k)},
                                      {.inputs = {split}, .output = split}, mesh),
                        Catch::Contains("rotary keeps the head dim unsplit"));
    break;
  }
}

TEST_CASE("typed Llama layers compose in Sequential", "[profile][llama][typed]") {
  using X = Tensor<DType::bf16, Shape<Dim<"batch", 2>, Dim<"seq", 8>, Dim<"hidden", 32>>>;
  constexpr Sequential<RmsNorm<X>, GroupedQueryAttention<X, 4, 2>, RmsNorm<X>, SwiGlu<X, 48>>
      chain{};
  // Parameters: two gammas, q and o 32·32, k and v 32·16, gate/up/down 32·48.
  STATIC_REQUIRE(chain.graph().num_params() == 2 * 32 + 2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48);
  const ModelProfile p = chain.profile(kBase);
  // Projections 2bs(2h² + 2hnd + 3hf) forward with b·s = 16, plus QKᵀ and P·V 4bs²h: the
  // forward matmul FLOPs of one block of the closed form.
  REQUIRE(p.flops.matmul_forward ==
          2 * 16 * (2 * 32 * 32 + 2 * 32 * 16 + 3 * 32 * 48) + 4 * 2 * 8 * 8 * 32);
}
