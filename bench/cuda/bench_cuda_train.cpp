// A GPT-2 124M training step on one GPU (batch 8 x 1024 tokens, fused attention, dropout 0.1,
// AdamW), through carto's Trainer on the CUDA backend: tokens/s and model FLOP utilization (MFU),
// printed beside the step time the cost model predicts for the same plan on hardware::h200().
//
// Ceilings measured in the same run: BM_Gemm runs one large GEMM through the backend's cuBLASLt
// path (bf16 8192^3 with fp32 accumulation, and fp32 4096^3); MFU is the step's model FLOPs
// (forward + backward from the symbolic profiler, recompute excluded) per second over the bf16
// GEMM rate, as MFU is usually quoted for mixed precision; of_fp32_gemm sets the same rate against
// the fp32 GEMM.
//
// Precision: the graph is built for mixed bf16 (the profiler prices it so: pred_s), and the
// executor runs it as it supports it; until its mixed-precision path lands it computes in fp32,
// which pred_fp32_s prices (the same plan on an fp32 graph). meas/pred compares against the
// prediction of what ran. peak/pred sets the memory tracker's peak against the schedule model's.
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

// True while the executor computes fp32 whatever the graph's precision (executor.hpp's note).
constexpr bool kExecutorRunsFp32 = true;

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
  const HardwareProfile hw = hardware::h200();
  const Graph g = build_gpt(gpt2(), options(Precision::mixed_bf16));
  const Graph g32 = build_gpt(gpt2(), options(Precision::fp32));
  const DeviceMesh one = parse_mesh("1");
  const Plan plan = testing::make_plan(g, one, testing::replicated_strategies(g, one));
  const DpOptions priced{.precision = Precision::mixed_bf16,
                         .dropout_masks = DropoutMasks::regenerated};
  DpOptions priced32 = priced;
  priced32.precision = Precision::fp32;
  const PointCost pred =
      evaluate_point(g, one, hw, priced, plan.strategy, plan_checkpoints(g, plan));
  const PointCost pred32 =
      evaluate_point(g32, one, hw, priced32, plan.strategy, plan_checkpoints(g32, plan));
  const ModelProfile profile = profile_graph(g, options(Precision::mixed_bf16));
  const double model_flops = static_cast<double>(profile.flops.forward + profile.flops.backward);
  const double bf16_rate = gemm_rate(DType::bf16);
  const double fp32_rate = gemm_rate(DType::fp32);

  cuda::CudaBackend& backend = bench::backend();
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
  state.SetLabel(kExecutorRunsFp32 ? "graph mixed_bf16, executor computes fp32" : "mixed_bf16");
  bench::set_rate(state, "tokens/s", tokens);
  state.counters["MFU"] = model_flops / per_step / bf16_rate;
  state.counters["of_fp32_gemm"] = model_flops / per_step / fp32_rate;
  state.counters["pred_s"] = pred.time_s;
  state.counters["pred_fp32_s"] = pred32.time_s;
  state.counters["meas/pred"] = per_step / (kExecutorRunsFp32 ? pred32.time_s : pred.time_s);
  const PointCost& mem = kExecutorRunsFp32 ? pred32 : pred;
  state.counters["peak_GB"] = static_cast<double>(trainer.memory().peak_bytes()) * 1e-9;
  state.counters["peak/pred"] =
      static_cast<double>(trainer.memory().peak_bytes()) / static_cast<double>(mem.peak_bytes);
}

BENCHMARK(BM_Gemm)->Arg(1)->Arg(0)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Gpt2Step)->Iterations(5)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

CARTO_CUDA_BENCHMARK_MAIN();
