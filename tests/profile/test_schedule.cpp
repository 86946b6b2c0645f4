// The training-step schedule: liveness, the peak (not a sum), checkpointing.
#include <carto/layers.hpp>
#include <carto/profile.hpp>
#include <catch2/catch.hpp>

using namespace carto;

namespace {
using X = Tensor<DType::fp32, Shape<Dim<"batch", 4>, Dim<"hidden", 8>>>;
using Y = Tensor<DType::fp32, Shape<Dim<"batch", 4>, Dim<"ffn", 16>>>;
using TinyMlp = Sequential<Linear<X, Dim<"ffn", 16>, Bias::none>, Gelu<Y>,
                           Linear<Y, Dim<"hidden", 8>, Bias::none>>;
}  // namespace

TEST_CASE("hand-computed peak of a tiny MLP (fp32, AdamW)", "[profile][schedule]") {
  // X (4, 8), W1 (8, 16), Y = X·W1 (4, 16), Z = gelu(Y), W2 (16, 8), O = Z·W2 (4, 8); fp32.
  // Parameters 256: 1024 B, optimizer m and v 2048 B, gradients up to 1024 B.
  // Forward: X (128 B, saved by matmul 1), Y (256, saved by gelu), Z (256, saved by matmul 2),
  // O (128, unsaved: freed at once). Backward of matmul 2: dO (128) + dW2 (512) + dZ (256) live
  // with X, Y, Z: 1024 + 2048 + 512 + 640 + 384 = 4608 B, the peak. Then Z, dO freed; gelu's
  // backward: dY (256) with dZ; and so on down to the optimizer step at 1024 + 1024 + 2048.
  const ModelProfile p = TinyMlp{}.profile({.precision = Precision::fp32});
  REQUIRE(p.params == 256);
  REQUIRE(p.memory.peak_bytes == 4608);
  REQUIRE(p.memory.peak == MemoryBytes{.parameters = 1024,
                                       .gradients = 512,
                                       .optimizer = 2048,
                                       .activations = 640,
                                       .temporaries = 384});
  const TimelineEvent& peak = p.timeline[p.memory.peak_event];
  REQUIRE(peak.phase == Phase::backward);
  REQUIRE(peak.op == OpId{2});
  // forward 3 events, backward 3, optimizer 1.
  REQUIRE(p.timeline.size() == 7);
  REQUIRE(p.timeline[0].live.total() == 3072 + 128 + 256);
  REQUIRE(p.timeline[2].live.total() == 3072 + 128 + 256 + 256 + 128);
  REQUIRE(p.timeline.back().live ==
          MemoryBytes{.parameters = 1024, .gradients = 1024, .optimizer = 2048});
  // matmul FLOPs: 2·4·8·16 per matmul, three times per step.
  REQUIRE(p.flops.matmul_step == 3 * 2 * (2 * 4 * 8 * 16));
}

TEST_CASE("GPT step: the peak covers the model states, everything is freed by the optimizer step",
          "[profile][schedule]") {
  for (const char* name : {"gpt2-124m", "gpt2-350m"}) {
    for (AttentionKind attention : {AttentionKind::materialized, AttentionKind::fused}) {
      for (Recompute recompute : {Recompute::none, Recompute::full}) {
        INFO(name << " " << to_string_view(attention) << " " << to_string_view(recompute));
        const ModelProfile p = profile_gpt(
            *find_model(name), {.batch = 2, .attention = attention, .recompute = recompute});
        const std::int64_t states =
            p.memory.params_bytes + p.memory.grads_bytes + p.memory.optimizer_bytes;
        REQUIRE(p.memory.peak_bytes >= states);
        REQUIRE(p.memory.peak_bytes == p.memory.peak.total());
        REQUIRE(p.timeline.back().phase == Phase::optimizer);
        REQUIRE(p.timeline.back().live.total() == states);
        // Forward events, backward events, recomputed block ops, one optimizer step.
        const std::size_t ops = p.timeline.size() - 1;
        REQUIRE(ops >= 2 * 100);
        // The peak is a maximum over the timeline, not a sum of category maxima.
        std::int64_t max_total = 0;
        for (const TimelineEvent& e : p.timeline) max_total = std::max(max_total, e.live.total());
        REQUIRE(max_total == p.memory.peak_bytes);
      }
    }
  }
}

TEST_CASE(
    "full recomputation lowers the peak where activations dominate, and adds the block forwards",
    "[profile][schedule]") {
  const GptConfig c = *find_model("gpt2-124m");
  const ModelProfile none = profile_gpt(c, {.batch = 8});
  const ModelProfile full = profile_gpt(c, {.batch = 8, .recompute = Recompute::full});
  REQUIRE(none.memory.activation_bytes >
          2 * (none.memory.params_bytes + none.memory.grads_bytes + none.memory.optimizer_bytes));
  REQUIRE(full.memory.peak_bytes < none.memory.peak_bytes);
  REQUIRE(full.memory.activation_bytes < none.memory.activation_bytes);
  std::int64_t block_forward = 0;
  for (const LayerProfile& l : none.layers) {
    if (l.kind == GroupKind::transformer_block) block_forward += l.flops_forward;
  }
  REQUIRE(full.flops.recompute == block_forward);
  REQUIRE(full.flops.step == none.flops.step + block_forward);
  // Recomputed activations live only while their block's backward runs: the saved bytes in any
  // backward event never exceed the kept block inputs plus one block's activations and the
  // layers outside the blocks.
  std::int64_t max_saved = 0;
  for (const TimelineEvent& e : full.timeline) max_saved = std::max(max_saved, e.live.activations);
  REQUIRE(max_saved <= full.memory.activation_bytes + none.memory.activation_bytes_per_layer);
}

TEST_CASE("per-layer entries: names, parameters and FLOPs add up to the totals",
          "[profile][schedule]") {
  const GptConfig c = *find_model("gpt2-124m");
  const ModelProfile p = profile_gpt(c, {});
  REQUIRE(p.layers.size() == 12 + 4);
  REQUIRE(p.layers[0].name == "embedding");
  REQUIRE(p.layers[1].name == "block.0");
  REQUIRE(p.layers[12].name == "block.11");
  REQUIRE(p.layers.back().name == "cross_entropy");
  std::int64_t params = 0, fwd = 0, bwd = 0;
  for (const LayerProfile& l : p.layers) {
    params += l.params;
    fwd += l.flops_forward;
    bwd += l.flops_backward();
  }
  REQUIRE(params == p.params);
  REQUIRE(fwd == p.flops.forward);
  REQUIRE(bwd == p.flops.backward);
  // Block parameters 12h² + 13h (weights, biases, two layernorms).
  REQUIRE(p.layers[1].params == 12 * 768 * 768 + 13 * 768);
  // The tied LM head adds no parameter; its matmul is 2BshV forward.
  REQUIRE(p.layers[14].params == 0);
  REQUIRE(p.layers[14].matmul_flops_forward == std::int64_t{2} * 1024 * 768 * 50257);
}
