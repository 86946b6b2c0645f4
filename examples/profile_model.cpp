// profile_model — the symbolic profiler from a user's program: a compile-time check on GPT-2 124M
// and a run-time profile of a model described by its sizes. No tensor is allocated.
#include <carto/profile.hpp>
#include <iostream>

using namespace carto;

// Compile time: the published figures of GPT-2 124M, checked before anything runs.
constexpr GptConfig kGpt2 = *find_model("gpt2-124m");
static_assert(profile_gpt(kGpt2, {.batch = 1}).params == 124'439'808);
static_assert(profile_gpt(kGpt2, {.batch = 1}).flops.matmul_step == 874'944'921'600);

int main() {
  try {
    // Run time: the same functions on a config that could come from a file or flags.
    const GptConfig mine{
        .name = "mine", .layers = 24, .hidden = 2048, .heads = 16, .vocab = 32000, .seq = 4096};
    for (const Recompute recompute : {Recompute::none, Recompute::full}) {
      const ModelProfile p = profile_gpt(mine, {.batch = 4, .recompute = recompute});
      std::cout << "recompute " << to_string_view(recompute) << ": " << p.params << " parameters, "
                << p.flops.step << " FLOPs per step, peak " << p.memory.peak_bytes
                << " bytes (saved activations at the peak: " << p.memory.peak.activations << ")\n";
    }
  } catch (const Error& e) {
    std::cerr << e.what() << "\n";
    return 2;
  }
  return 0;
}
