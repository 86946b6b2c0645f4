// A GPT-2 124M training step on one GPU (batch 8 x 1024 tokens, fused attention, dropout 0.1,
// AdamW), through carto's Trainer on the CUDA backend, in mixed bf16 (bf16 activations, gradients
// and compute copies, fp32 masters; gradients reduced in bf16) and in fp32: tokens/s and model FLOP
// utilization (MFU), printed beside the step time and peak memory the cost model predicts for the
// same plan on hardware::h200() (pred_s, meas/pred, peak/pred), and the device's own view of the
// memory (device_GB: cudaMemGetInfo's used growth; reserved_GB: the caching allocator's blocks).
//
// Ceilings measured in the same run: BM_Gemm runs one large GEMM through the backend's cuBLASLt
// path (bf16 8192^3 with fp32 accumulation, and fp32 4096^3). MFU is the step's model FLOPs
// (forward + backward from the symbolic profiler, recompute excluded) per second over the GEMM
// rate of the step's compute dtype: the bf16 GEMM for mixed bf16, as MFU is usually quoted.
#include <algorithm>
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/spec/text.hpp>
#include <cstdint>
#include <cuda/loopback_comm.hpp>
#include <map>
#include <random>
#include <string>

#include "cuda_bench.hpp"
#include "runtime/executor_cases.hpp"

namespace {

using namespace carto;

constexpr std::int64_t kBatch = 8;
const GptConfig& gpt2() { return kModelPresets[0]; }  // gpt2-124m

ProfileOptions options(Precision p) {
  return {.batch = kBatch, .precision = p, .attention = AttentionKind::fused, .dropout = 0.1};
}

// One large GEMM through the backend: best FLOP/s of a few calls (measured once per dtype).
double gemm_rate(DType dt) {
  static std::map<DType, double> rates;
  if (const auto it = rates.find(dt); it != rates.end()) return it->second;
  const std::int64_t n = dt == DType::bf16 ? 8192 : 4096;
  const TensorShape sq{{"m", n}, {"n", n}};
  Buffer a = bench::backend().allocate(sq, dt, MemoryCategory::activations);
  Buffer b = bench::backend().allocate(sq, dt, MemoryCategory::activations);
  Buffer c = bench::backend().allocate(sq, dt, MemoryCategory::activations);
  bench::backend().fill_normal(a.view(sq, dt), 1.0f, {.seed = 1, .id = 1}, {});
  bench::backend().fill_normal(b.view(sq, dt), 1.0f, {.seed = 1, .id = 2}, {});
  bench::EventTimer timer(bench::backend().stream());
  double best = 1e30;
  for (int i = 0; i < 6; ++i) {
    timer.start();
    bench::backend().gemm(a.view(sq, dt), b.view(sq, dt), c.view(sq, dt), {});
    const double t = timer.stop();
    if (i > 0) best = std::min(best, t);
  }
  const double rate =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / best;
  rates[dt] = rate;
  return rate;
}

void BM_Gemm(benchmark::State& state) {
  const DType dt = state.range(0) == 0 ? DType::fp32 : DType::bf16;
  const std::int64_t n = dt == DType::bf16 ? 8192 : 4096;
  const TensorShape sq{{"m", n}, {"n", n}};
  Buffer a = bench::backend().allocate(sq, dt, MemoryCategory::activations);
  Buffer b = bench::backend().allocate(sq, dt, MemoryCategory::activations);
  Buffer c = bench::backend().allocate(sq, dt, MemoryCategory::activations);
  bench::backend().fill_normal(a.view(sq, dt), 1.0f, {.seed = 1, .id = 1}, {});
  bench::backend().fill_normal(b.view(sq, dt), 1.0f, {.seed = 1, .id = 2}, {});
  bench::time_iterations(
      state, [&] { bench::backend().gemm(a.view(sq, dt), b.view(sq, dt), c.view(sq, dt), {}); });
  state.SetLabel(std::string(to_string_view(dt)) + " " + std::to_string(n) + "^3");
  const double flops =
      2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n);
  bench::set_rate(state, "TFLOP/s", flops * 1e-12);
  // Against the datasheet peak the cost model prices (hardware::h200(), before its efficiency).
  const PeakFlops peak = hardware::h200().peak_flops;
  bench::set_rate(state, "of_peak", flops / (dt == DType::bf16 ? peak.bf16 : peak.fp32));
}

TokenBatch random_tokens(std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(gpt2().vocab) - 1);
  TokenBatch b{.batch = kBatch, .seq = gpt2().seq};
  for (std::int64_t i = 0; i < kBatch * gpt2().seq; ++i) {
    b.ids.push_back(token(gen));
    b.targets.push_back(token(gen));
  }
  return b;
}

void BM_Gpt2Step(benchmark::State& state) {
  // Arg 1: mixed bf16 (the Trainer runs the plan's precision, gradients reduced in bf16); 0: fp32.
  const Precision precision = state.range(0) == 1 ? Precision::mixed_bf16 : Precision::fp32;
  const bool mixed = precision == Precision::mixed_bf16;
  const HardwareProfile hw = hardware::h200();
  const Graph g = build_gpt(gpt2(), options(precision));
  const DeviceMesh one = parse_mesh("1");
  Plan plan = testing::make_plan(g, one, testing::replicated_strategies(g, one));
  if (mixed) plan = testing::mixed(plan);
  const DpOptions priced{.precision = precision, .dropout_masks = DropoutMasks::regenerated};
  const PointCost pred =
      evaluate_point(g, one, hw, priced, plan.strategy, plan_checkpoints(g, plan));
  const ModelProfile profile = profile_graph(g, options(precision));
  const double model_flops = static_cast<double>(profile.flops.forward + profile.flops.backward);
  const double ceiling = gemm_rate(mixed ? DType::bf16 : DType::fp32);

  cuda::CudaBackend& backend = bench::backend();
  backend.synchronize();
  const cuda::DeviceMemoryInfo before = cuda::device_memory_info(backend.device());
  const std::size_t reserved_before = backend.caching_allocator().reserved_bytes();
  cuda::LoopbackWorld world(1, backend.device());
  auto comm = world.communicator(0, backend.stream());
  MeshComms comms(*comm, one);
  Trainer trainer(g, plan, backend, comms, hw, {.seed = 5});
  const TokenBatch batch = random_tokens(1);
  for (int i = 0; i < 2; ++i) trainer.step(batch);  // warm-up: allocator caches, GEMM plans
  trainer.memory().reset_peak();
  bench::EventTimer timer(backend.stream());
  double seconds = 0;
  for (auto _ : state) {
    timer.start();
    const double loss = trainer.step(batch);
    const double t = timer.stop();
    benchmark::DoNotOptimize(loss);
    state.SetIterationTime(t);
    seconds += t;
  }
  const double per_step =
      seconds / static_cast<double>(std::max<std::int64_t>(state.iterations(), 1));
  const double tokens = static_cast<double>(kBatch * gpt2().seq);
  state.SetLabel(std::string(to_string_view(precision)));
  bench::set_rate(state, "tokens/s", tokens);
  // MFU against the GEMM rate of the step's compute dtype, measured above.
  state.counters["MFU"] = model_flops / per_step / ceiling;
  state.counters["pred_s"] = pred.time_s;
  state.counters["meas/pred"] = per_step / pred.time_s;
  state.counters["peak_GB"] = static_cast<double>(trainer.memory().peak_bytes()) * 1e-9;
  state.counters["peak/pred"] =
      static_cast<double>(trainer.memory().peak_bytes()) / static_cast<double>(pred.peak_bytes);
  // Beside the tracker's peak, what the device reports: the growth of its used memory
  // (cudaMemGetInfo) and of the caching allocator's blocks over this run (the shared backend's
  // cache may already hold blocks from an earlier benchmark; they are not counted again).
  backend.synchronize();
  const cuda::DeviceMemoryInfo after = cuda::device_memory_info(backend.device());
  state.counters["device_GB"] =
      (static_cast<double>(before.free_bytes) - static_cast<double>(after.free_bytes)) * 1e-9;
  state.counters["reserved_GB"] =
      (static_cast<double>(backend.caching_allocator().reserved_bytes()) -
       static_cast<double>(reserved_before)) *
      1e-9;
}

BENCHMARK(BM_Gemm)->Arg(1)->Arg(0)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Gpt2Step)
    ->Arg(1)
    ->Arg(0)
    ->Iterations(5)
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

}  // namespace

CARTO_CUDA_BENCHMARK_MAIN();
