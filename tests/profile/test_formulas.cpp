// The profiler against published formulas (independent references, REFERENCES.md), for every GPT
// preset: parameters (Narayanan et al. 2021 §5.1), step FLOPs (Korthikanti et al. 2022 Eq. 7 and
// Narayanan et al. 2021 Eq. 3), activation bytes per layer (Korthikanti et al. 2022 Eq. 1, §4.1,
// Table 2) and model states (ZeRO §3.1). Each formula is evaluated as written, term by term, with
// integer divisions that the test checks are exact.
#include <carto/profile.hpp>
#include <catch2/catch.hpp>

using namespace carto;

namespace {

std::int64_t exact_div(std::int64_t a, std::int64_t b) {
  REQUIRE(a % b == 0);
  return a / b;
}

// Narayanan et al. 2021 §5.1: P = 12 l h² (1 + 13/(12h) + (V+s)/(12 l h)).
std::int64_t narayanan_params(const GptConfig& c) {
  const std::int64_t base = 12 * c.layers * c.hidden * c.hidden;
  return base + exact_div(base * 13, 12 * c.hidden) +
         exact_div(base, 12 * c.layers * c.hidden) * (c.vocab + c.seq);
}

// Korthikanti et al. 2022 Eq. 7 (no recomputation): 72 B s l h² (1 + s/(6h) + V/(12 l h)).
std::int64_t korthikanti_flops(const GptConfig& c, std::int64_t batch) {
  const std::int64_t base = 72 * batch * c.seq * c.layers * c.hidden * c.hidden;
  return base + exact_div(base, 6 * c.hidden) * c.seq +
         exact_div(base, 12 * c.layers * c.hidden) * c.vocab;
}

// Narayanan et al. 2021 Eq. 3 (full recomputation): 96 B s l h² (1 + s/(6h) + V/(16 l h)).
std::int64_t narayanan_flops(const GptConfig& c, std::int64_t batch) {
  const std::int64_t base = 96 * batch * c.seq * c.layers * c.hidden * c.hidden;
  return base + exact_div(base, 6 * c.hidden) * c.seq +
         exact_div(base, 16 * c.layers * c.hidden) * c.vocab;
}

// Korthikanti et al. 2022 Eq. 1: s b h (34 + 5 a s / h) bytes per layer, 16-bit values, 1-byte
// masks, layernorm statistics left out.
std::int64_t korthikanti_activations(const GptConfig& c, std::int64_t b) {
  const std::int64_t sbh = c.seq * b * c.hidden;
  return sbh * 34 + exact_div(sbh, c.hidden) * 5 * c.heads * c.seq;
}

constexpr ProfileOptions kPaper{.precision = Precision::mixed_bf16,
                                .attention = AttentionKind::materialized,
                                .recompute = Recompute::none,
                                .dropout = 0.1,
                                .layernorm_stats = LayerNormStats::ignored};

// Compile time: GPT-2 124M's parameters and step FLOPs (Eq. 7 with B = 1, s = 1024, l = 12, h =
// 768, V = 50257: 521838526464 + 115964116992 + 237142278144).
constexpr auto kGpt2 = [] {
  const ModelProfile p = profile_gpt(*find_model("gpt2-124m"), kPaper);
  return std::pair{p.params, p.flops.matmul_step};
}();
static_assert(kGpt2.first == 124'439'808, "GPT-2 124M has 124,439,808 parameters");
static_assert(kGpt2.second == 874'944'921'600,
              "GPT-2 124M: 72Bslh²(1 + s/(6h) + V/(12lh)) at B = 1");

}  // namespace

TEST_CASE("parameters = Narayanan et al. 2021 §5.1 + the final layernorm's 2h, every preset",
          "[profile][formula]") {
  REQUIRE(model_presets().size() >= 18);
  for (const GptConfig& c : model_presets()) {
    INFO(c.name);
    REQUIRE(!check_config(c));
    const ModelProfile p = profile_gpt(c, kPaper);
    REQUIRE(p.params == narayanan_params(c) + 2 * c.hidden);
  }
  GptConfig untied = *find_model("gpt2-124m");
  untied.tied_lm_head = false;
  REQUIRE(profile_gpt(untied, {}).params == 124'439'808 + 50257 * 768);
}

TEST_CASE(
    "matmul FLOPs per step = Korthikanti et al. 2022 Eq. 7 / Narayanan et al. 2021 Eq. 3, every "
    "preset",
    "[profile][formula]") {
  for (const GptConfig& c : model_presets()) {
    for (std::int64_t batch : {1, 4}) {
      INFO(c.name << " batch " << batch);
      ProfileOptions o = kPaper;
      o.batch = batch;
      const ModelProfile none = profile_gpt(c, o);
      REQUIRE(none.flops.matmul_step == korthikanti_flops(c, batch));
      REQUIRE(none.flops.matmul_recompute == 0);
      o.recompute = Recompute::full;
      const ModelProfile full = profile_gpt(c, o);
      REQUIRE(full.flops.matmul_step == narayanan_flops(c, batch));
      // Recomputation adds exactly one forward of every block (the LM head is not recomputed).
      REQUIRE(full.flops.recompute > 0);
      REQUIRE(full.flops.step == none.flops.step + full.flops.recompute);
      REQUIRE(full.flops.step == full.flops.forward + full.flops.backward + full.flops.recompute);
    }
  }
}

TEST_CASE(
    "activation bytes per layer = Korthikanti et al. 2022 Eq. 1 (sbh(34 + 5as/h)), every preset",
    "[profile][formula]") {
  for (GptConfig c : model_presets()) {
    for (const auto& [b, s] :
         {std::pair<std::int64_t, std::int64_t>{1, c.seq}, {2, 512}, {8, 128}}) {
      c.seq = s;
      INFO(c.name << " b " << b << " s " << s);
      ProfileOptions o = kPaper;
      o.batch = b;
      REQUIRE(profile_gpt(c, o).memory.activation_bytes_per_layer == korthikanti_activations(c, b));
      // Full recomputation keeps the block input only: 2sbh (Table 2).
      o.recompute = Recompute::full;
      REQUIRE(profile_gpt(c, o).memory.activation_bytes_per_layer == 2 * s * b * c.hidden);
    }
  }
}

TEST_CASE("the §4.1 breakdown: attention 11sbh + 5as²b, MLP 19sbh, layernorm inputs 4sbh",
          "[profile][formula]") {
  // One block built alone, its ops' saved storages split by sub-block.
  const std::int64_t b = 2, s = 16, h = 32, a = 4;
  auto saved = [&](auto build) {
    Graph g;
    const TensorId x = g.input({{"batch", b}, {"seq", s}, {"hidden", h}}, DType::bf16);
    g.begin_group("block.0", GroupKind::transformer_block);
    build(g, x);
    g.end_group();
    return profile_graph(g, kPaper).layers[0].saved_bytes;
  };
  const std::int64_t sbh = s * b * h;
  // The attention sub-block keeps its input (the layernorm output) among its 11sbh.
  REQUIRE(saved([&](Graph& g, TensorId x) {
            (void)multi_head_attention(g, x, {.heads = a, .dropout = 0.1});
          }) == 11 * sbh + 5 * a * s * s * b);
  REQUIRE(saved([&](Graph& g, TensorId x) { (void)mlp(g, x, {.dropout = 0.1}); }) == 19 * sbh);
  REQUIRE(saved([&](Graph& g, TensorId x) { (void)layer_norm(g, layer_norm(g, x)); }) == 4 * sbh);
  // Without dropout the masks (as²b + sbh + sbh) and the dropout output (2as²b) go away.
  REQUIRE(saved([&](Graph& g, TensorId x) {
            (void)multi_head_attention(g, x, {.heads = a, .dropout = 0.0});
          }) == 10 * sbh + 2 * a * s * s * b);
  // Fused attention keeps Q, K, V, its output and the fp32 logsumexp: no s² term.
  REQUIRE(saved([&](Graph& g, TensorId x) {
            (void)multi_head_attention(g, x,
                                       {.heads = a, .kind = AttentionKind::fused, .dropout = 0.1});
          }) == 2 * sbh + 6 * sbh + 2 * sbh + sbh + a * s * b * 4);
  // Counting layernorm statistics adds fp32 mean and rstd per row: 2 · 4 bytes · s b.
  ProfileOptions counted = kPaper;
  counted.layernorm_stats = LayerNormStats::counted;
  const GptConfig c = *find_model("gpt2-124m");
  REQUIRE(profile_gpt(c, counted).memory.activation_bytes_per_layer ==
          korthikanti_activations(c, 1) + 2 * (2 * 4 * c.seq));
}

TEST_CASE("model states: ZeRO §3.1, 16 bytes per parameter, 7.5B parameters -> 120 GB",
          "[profile][formula]") {
  REQUIRE(model_state_bytes(7'500'000'000, Precision::mixed_bf16) == 120'000'000'000);
  REQUIRE(model_state_bytes(7'500'000'000, Precision::fp32) == 120'000'000'000);
  const ModelProfile p = profile_gpt(*find_model("megatron-7.5b"), kPaper);
  REQUIRE(p.memory.params_bytes == 2 * p.params);
  REQUIRE(p.memory.grads_bytes == 2 * p.params);
  REQUIRE(p.memory.optimizer_bytes == 12 * p.params);
  const std::int64_t states =
      p.memory.params_bytes + p.memory.grads_bytes + p.memory.optimizer_bytes;
  REQUIRE(states == 16 * p.params);
  REQUIRE(std::abs(static_cast<double>(states) / 120e9 - 1.0) < 0.01);  // 7.47B parameters
}

TEST_CASE("configs: presets found by name, bad configs get one clear message",
          "[profile][config]") {
  STATIC_REQUIRE(find_model("gpt3-175b")->hidden == 12288);
  STATIC_REQUIRE(!find_model("gpt5"));
  GptConfig c = *find_model("gpt2-124m");
  c.heads = 7;
  REQUIRE(check_config(c).value() ==
          "model 'gpt2-124m': heads (7) must divide hidden (768); hidden / heads is the head size");
  c.heads = 12;
  c.layers = 0;
  REQUIRE(check_config(c).value() ==
          "model 'gpt2-124m': layers is 0; it must be a positive integer");
  REQUIRE_THROWS_WITH(profile_gpt(c, {}), Catch::Contains("layers is 0"));
  c.layers = 1;
  REQUIRE_THROWS_WITH(profile_gpt(c, {.batch = 0}),
                      Catch::Contains("batch size must be a positive integer"));
}
