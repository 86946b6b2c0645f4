// Training steps of the demo model (examples/train_gpt's defaults: a char-level GPT of 2 layers,
// hidden 64, 4 heads, context 64, vocabulary 84, 16 sequences per step, no dropout, fp32) on CPU
// thread ranks, one benchmark per plan: 1 rank replicated; 2 ranks data-parallel; 4 ranks
// Megatron (dp=2, tp=2) and its ZeRO-1 and checkpointed variants; 4 ranks the plan the DP search
// picks on a 2x2 mesh. Each prints beside the measured step time the time the cost model predicts
// for the plan under hardware::cpu() (this machine's calibrated profile, bench/bench_calibrate),
// the ratio measured / predicted, and how much of the step went into GEMMs and at what rate,
// against OpenBLAS's own rate on the same GEMMs measured in the same run.
//
// Timing design. Google Benchmark's loop must run on one thread, and a Trainer step is a
// collective of every rank. A benchmark calls run_threads once; every rank builds its backend,
// communicators and Trainer, runs kWarmupSteps untimed steps, and meets the others at a barrier.
// Rank 0 runs on the calling thread, so it alone drives `for (auto _ : state)`, one Trainer::step
// per iteration; the other ranks run the same number of steps, read from state.max_iterations
// before the threads start (the benchmarks fix it with Iterations, so each runs its set-up once).
// The steps synchronize the ranks (gradient reductions, activation collectives), so rank 0's wall
// time per iteration is the step time of the whole mesh; UseRealTime reports it. Set-up, warm-up
// and thread start are outside the timed loop.
//
// GEMM share. Each rank's backend is a TimedBackend: a Backend that forwards every kernel to a
// cpu::CpuBackend and adds up, per kernel, the wall time and the thread CPU time spent inside it,
// and the FLOPs of gemm (2·m·n·k per batch entry). gemm_share is Σ_ranks GEMM wall seconds /
// Σ_ranks step wall seconds; kernel_share the same for every kernel; the rest of the step is
// communication, waiting for other ranks or for a core, and the executor's host work. Rates are
// per second of thread CPU time, so that a thread the machine preempts inside a GEMM does not
// count as a slow GEMM: gemm_GF/s is the rate inside the steps (per rank, one thread each);
// blas_GF/s is OpenBLAS's rate on exactly the GEMMs of one step of rank 0, each distinct call
// replayed alone through a fresh CPU backend on one thread after the ranks have finished (best of
// five batches) and weighted by how often the step makes it; gemm/blas is their ratio.
// blas_wall_GF/s is the same replay on the threads a lone rank gets, per wall second, each call
// hot in the caches; blas_cold_GF/s times each call once after writing twice the last-level
// cache, as a step mostly meets its operands (a weight was last touched by the previous step's
// optimizer), best of three. A last table puts rank 0's ten costliest GEMM calls, by their wall
// time in the last warm-up step, beside both replays. BM_OpenBlasSgemm adds cblas_sgemm alone at
// the demo's largest GEMM.
//
// Predictions and CPU time. pred_s is the plan's step time under hardware::cpu() (describe_plan,
// DropoutMasks::regenerated as the runtime does); pred_compute_s its compute part, beside
// kernel_cpu_s, the CPU seconds per step a rank spends in kernels. The profile prices every rank
// as if it had a core of its own; pred_shared_s prices the plan again with the compute rate and
// memory bandwidth divided among the ranks that share a core (cpu_shared_by). cpu_busy is the
// mean over ranks of a rank's thread CPU time over its wall time in the timed loop; cpu/pred is
// the busiest rank's CPU seconds per step over pred_s: what the step would take if each rank had
// a core and never waited. After the benchmarks the program prints every plan's figures as
// Markdown tables (the run of median step time with --benchmark_repetitions), and every kernel's
// CPU time per step.
//
// The machine this was written on has 2 cores shared with other builds: its wall-time figures are
// lower bounds on what the runtime does on idle cores (docs/runtime-performance.md).
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <time.h>

#include <algorithm>
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/profile/schedule.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/spec/text.hpp>
#include <chrono>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <span>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "runtime/executor_cases.hpp"
#include "support/megatron_plan.hpp"
#include "timed_backend.hpp"

namespace {

using namespace carto;
using namespace carto::bench;

// examples/train_gpt's defaults; 84 is the vocabulary of its default text (the license texts).
constexpr GptConfig kDemo{
    .name = "char-gpt", .layers = 2, .hidden = 64, .heads = 4, .vocab = 84, .seq = 64};
constexpr std::int64_t kBatch = 16;  // sequences per step, all micro-batches together
constexpr int kWarmupSteps = 2;
constexpr int kTimedSteps = 30;
constexpr int kDistinctBatches = 4;

Graph demo_graph(std::int64_t micro_batch) {
  return build_gpt(kDemo, {.batch = micro_batch, .precision = Precision::fp32, .dropout = 0.0});
}

// GPT-2 small (124M parameters) as the issue measured it: batch 4, sequence 64, fp32, one rank.
constexpr GptConfig kGpt2{
    .name = "gpt2-124m", .layers = 12, .hidden = 768, .heads = 12, .vocab = 50257, .seq = 64};
constexpr std::int64_t kGpt2Batch = 4;
constexpr int kGpt2TimedSteps = 6;

// `batch` windows of seq + 1 random tokens: ids are a window's first seq, targets its last seq
// (next-character prediction, as the demo's batches are made from its text).
TokenBatch random_windows(std::uint32_t seed, const GptConfig& model = kDemo,
                          std::int64_t batch = kBatch) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<std::int32_t> token(0, static_cast<std::int32_t>(model.vocab) - 1);
  TokenBatch out{.batch = batch, .seq = model.seq};
  std::vector<std::int32_t> window(static_cast<std::size_t>(model.seq + 1));
  for (std::int64_t row = 0; row < batch; ++row) {
    for (std::int32_t& t : window) t = token(gen);
    out.ids.insert(out.ids.end(), window.begin(), window.end() - 1);
    out.targets.insert(out.targets.end(), window.begin() + 1, window.end());
  }
  return out;
}

// ---- the plans ---------------------------------------------------------------------------------

struct PlanCase {
  Graph graph;  // one micro-batch
  Plan plan;    // with the predicted step time and its breakdown under hardware::cpu()
  DpOptions options{};
  DpPoint point{};
  std::string note{};
  GptConfig model = kDemo;
  std::int64_t batch = kBatch;  // sequences per step
};

// hardware::cpu() with its compute rate and memory bandwidth divided among the ranks that share
// each core: what a rank gets when `ranks` thread ranks run on `cores` cores (no change when every
// rank has a core). The thread links are left alone: their cost is mostly latency.
HardwareProfile cpu_shared_by(int ranks, unsigned cores) {
  HardwareProfile hw = hardware::cpu();
  const double share = std::min(1.0, static_cast<double>(std::max(1U, cores)) / ranks);
  hw.name = "cpu-shared";
  hw.peak_flops.fp32 *= share;
  hw.peak_flops.bf16 *= share;
  hw.peak_flops.fp16 *= share;
  hw.memory_bandwidth *= share;
  return hw;
}

// The runtime computes in fp32 and draws dropout masks again in backward.
DpOptions runtime_options(int zero_stage = 0) {
  return {.precision = Precision::fp32,
          .dropout_masks = DropoutMasks::regenerated,
          .zero_stage = zero_stage};
}

// A plan from strategy indices, priced by the cost model (describe_plan fills the breakdowns).
PlanCase indexed_case(const DeviceMesh& mesh, std::vector<std::size_t> strategy, int zero_stage,
                      bool checkpoint_blocks, const Graph& g) {
  const DpOptions options = runtime_options(zero_stage);
  DpPoint point{.strategy = std::move(strategy), .checkpointed = {}};
  for (const OpGroup& grp : g.groups())
    point.checkpointed.push_back(checkpoint_blocks && grp.kind == GroupKind::transformer_block);
  PlanCase c{.graph = g, .plan = {}, .options = options, .point = point};
  detail::describe_plan(c.plan, g, mesh, hardware::cpu(), options, point);
  return c;
}

// Data parallelism over every axis of `mesh`: activations (and token ids) split along their first
// (batch) dim, parameters replicated, the plain variant of every op.
std::vector<std::size_t> data_parallel_indices(const Graph& g, const DeviceMesh& mesh) {
  AxisList all;
  for (const MeshAxis& a : mesh.axes()) all.push_back(a.name);
  std::vector<std::size_t> out;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const OpId id{static_cast<std::int32_t>(k)};
    const Op& op = g.op(id);
    std::vector<ShardingSpec> want;
    for (const TensorId t : op.inputs) {
      const TensorInfo& info = g.tensor(t);
      ShardingSpec s;
      for (std::size_t d = 0; d < info.shape.rank(); ++d)
        s.add_dim(d == 0 && info.kind != TensorKind::parameter ? all : AxisList{});
      want.push_back(s);
    }
    const std::vector<Strategy> strategies =
        enumerate_strategies(g, id, mesh, {.precision = Precision::fp32});
    std::size_t chosen = strategies.size();
    for (std::size_t i = 0; i < strategies.size() && chosen == strategies.size(); ++i) {
      const auto& inputs = strategies[i].sharding.inputs;
      bool match =
          strategies[i].sharding.variant == OpVariant::plain && inputs.size() == want.size();
      for (std::size_t j = 0; match && j < want.size(); ++j) match = inputs[j] == want[j];
      if (match) chosen = i;
    }
    if (chosen == strategies.size())
      detail::fail("bench_train: op ", k, " has no data-parallel strategy on mesh ", mesh);
    out.push_back(chosen);
  }
  return out;
}

PlanCase replicated_case() {
  const Graph g = demo_graph(kBatch);
  const DeviceMesh mesh = parse_mesh("1");
  return indexed_case(mesh, testing::replicated_strategies(g, mesh), 0, false, g);
}

PlanCase gpt2_case() {
  const Graph g =
      build_gpt(kGpt2, {.batch = kGpt2Batch, .precision = Precision::fp32, .dropout = 0.0});
  const DeviceMesh mesh = parse_mesh("1");
  PlanCase c = indexed_case(mesh, testing::replicated_strategies(g, mesh), 0, false, g);
  c.model = kGpt2;
  c.batch = kGpt2Batch;
  return c;
}

PlanCase data_parallel_case() {
  const Graph g = demo_graph(kBatch);
  const DeviceMesh mesh = parse_mesh("dp=2");
  return indexed_case(mesh, data_parallel_indices(g, mesh), 0, false, g);
}

PlanCase megatron_case(int zero_stage, bool checkpoint_blocks) {
  const Graph g = demo_graph(kBatch);
  const DeviceMesh mesh = parse_mesh("dp=2,tp=2");
  return indexed_case(
      mesh,
      testing::megatron_strategy_indices(g, mesh, kDemo.hidden, testing::SequenceParallel::off),
      zero_stage, checkpoint_blocks, g);
}

// The fastest point of the DP's frontier on a 2x2 mesh (ZeRO 0, one micro-batch), searched with
// the demo's default pruning tolerance: an exact search of this model on a 2-D mesh takes minutes
// and gigabytes (docs/demo.md).
PlanCase searched_case() {
  constexpr double kTolerance = 0.05;
  const Graph g = demo_graph(kBatch);
  const DeviceMesh mesh = parse_mesh("2x2");
  DpOptions options = runtime_options();
  options.tolerance = kTolerance;
  const auto start = Clock::now();
  const DpResult r = dp_frontier(g, mesh, hardware::cpu(), options);
  if (r.frontier.empty()) detail::fail("bench_train: the search found no plan on mesh ", mesh);
  PlanCase c{.graph = g, .plan = {}, .options = options, .point = r.frontier.front()};
  detail::describe_plan(c.plan, g, mesh, hardware::cpu(), options, c.point);
  c.note = detail::concat("searched in ", seconds_since(start), " s, tolerance ", kTolerance, ", ",
                          r.frontier.size(), " frontier points");
  return c;
}

// ---- the benchmarks ----------------------------------------------------------------------------

struct Row {
  std::string name;
  int ranks = 0;
  double measured_s = 0;          // wall seconds per step
  double predicted_s = 0;         // the cost model's step time under hardware::cpu()
  double predicted_shared_s = 0;  // the same with the cores shared (cpu_shared_by)
  double busiest_cpu_s = 0;       // the busiest rank's thread CPU seconds per step
  double kernel_cpu_s = 0;        // rank mean: CPU seconds per step inside kernels
  double gemm_cpu_s = 0;          // rank mean: CPU seconds per step inside GEMMs
  double gemm_profile_s = 0;      // rank mean: the GEMMs' FLOPs at the profile's fp32 rate
  double predicted_compute_s = 0;
  double gemm_share = 0, kernel_share = 0;  // of the ranks' wall time
  double gemm_rate = 0, blas_rate = 0;      // FLOP per thread CPU second
  double cpu_busy = 0;
  std::map<std::string_view, double> kernel_ms;  // rank mean CPU ms per step, by kernel
  double tokens = 0;                             // per step
  double profile_flops = 0;                      // per step, from the profiler (profile_graph)
  double gemm_wall_rate = 0;              // GEMM FLOP per GEMM wall second (multi-threaded BLAS)
  double blas_wall_rate = 0;              // OpenBLAS alone on the same calls, FLOP per wall second
  double blas_cold_rate = 0;              // the same with the operands out of the caches
  std::map<std::string, GemmCall> calls;  // rank 0's, with its step and alone times
};
std::vector<Row> g_rows;

void BM_TrainStep(benchmark::State& state, const std::string& name,
                  const std::function<PlanCase()>& make_case) {
  std::optional<PlanCase> made;
  try {
    made = make_case();
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }
  const PlanCase& c = *made;
  const Plan& plan = c.plan;
  const int ranks = static_cast<int>(plan.mesh.num_devices());
  const auto steps = static_cast<std::int64_t>(state.max_iterations);
  std::vector<TokenBatch> batches;
  for (int i = 0; i < kDistinctBatches; ++i)
    batches.push_back(random_windows(100U + i, c.model, c.batch));
  std::vector<RankTimes> times(static_cast<std::size_t>(ranks));
  double loss = 0;
  try {
    run_threads(ranks, [&](Communicator& world) {
      RankTimes& mine = times[static_cast<std::size_t>(world.rank())];
      cpu::CpuBackend cpu_backend;
      TimedBackend backend(cpu_backend, mine);
      MeshComms comms(world, plan.mesh);
      // The Executor keeps a reference to the profile: it must outlive the Trainer.
      const HardwareProfile hw = hardware::cpu();
      Trainer trainer(c.graph, plan, backend, comms, hw, {.seed = 1});
      for (int s = 0; s < kWarmupSteps; ++s) {
        backend.record_calls(s == kWarmupSteps - 1);
        trainer.step(batches[static_cast<std::size_t>(s % kDistinctBatches)]);
      }
      backend.record_calls(false);
      backend.reset_times();
      world.barrier().wait();
      const auto start = Clock::now();
      const double cpu_start = thread_cpu_seconds();
      std::int64_t s = 0;
      if (world.rank() == 0) {
        for (auto _ : state) {
          loss = trainer.step(batches[static_cast<std::size_t>(s++ % kDistinctBatches)]);
        }
      } else {
        for (; s < steps; ++s)
          trainer.step(batches[static_cast<std::size_t>(s % kDistinctBatches)]);
      }
      mine.wall_s = seconds_since(start);
      mine.cpu_s = thread_cpu_seconds() - cpu_start;
    });
  } catch (const Error& e) {
    state.SkipWithError(e.what());
    return;
  }

  Row row;
  row.name = name;
  row.ranks = ranks;
  const double n = static_cast<double>(steps);
  const double rank_steps = static_cast<double>(ranks) * n;
  double gemm_s = 0, gemm_cpu_s = 0, gemm_flops = 0, kernel_s = 0, kernel_cpu_s = 0, wall_s = 0,
         cpu_s = 0;
  for (const RankTimes& t : times) {
    gemm_s += t.gemm_s;
    gemm_cpu_s += t.gemm_cpu_s;
    gemm_flops += t.gemm_flops;
    kernel_s += t.gemm_s + t.other_kernel_s;
    kernel_cpu_s += t.gemm_cpu_s + t.other_kernel_cpu_s;
    wall_s += t.wall_s;
    cpu_s += t.cpu_s;
    row.busiest_cpu_s = std::max(row.busiest_cpu_s, t.cpu_s / n);
    for (const auto& [kernel, seconds] : t.kernel_cpu_s)
      row.kernel_ms[kernel] += seconds * 1e3 / (static_cast<double>(ranks) * n);
  }
  row.measured_s = times[0].wall_s / n;
  row.predicted_s = plan.step_time_s;
  {
    Plan shared;
    detail::describe_plan(shared, c.graph, plan.mesh,
                          cpu_shared_by(ranks, std::thread::hardware_concurrency()), c.options,
                          c.point);
    row.predicted_shared_s = shared.step_time_s;
  }
  const auto compute = plan.time_breakdown.find("compute");
  row.predicted_compute_s = compute == plan.time_breakdown.end() ? 0 : compute->second;
  row.kernel_cpu_s = kernel_cpu_s / rank_steps;
  row.gemm_cpu_s = gemm_cpu_s / rank_steps;
  row.gemm_profile_s = gemm_flops / rank_steps / hardware::cpu().peak_flops.fp32;
  row.gemm_share = gemm_s / wall_s;
  row.kernel_share = kernel_s / wall_s;
  row.gemm_rate = gemm_cpu_s > 0 ? gemm_flops / gemm_cpu_s : 0;
  row.blas_rate = replay_gemm_rate(times[0].calls);
  row.cpu_busy = cpu_s / wall_s;

  auto& k = state.counters;
  k["step_s"] = row.measured_s;
  k["pred_s"] = row.predicted_s;
  k["meas/pred"] = row.measured_s / row.predicted_s;
  k["pred_shared_s"] = row.predicted_shared_s;
  k["meas/pred_shared"] = row.measured_s / row.predicted_shared_s;
  k["cpu/pred"] = row.busiest_cpu_s / row.predicted_s;
  row.tokens = static_cast<double>(c.batch * c.model.seq);
  row.profile_flops = static_cast<double>(profile_graph(c.graph, {}).flops.step);
  row.gemm_wall_rate = gemm_s > 0 ? gemm_flops / gemm_s : 0;
  row.blas_wall_rate = replay_gemm_rate(times[0].calls, true);
  row.blas_cold_rate = replay_gemm_rate_cold(times[0].calls);
  row.calls = times[0].calls;
  k["tok/s"] = row.tokens / row.measured_s;
  k["GFLOP/s"] = row.profile_flops / row.measured_s * 1e-9;
  k["gemm_wall_GF/s"] = row.gemm_wall_rate * 1e-9;
  k["blas_wall_GF/s"] = row.blas_wall_rate * 1e-9;
  k["blas_cold_GF/s"] = row.blas_cold_rate * 1e-9;
  k["kernel_cpu_s"] = row.kernel_cpu_s;
  k["pred_compute_s"] = row.predicted_compute_s;
  k["kernel_share"] = row.kernel_share;
  k["gemm_share"] = row.gemm_share;
  k["gemm_GF/s"] = row.gemm_rate * 1e-9;
  k["blas_GF/s"] = row.blas_rate * 1e-9;
  k["gemm/blas"] = row.blas_rate > 0 ? row.gemm_rate / row.blas_rate : 0;
  k["cpu_busy"] = row.cpu_busy;
  k["loss"] = loss;
  const char* timeout = std::getenv("OPENBLAS_THREAD_TIMEOUT");
  state.SetLabel(detail::concat(plan.mesh, " zero ", plan.zero_stage, "; blas threads ",
                                cpu::blas_threads(), "; OPENBLAS_THREAD_TIMEOUT ",
                                timeout == nullptr ? "unset" : timeout, c.note.empty() ? "" : "; ",
                                c.note));
  g_rows.push_back(row);
}

// cblas_sgemm alone on one thread at the demo's largest GEMM on one rank: the MLP's first linear,
// (16·64 tokens, 64) · (64, 256).
void BM_OpenBlasSgemm(benchmark::State& state) {
  openblas_set_num_threads(1);
  const int m = static_cast<int>(state.range(0)), n = static_cast<int>(state.range(1)),
            k = static_cast<int>(state.range(2));
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(m) * k), b(static_cast<std::size_t>(k) * n),
      c(static_cast<std::size_t>(m) * n);
  for (float& x : a) x = dist(gen);
  for (float& x : b) x = dist(gen);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2e-9 * m * n * static_cast<double>(k),
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.counters["profile_GF/s"] = hardware::cpu().peak_flops.fp32 * 1e-9;
}
BENCHMARK(BM_OpenBlasSgemm)
    ->Args({kBatch * kDemo.seq, 4 * kDemo.hidden, kDemo.hidden})
    ->Unit(benchmark::kMicrosecond);

void register_train(const std::string& name, std::function<PlanCase()> make_case,
                    int steps = kTimedSteps) {
  benchmark::RegisterBenchmark(
      ("BM_TrainStep/" + name).c_str(),
      [name, make_case](benchmark::State& state) { BM_TrainStep(state, name, make_case); })
      ->Iterations(steps)
      ->UseRealTime()
      ->Unit(benchmark::kMillisecond);
}

// The figures of every benchmark that ran, as Markdown tables (docs/runtime-performance.md); with
// --benchmark_repetitions, each plan's run of median measured step time.
void print_tables() {
  std::vector<Row> rows;
  for (const Row& r : g_rows) {
    if (std::any_of(rows.begin(), rows.end(), [&](const Row& o) { return o.name == r.name; }))
      continue;
    std::vector<Row> runs;
    for (const Row& o : g_rows)
      if (o.name == r.name) runs.push_back(o);
    std::sort(runs.begin(), runs.end(),
              [](const Row& a, const Row& b) { return a.measured_s < b.measured_s; });
    rows.push_back(runs[(runs.size() - 1) / 2]);
  }
  if (rows.empty()) return;
  std::printf(
      "\nstep time per plan (ms per step; CPU: thread CPU time)\n"
      "| plan | ranks | measured | predicted | measured/predicted | predicted, cores shared | "
      "measured/that | busiest rank CPU | CPU/predicted | CPU busy | tokens/s |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %d | %.1f | %.1f | %.2f | %.1f | %.2f | %.1f | %.2f | %.2f | %.0f |\n",
                r.name.c_str(), r.ranks, r.measured_s * 1e3, r.predicted_s * 1e3,
                r.measured_s / r.predicted_s, r.predicted_shared_s * 1e3,
                r.measured_s / r.predicted_shared_s, r.busiest_cpu_s * 1e3,
                r.busiest_cpu_s / r.predicted_s, r.cpu_busy, r.tokens / r.measured_s);
  }
  std::printf(
      "\nthroughput and the GEMMs' share (wall time; GEMMs use the rank's threads, %d here)\n"
      "| plan | s/step | GFLOP/s (profiler FLOPs / step time) | GEMM share of the step | GEMM "
      "GFLOP/s in steps | OpenBLAS alone, same calls, same run | ratio | OpenBLAS alone, operands "
      "out of the caches | ratio |\n"
      "|---|---|---|---|---|---|---|---|---|\n",
      cpu::blas_threads());
  for (const Row& r : rows) {
    std::printf(
        "| %s | %.3f | %.1f | %.2f | %.1f | %.1f | %.2f | %.1f | %.2f |\n", r.name.c_str(),
        r.measured_s, r.profile_flops / r.measured_s * 1e-9, r.gemm_share, r.gemm_wall_rate * 1e-9,
        r.blas_wall_rate * 1e-9, r.blas_wall_rate > 0 ? r.gemm_wall_rate / r.blas_wall_rate : 0,
        r.blas_cold_rate * 1e-9, r.blas_cold_rate > 0 ? r.gemm_wall_rate / r.blas_cold_rate : 0);
  }
  std::printf(
      "The GPT-2 124M row's only same-run baseline here is the OpenBLAS column. Against a "
      "plain-C CPU trainer of the same model (llm.c's train_gpt2.c, not shipped), run alternately "
      "with this benchmark: docs/runtime-performance.md (goal: 3x its speed, GEMMs >= 85%% of "
      "the step).\n");
  std::printf(
      "\nwhere a rank's time goes (ms per step, rank mean; GFLOP/s per thread CPU second)\n"
      "| plan | kernels CPU | predicted compute | GEMM CPU | GEMM at profile rate | GEMM share "
      "of wall | kernel share of wall | GEMM GFLOP/s in steps | OpenBLAS alone | ratio |\n"
      "|---|---|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::printf("| %s | %.1f | %.1f | %.1f | %.1f | %.2f | %.2f | %.1f | %.1f | %.2f |\n",
                r.name.c_str(), r.kernel_cpu_s * 1e3, r.predicted_compute_s * 1e3,
                r.gemm_cpu_s * 1e3, r.gemm_profile_s * 1e3, r.gemm_share, r.kernel_share,
                r.gemm_rate * 1e-9, r.blas_rate * 1e-9,
                r.blas_rate > 0 ? r.gemm_rate / r.blas_rate : 0);
  }
  std::printf("\nkernels by CPU time (ms per step, rank mean; those over 0.1 ms)\n");
  for (const Row& r : rows) {
    std::vector<std::pair<double, std::string_view>> by_time;
    for (const auto& [kernel, ms] : r.kernel_ms) by_time.emplace_back(ms, kernel);
    std::sort(by_time.rbegin(), by_time.rend());
    std::printf("%s:", r.name.c_str());
    for (const auto& [ms, kernel] : by_time)
      if (ms >= 0.1) std::printf(" %.*s %.1f", static_cast<int>(kernel.size()), kernel.data(), ms);
    std::printf("\n");
  }
  // Where the GEMMs lose against OpenBLAS alone: rank 0's distinct calls by their time in the
  // recorded warm-up step (the one before the timed steps), the ten largest.
  constexpr std::size_t kShown = 10;
  std::printf(
      "\nthe GEMM calls of rank 0 by wall time in one warm step (ms per step), against OpenBLAS "
      "alone on the same call, hot and with its operands out of the caches\n"
      "| plan | call (a x b -> c, T: transposed; alpha, beta) | calls | in the step | alone | "
      "alone/in step | alone, cold | cold/in step |\n|---|---|---|---|---|---|---|---|\n");
  for (const Row& r : rows) {
    std::vector<const std::pair<const std::string, GemmCall>*> by_time;
    for (const auto& entry : r.calls) by_time.push_back(&entry);
    std::sort(by_time.begin(), by_time.end(), [](const auto* a, const auto* b) {
      return a->second.step_wall_s > b->second.step_wall_s;
    });
    for (std::size_t i = 0; i < std::min(kShown, by_time.size()); ++i) {
      const auto& [key, call] = *by_time[i];
      const double n = static_cast<double>(call.count);
      const double alone = call.alone_wall_s * n, cold = call.cold_wall_s * n;
      const double in_step = call.step_wall_s;
      std::printf("| %s | %s | %lld | %.2f | %.2f | %.2f | %.2f | %.2f |\n", r.name.c_str(),
                  key.c_str(), static_cast<long long>(call.count), in_step * 1e3, alone * 1e3,
                  in_step > 0 ? alone / in_step : 0, cold * 1e3, in_step > 0 ? cold / in_step : 0);
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  register_train("replicated_1rank", replicated_case);
  register_train("data_parallel_2ranks", data_parallel_case);
  register_train("gpt2_124m_1rank", gpt2_case, kGpt2TimedSteps);
  register_train("megatron_dp2_tp2", [] { return megatron_case(0, false); });
  register_train("megatron_dp2_tp2_zero1", [] { return megatron_case(1, false); });
  register_train("megatron_dp2_tp2_checkpointed", [] { return megatron_case(0, true); });
  register_train("searched_2x2", searched_case);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  print_tables();
  return 0;
}
