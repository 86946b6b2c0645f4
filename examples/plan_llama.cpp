// plan_llama — Llama 3 8B from its preset: the parameter count checked at compile time against
// the closed form written below, the profile of one training step, and a plan for its block
// (RMSNorm, rotary grouped-query attention with 32 query heads over 8 key/value heads, SwiGLU) on
// one node of 8 H100s, on the mesh dp=2 x tp=4 under 40 GiB per device.
//
// The plan is for a 2-block model of Llama 3 8B's sizes (the search cost grows with the blocks;
// the blocks are identical, so the strategies it finds for one are those of all 32), with the
// sequence at 2048 and a global batch of 16. carto-plan plans the whole model:
//   carto-plan plan --model llama3-8b --devices 64 --gpus-per-node 8 --hardware h100 ...
//
//   build/examples/plan_llama
#include <carto/cost/hardware.hpp>
#include <carto/layers/llama.hpp>
#include <carto/profile.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <exception>
#include <iostream>

using namespace carto;

constexpr LlamaConfig kLlama3_8b = *find_llama("llama3-8b");

// Parameters, from the layers' math (llama.hpp): per block two RMSNorm γ (2h), Q and O (2h²), K
// and V (2·h·n·d with n = 8 key/value heads of d = h / heads = 128), gate, up and down (3·h·f);
// then the untied embedding and LM head (2·V·h) and the final RMSNorm (h). With h = 4096,
// f = 14336, V = 128256, 32 blocks: 8,030,261,248 (Llama 3's 8.03 B).
constexpr std::int64_t kH = 4096, kF = 14336, kV = 128256, kKv = 8 * 128;
constexpr std::int64_t kParams =
    32 * (2 * kH * kH + 2 * kH * kKv + 3 * kH * kF + 2 * kH) + 2 * kV * kH + kH;
static_assert(kParams == 8'030'261'248);
static_assert(build_llama(kLlama3_8b, {.batch = 1}).num_params() == kParams,
              "build_llama's llama3-8b does not have Llama 3 8B's 8,030,261,248 parameters");

int main() {
  try {
    const ModelProfile whole = profile_llama(kLlama3_8b, {.batch = 1});
    std::cout << "llama3-8b: " << whole.params << " parameters, " << whole.flops.step
              << " FLOPs per sequence of " << kLlama3_8b.seq << " tokens\n";

    LlamaConfig two = kLlama3_8b;
    two.layers = 2;
    two.seq = 2048;
    auto make_graph = [&](std::int64_t micro_batch) {
      return build_llama(two, {.batch = micro_batch,
                               .precision = Precision::mixed_bf16,
                               .attention = AttentionKind::fused});
    };
    const HardwareProfile hw = find_hardware_profile("h100");  // one node of 8, NVLink
    SearchOptions options{.precision = Precision::mixed_bf16,
                          .memory_budget = parse_bytes("40GiB"),
                          .tolerance = 0.05};
    options.meshes = {parse_mesh("dp=2,tp=4")};
    options.zero_stages = {1};
    const Plan plan = search(make_graph, "llama3-8b (2 blocks, seq 2048)", 16, 8, hw, options);
    std::cout << plan << "\n";
    std::cout << "predicted step " << plan.step_time_s * 1e3 << " ms, peak "
              << format_bytes(plan.peak_memory_bytes) << " per device (budget 40 GiB)\n";
    if (plan.peak_memory_bytes > parse_bytes("40GiB")) {
      std::cerr << "plan_llama: the plan does not fit its budget\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "plan_llama: " << e.what() << "\n";
    return 2;
  }
}
