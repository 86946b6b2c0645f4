// README "Profiling a model at compile time": GPT-2 124M's published figures checked by the
// compiler, and a run-time profile of a model read from anywhere.
#include <carto/profile.hpp>
#include <iostream>
using namespace carto;

// FLOPs and memory of one training step, with no tensor allocated: a static_assert can check them.
constexpr GptConfig gpt2 = *find_model("gpt2-124m");
static_assert(profile_gpt(gpt2, {.batch = 1}).params == 124'439'808);
static_assert(profile_gpt(gpt2, {.batch = 1}).flops.matmul_step == 874'944'921'600);

int main() {
  // The same functions at run time, on a config read from anywhere.
  const ModelProfile p = profile_gpt(
      {.name = "mine", .layers = 24, .hidden = 2048, .heads = 16, .vocab = 32000, .seq = 4096},
      {.batch = 4, .recompute = Recompute::full});
  std::cout << p.memory.peak_bytes << " bytes at the peak\n";
}
