// megatron_vs_search — a Megatron-LM-style tensor-parallel plan pinned by hand beside the plan the
// search finds, for GPT-2 350M on 8 H100s of one node, global batch 32, under 40 GiB per device.
//
// The Megatron plan is the search restricted by pins (search/space.hpp: an op name pattern and the
// output spec it must produce) on the mesh dp=2 x tp=4 at ZeRO stage 0: the QKV and first MLP
// linears column-parallel (output split over tp), attention split by heads over tp, the attention
// projection and second MLP linear row-parallel (output a Partial sum over tp, all-reduced), the
// batch over dp. The search fills in every other op. The free search tries every mesh of 8
// devices of 1 or 2 axes, every ZeRO stage and checkpointing; the pinned plan lies in its space, so
// the searched plan is never slower under the same budget (the program checks that and fails
// otherwise).
//
//   build/examples/megatron_vs_search
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

namespace {

void print(const char* who, const carto::Plan& p) {
  std::printf("%-22s mesh %-14s ZeRO %d  %lld micro-batch(es)  step %7.1f ms  peak %s\n", who,
              carto::to_string(p.mesh).c_str(), p.zero_stage,
              static_cast<long long>(p.micro_batches), p.step_time_s * 1e3,
              carto::format_bytes(p.peak_memory_bytes).c_str());
}

}  // namespace

int main() {
  using namespace carto;
  try {
    const GptConfig gpt = *find_model("gpt2-350m");
    constexpr std::int64_t kDevices = 8, kBatch = 32;
    const HardwareProfile hw = find_hardware_profile("h100");  // one node of 8, NVLink
    auto make_graph = [&](std::int64_t micro_batch) {
      return build_gpt(gpt, {.batch = micro_batch, .precision = Precision::mixed_bf16});
    };
    const std::int64_t budget = parse_bytes("40GiB");

    SearchOptions megatron{.precision = Precision::mixed_bf16, .memory_budget = budget};
    megatron.meshes = {parse_mesh("dp=2,tp=4")};
    megatron.zero_stages = {0};
    megatron.checkpoint = CheckpointChoice::none;
    megatron.pins = {
        parse_pin("block.*.einsum0=S(dp),R,S(tp)"),    // QKV: column-parallel
        parse_pin("block.*.einsum1=S(dp),S(tp),R,R"),  // scores: heads over tp
        parse_pin("block.*.einsum2=S(dp),S(tp),R,R"),  // context: heads over tp
        parse_pin("block.*.einsum3=S(dp),R,R|P(tp)"),  // projection: row-parallel
        parse_pin("block.*.einsum4=S(dp),R,S(tp)"),    // MLP up: column-parallel
        parse_pin("block.*.einsum5=S(dp),R,R|P(tp)"),  // MLP down: row-parallel
    };
    const Plan pinned = search(make_graph, gpt.name, kBatch, kDevices, hw, megatron);

    // Every mesh of 1 or 2 axes (8, 2x4, 4x2, ...; .max_mesh_axes = 3 adds 2x2x2: slower).
    SearchOptions free{
        .precision = Precision::mixed_bf16, .memory_budget = budget, .max_mesh_axes = 2};
    const Plan searched = search(make_graph, gpt.name, kBatch, kDevices, hw, free);

    std::printf("GPT-2 350M, global batch %lld, %lld x %s, budget %s per device\n",
                static_cast<long long>(kBatch), static_cast<long long>(kDevices), hw.name.c_str(),
                format_bytes(budget).c_str());
    print("Megatron (pinned)", pinned);
    print("searched", searched);
    std::printf("searched / Megatron: step time %.3f, peak memory %.3f\n",
                searched.step_time_s / pinned.step_time_s,
                static_cast<double>(searched.peak_memory_bytes) /
                    static_cast<double>(pinned.peak_memory_bytes));
    if (searched.step_time_s > pinned.step_time_s * (1 + 1e-9)) {
      std::cerr << "megatron_vs_search: the searched plan is slower than a plan in its own space\n";
      return 1;
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "megatron_vs_search: " << e.what() << "\n";
    return 2;
  }
}
