// Calibration of the CPU backend's hardware profile. Measures, at 1 thread and at every core,
// rates per second of process CPU time (times the threads), so that a machine other programs load
// still yields what its cores reach when the ranks have them (the thread link is timed on the wall
// clock and is only right on an idle machine):
//  - fp32 GEMM FLOP/s by shape class (OpenBLAS cblas_sgemm, from 64³ through the tall-skinny
//    shapes of a transformer's projections to 2048³): the profile's matmul_rates curve;
//  - copy bandwidth (a 256 MiB memcpy split over the threads), and the loop kernels the runtime
//    runs on every step (CpuBackend add_scaled and scale over 16 Mi elements), whose rate
//    is the profile's memory_bandwidth: the roofline prices memory-bound kernels by it;
//  - the thread communicator (ThreadComm, 2 ranks): all-reduce latency and bus bandwidth;
//  - the fixed cost of one op pass, from training steps of a GPT too small to do any work
//    (measure_op_overhead);
//  - the loop kernels' FLOP rate, from a traced small GPT's ops that are not einsums
//    (measure_loop_rate), at 1 thread and at every core.
// Then it writes the `cpu` profile where cpu_profile() finds it (cost/hardware.hpp):
//
//   bench_calibrate [--profile_out=PATH] [benchmark flags]
//   bench_calibrate --op_overhead_only [--profile_out=PATH]   re-measures only op_overhead into the
//                                                             profile at PATH (seconds, not
//                                                             minutes)
//   bench_calibrate --loop_rate_only [--profile_out=PATH]     the same for loop_rate
// PATH defaults to cpu_profile_path(): $CARTO_CPU_PROFILE, else $XDG_CONFIG_HOME/carto/, else
// ~/.config/carto/cpu-profile.json. The file is written atomically (a temporary file in the same
// folder, fsync, rename) and only when every figure was measured (no --benchmark_filter).
//
// Model behind the figures (cost/hardware.hpp, cost/collectives.hpp): a copy of S bytes moves 2S
// bytes (read + write); add_scaled moves 12 bytes per fp32 element (x read, y read and written),
// scale 8 (x read, y written). An all-reduce of S bytes over n = 2
// ranks takes 2(n-1)·α + 2(n-1)/n · S/B = 2α + S/B, so α is half the time of an 8-byte
// all-reduce and B = S / (t - 2α) at 64 MiB. Loop kernels at more threads than the backend uses
// are scaled by the copy bandwidth's gain at that thread count.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <carto/cost.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trace_table.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/util/files.hpp>
#include <chrono>
#include <cpu/cpu_backend.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <random>
#include <span>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace carto;

const int kCores = static_cast<int>(std::max(1U, std::thread::hardware_concurrency()));

// Figures as the benchmarks report them, by thread count; 0 = not measured.
struct PerThreads {
  std::map<double, double> gemm;  // FLOPs of one call -> best FLOP/s
  double copy = 0;                // bytes/s
  double add_scaled = 0;          // bytes/s
  double adamw = 0;               // bytes/s
};
std::map<int, PerThreads> g_rates;
double g_allreduce_small_s = 0;
double g_allreduce_large_s = 0;

constexpr std::int64_t kSmallMessage = 8;
constexpr std::int64_t kLargeMessage = 64LL << 20;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// C (M x N) = A (M x K) · B (K x N), fp32, row-major: 2·M·N·K FLOPs. Args: threads, M, N, K.
// The shapes: cubes from 64 to 2048, and the projections of GPT-2 124M at 256 tokens per rank
// (hidden 768: QKV 768 -> 2304, MLP 768 -> 3072, its weight gradient 768 x 3072 over 256 tokens).
void BM_Sgemm(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  openblas_set_num_threads(threads);
  const int m = static_cast<int>(state.range(1));
  const int n = static_cast<int>(state.range(2));
  const int k = static_cast<int>(state.range(3));
  const auto size = [](int r, int c) {
    return static_cast<std::size_t>(r) * static_cast<std::size_t>(c);
  };
  const std::vector<float> a = random_floats(size(m, k), 1);
  const std::vector<float> b = random_floats(size(k, n), 2);
  std::vector<float> c(size(m, n));
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a.data(), k, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * m * n * static_cast<double>(k);
  // Per process CPU second times the threads: what `threads` cores of their own would reach.
  state.counters["FLOP/s"] = benchmark::Counter(
      flops * threads * static_cast<double>(state.iterations()), benchmark::Counter::kIsRate);
  state.counters["call_flops"] = flops;
  state.counters["profile_FLOP/s"] = hardware::cpu().peak_flops.fp32;
  openblas_set_num_threads(1);
}
void sgemm_shapes(benchmark::internal::Benchmark* b) {
  const std::vector<std::array<int, 3>> shapes = {
      {64, 64, 64},     {128, 128, 128},  {256, 256, 256},    {256, 768, 768},
      {256, 2304, 768}, {768, 3072, 256}, {1024, 1024, 1024}, {2048, 2048, 2048}};
  for (int t : {1, kCores}) {
    for (const auto& s : shapes) b->Args({t, s[0], s[1], s[2]});
    if (kCores == 1) break;
  }
}
BENCHMARK(BM_Sgemm)->Apply(sgemm_shapes)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

// A copy of `bytes` bytes split over `threads` threads: 2·bytes of memory traffic.
void BM_Copy(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const std::size_t bytes = 256u << 20;
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  const std::size_t part = bytes / static_cast<std::size_t>(threads);
  for (auto _ : state) {
    std::vector<std::thread> pool;
    for (int t = 1; t < threads; ++t) {
      pool.emplace_back([&, t] {
        const std::size_t at = part * static_cast<std::size_t>(t);
        std::memcpy(dst.data() + at, src.data() + at, t + 1 == threads ? bytes - at : part);
      });
    }
    std::memcpy(dst.data(), src.data(), threads == 1 ? bytes : part);
    for (std::thread& th : pool) th.join();
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] = benchmark::Counter(
      2.0 * static_cast<double>(bytes) * threads * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.counters["profile_bytes/s"] = hardware::cpu().memory_bandwidth;
}
BENCHMARK(BM_Copy)->Arg(1)->Arg(kCores)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

// The runtime's loop kernels on one CpuBackend (as a rank runs them).
void BM_LoopKernel(benchmark::State& state) {
  const bool adamw = state.range(0) == 1;  // arg 1: scale
  constexpr std::int64_t kElements = 16LL << 20;
  cpu::CpuBackend backend;
  const TensorShape shape{{"elements", kElements}};
  // The CPU backend's device memory is host memory: plain vectors serve as its tensors.
  std::vector<std::vector<float>> data;
  std::vector<TensorView> views;
  for (int i = 0; i < 4; ++i) {
    data.push_back(
        random_floats(static_cast<std::size_t>(kElements), static_cast<unsigned>(10 + i)));
    views.push_back({.data = data.back().data(), .shape = shape, .dtype = DType::fp32});
  }
  for (auto _ : state) {
    if (adamw) {
      backend.scale(views[1], 0.5f, views[0]);
    } else {
      backend.add_scaled(views[1], 0.5f, views[0]);
    }
    backend.synchronize();
  }
  const double per_element = adamw ? 8.0 : 12.0;
  state.SetLabel(adamw ? "scale" : "add_scaled");
  state.counters["bytes/s"] =
      benchmark::Counter(per_element * kElements * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["profile_bytes/s"] = hardware::cpu().memory_bandwidth;
}
BENCHMARK(BM_LoopKernel)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->MeasureProcessCPUTime();

// One all-reduce of `size` bytes (fp32 sum) on 2 thread ranks; 64 all-reduces timed per round on
// rank 0 after a barrier.
void BM_ThreadAllReduce(benchmark::State& state) {
  const std::int64_t size = state.range(0);
  const int reps = size >= (1 << 20) ? 4 : 256;
  for (auto _ : state) {
    double seconds = 0;
    run_threads(2, [&](Communicator& world) {
      std::vector<float> buffer(static_cast<std::size_t>(size) / sizeof(float), 1.0f);
      world.barrier().wait();
      world.all_reduce(std::span<float>(buffer), ReduceOp::sum).wait();  // warm
      world.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int r = 0; r < reps; ++r)
        world.all_reduce(std::span<float>(buffer), ReduceOp::sum).wait();
      const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (world.rank() == 0) seconds = t / reps;
    });
    state.SetIterationTime(seconds);
  }
}
BENCHMARK(BM_ThreadAllReduce)
    ->Arg(kSmallMessage)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Arg(kLargeMessage)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// The fixed cost of one op pass (HardwareProfile::op_overhead): a GPT whose kernels do next to no
// work (2 layers, hidden 8, 2 heads, vocabulary 16, sequence 8, batch 1, fp32) trains on one rank
// of one thread; the step's median wall time less the step `hw` predicts with no overhead, over
// the op passes the plan prices (the prediction's growth per second of overhead, which prices the
// same plan twice). At least 0.
double measure_op_overhead(const HardwareProfile& hw) {
  const GptConfig config{
      .name = "overhead-probe", .layers = 2, .hidden = 8, .heads = 2, .vocab = 16, .seq = 8};
  auto make_graph = [&](std::int64_t b) {
    return build_gpt(config, {.batch = b, .precision = Precision::fp32, .dropout = 0.0});
  };
  const SearchOptions options{.precision = Precision::fp32,
                              .dropout_masks = DropoutMasks::regenerated,
                              .meshes = {parse_mesh("x=1")}};
  auto predicted = [&](double overhead) {
    HardwareProfile h = hw;
    h.op_overhead = overhead;
    return search(make_graph, config.name, 1, 1, h, options).step_time_s;
  };
  const Plan plan = search(make_graph, config.name, 1, 1, hw, options);
  const Graph g = make_graph(1);
  constexpr int kWarmup = 5, kSteps = 41;
  std::vector<double> seconds;
  run_threads(1, [&](Communicator& world) {
    cpu::CpuBackend backend(cpu::CpuOptions{.threads = 1});
    MeshComms comms(world, plan.mesh);
    Trainer trainer(g, plan, backend, comms, hw);
    TokenBatch batch{.batch = 1, .seq = config.seq};
    for (std::int32_t i = 0; i < config.seq; ++i) {
      batch.ids.push_back(i % 16);
      batch.targets.push_back((i * 7 + 3) % 16);
    }
    for (int s = 0; s < kWarmup + kSteps; ++s) {
      const double t = trainer.step_with_stats(batch).seconds;
      if (s >= kWarmup) seconds.push_back(t);
    }
  });
  std::sort(seconds.begin(), seconds.end());
  const double measured = seconds[seconds.size() / 2];
  const double base = predicted(0.0);
  constexpr double kProbe = 1e-3;
  const double passes = (predicted(kProbe) - base) / kProbe;
  std::printf(
      "op overhead probe: %.0f op passes, step %.3g s measured, %.3g s predicted without "
      "overhead\n",
      passes, measured, base);
  return passes > 0 ? std::max(0.0, (measured - base) / passes) : 0.0;
}

// The loop kernels' FLOP rate (HardwareProfile::loop_rate) at `threads` threads per rank: a small
// GPT (2 layers, hidden 128, 4 heads, vocabulary 64, sequence 32, batch 8, fp32; its activations
// fit in cache, as those of the small models whose steps the loop kernels decide) trains on one
// rank with a trace; over its ops that are not einsums, the FLOPs the profiler counts for their
// forward and backward passes over the time those passes took less `hw`'s op_overhead per pass.
double measure_loop_rate(const HardwareProfile& hw, int threads) {
  const GptConfig config{
      .name = "loop-probe", .layers = 2, .hidden = 128, .heads = 4, .vocab = 64, .seq = 32};
  constexpr std::int64_t kBatch = 8;
  auto make_graph = [&](std::int64_t b) {
    return build_gpt(config, {.batch = b, .precision = Precision::fp32, .dropout = 0.0});
  };
  const SearchOptions options{.precision = Precision::fp32,
                              .dropout_masks = DropoutMasks::regenerated,
                              .meshes = {parse_mesh("x=1")}};
  const Plan plan = search(make_graph, config.name, kBatch, 1, hw, options);
  const Graph g = make_graph(kBatch / plan.micro_batches);
  constexpr int kWarmup = 3, kSteps = 10;
  trace::Trace tr;
  run_threads(1, [&](Communicator& world) {
    cpu::CpuBackend backend(cpu::CpuOptions{.threads = threads});
    MeshComms comms(world, plan.mesh);
    Trainer trainer(g, plan, backend, comms, hw, {.trace = &tr});
    TokenBatch batch{.batch = kBatch, .seq = config.seq};
    for (std::int64_t i = 0; i < kBatch * config.seq; ++i) {
      batch.ids.push_back(static_cast<std::int32_t>(i % config.vocab));
      batch.targets.push_back(static_cast<std::int32_t>((i * 7 + 3) % config.vocab));
    }
    for (int s = 0; s < kWarmup + kSteps; ++s) {
      if (s == kWarmup) tr.rank(0).clear();
      trainer.step(batch);
    }
  });
  const std::vector<Strategy> strategies = plan_strategies(
      g, plan, {.precision = plan.precision, .dropout_masks = DropoutMasks::regenerated});
  const std::vector<trace::OpRow> rows = trace::op_table(tr.rank(0), g, plan, strategies, hw);
  double flops = 0, seconds = 0;
  for (std::size_t k = 0; k < g.num_ops(); ++k) {
    const Strategy& st = strategies[k];
    if (st.gemm_calls != 0) continue;  // an einsum
    for (const auto& [f, s] : {std::pair{st.cost.flops_forward, rows[k].forward_s},
                               std::pair{st.cost.flops_backward(), rows[k].backward_s}}) {
      if (f <= 0) continue;
      flops += static_cast<double>(f);
      seconds += std::max(0.0, s - hw.op_overhead);
    }
  }
  std::printf("loop-rate probe (%d thread%s): %.3g FLOP in %.3g s of loop-kernel passes per step\n",
              threads, threads == 1 ? "" : "s", flops, seconds);
  return seconds > 0 ? flops / seconds : 0.0;
}

// loop_rate at one thread into `hw` and the profile's top level, and at each thread count of its
// "threads" entries into that entry.
void measure_loop_rates(HardwareProfile& hw, Json& j) {
  hw.loop_rate = measure_loop_rate(hw, 1);
  j["loop_rate"] = hw.loop_rate;
  if (const Json* threads = j.find("threads"); threads != nullptr && threads->is_array()) {
    for (Json& e : j["threads"].as_array()) {
      if (const Json* t = e.find("threads"); t != nullptr && t->is_int())
        e["loop_rate"] = measure_loop_rate(hw, static_cast<int>(t->as_int()));
    }
  }
}

// Keeps the best rate of each figure as the benchmarks report it.
class Recorder : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      const auto counter = [&](const char* name) {
        const auto it = r.counters.find(name);
        return it == r.counters.end() ? 0.0 : it->second.value;
      };
      const std::string name = r.benchmark_name();
      const auto arg = [&](std::size_t i) {  // the i-th "/N" of the name
        std::size_t at = 0;
        for (std::size_t k = 0; k <= i; ++k) at = name.find('/', at) + 1;
        return std::atoi(name.c_str() + at);
      };
      const auto keep = [](double& slot, double v) { slot = std::max(slot, v); };
      if (name.rfind("BM_Sgemm", 0) == 0)
        keep(g_rates[arg(0)].gemm[counter("call_flops")], counter("FLOP/s"));
      if (name.rfind("BM_Copy", 0) == 0) keep(g_rates[arg(0)].copy, counter("bytes/s"));
      if (name.rfind("BM_LoopKernel/0", 0) == 0) keep(g_rates[1].add_scaled, counter("bytes/s"));
      if (name.rfind("BM_LoopKernel/1", 0) == 0) keep(g_rates[1].adamw, counter("bytes/s"));
      if (name.rfind("BM_ThreadAllReduce", 0) == 0) {
        const double mean = r.GetAdjustedRealTime() / 1e6;  // microseconds -> seconds
        if (arg(0) == kSmallMessage) g_allreduce_small_s = mean;
        if (arg(0) == kLargeMessage) g_allreduce_large_s = mean;
      }
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

std::string fmt(double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%10.3g %s", v, unit);
  return buf;
}

// The profile's figures at `threads` threads per rank.
struct Figures {
  double peak = 0;
  double bandwidth = 0;
  std::vector<MatmulRate> rates;
};
Figures figures_at(int threads) {
  const PerThreads& p = g_rates.at(threads);
  const PerThreads& one = g_rates.at(1);
  Figures f;
  for (const auto& [flops, rate] : p.gemm) {
    f.rates.push_back({.flops = flops, .rate = rate});
    f.peak = std::max(f.peak, rate);
  }
  // The loop kernels' mean rate, scaled by the copy's gain at this thread count.
  const double loops = 0.5 * (one.add_scaled + one.adamw);
  f.bandwidth = loops * (one.copy > 0 ? p.copy / one.copy : 1.0);
  return f;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = cpu_profile_path();
  bool op_overhead_only = false, loop_rate_only = false;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--profile_out=", 0) == 0) {
      out_path = a.substr(std::strlen("--profile_out="));
    } else if (a == "--op_overhead_only") {
      op_overhead_only = true;
    } else if (a == "--loop_rate_only") {
      loop_rate_only = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  if (op_overhead_only || loop_rate_only) {  // re-measure one figure there, keeping the rest
    try {
      const std::string text =
          read_file_bounded(out_path, kMaxHardwareFileBytes, "hardware profile");
      Json j;
      try {
        j = Json::parse(text);
      } catch (const Error& e) {
        detail::fail("carto: hardware profile ", out_path, ": ", e.what());
      }
      HardwareProfile hw = hardware_profile_from_json(j, out_path);
      if (op_overhead_only) {
        hw.op_overhead = measure_op_overhead(hw);
        j["op_overhead"] = hw.op_overhead;
        std::printf("op overhead %.3g s per op pass\n", hw.op_overhead);
      }
      if (loop_rate_only) measure_loop_rates(hw, j);
      check_hardware_profile(hw, out_path);
      atomic_write(out_path, j.dump(2) + "\n", "hardware profile");
      std::printf("wrote %s\n", out_path.c_str());
    } catch (const Error& e) {
      std::fprintf(stderr, "bench_calibrate: %s\n", e.what());
      return 2;
    }
    return 0;
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  benchmark::Shutdown();

  const bool all = g_rates.contains(1) && g_rates.contains(kCores) && g_rates[1].gemm.size() >= 8 &&
                   g_rates[kCores].gemm.size() >= 8 && g_rates[1].copy > 0 &&
                   g_rates[kCores].copy > 0 && g_rates[1].add_scaled > 0 && g_rates[1].adamw > 0 &&
                   g_allreduce_small_s > 0 && g_allreduce_large_s > g_allreduce_small_s;
  if (!all) {
    std::printf("\nnot every figure was measured (a --benchmark_filter?); no profile written\n");
    return 0;
  }
  if (out_path.empty()) {
    std::printf("\nno profile path: set CARTO_CPU_PROFILE or HOME, or pass --profile_out=PATH\n");
    return 1;
  }
  const Figures one = figures_at(1);
  HardwareProfile hw = hardware::cpu();
  hw.description = "CPU backend: threads of one process as ranks, OpenBLAS GEMM (calibrated)";
  // The CPU backend computes 16-bit types in fp32, so every dtype runs at the sgemm rate.
  hw.peak_flops = {.fp32 = one.peak, .bf16 = one.peak, .fp16 = one.peak};
  hw.matmul_efficiency = 1.0;
  hw.memory_efficiency = 1.0;
  hw.memory_bandwidth = one.bandwidth;
  hw.matmul_rates = one.rates;
  // Thread ranks share the machine's memory: each may in principle use all of it.
  hw.memory_capacity = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) *
                       static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
  const double alpha = g_allreduce_small_s / 2;
  hw.links[0].latency = alpha;
  hw.links[0].bandwidth = static_cast<double>(kLargeMessage) / (g_allreduce_large_s - 2 * alpha);
  hw.op_overhead = measure_op_overhead(hw);
  check_hardware_profile(hw, "the calibrated cpu profile");

  Json j = to_json(hw);
  Json threads = Json::array();
  for (const auto& [t, rates] : g_rates) {
    if (t == 1) continue;
    const Figures f = figures_at(t);
    Json e;
    e["threads"] = t;
    e["peak_flops_fp32"] = f.peak;
    e["memory_bandwidth"] = f.bandwidth;
    Json curve = Json::array();
    for (const MatmulRate& r : f.rates) {
      Json rj;
      rj["flops"] = r.flops;
      rj["rate"] = r.rate;
      curve.push_back(rj);
    }
    e["matmul_rates"] = curve;
    threads.push_back(e);
  }
  j["threads"] = threads;
  measure_loop_rates(hw, j);

  const HardwareProfile builtin = hardware::cpu();
  std::printf("\n%-40s %16s %16s\n", "figure", "measured", "built-in cpu");
  for (const auto& [t, rates] : g_rates) {
    const Figures f = figures_at(t);
    std::printf("%-40s %16s %16s\n", detail::concat("fp32 GEMM, best (", t, " thr)").c_str(),
                fmt(f.peak, "FLOP/s").c_str(), fmt(builtin.peak_flops.fp32, "FLOP/s").c_str());
    for (const MatmulRate& r : f.rates) {
      std::printf("%-40s %16s\n",
                  detail::concat("  GEMM of ", r.flops / 1e6, " MFLOP (", t, " thr)").c_str(),
                  fmt(r.rate, "FLOP/s").c_str());
    }
    std::printf("%-40s %16s %16s\n", detail::concat("copy bandwidth (", t, " thr)").c_str(),
                fmt(rates.copy, "B/s").c_str(), fmt(builtin.memory_bandwidth, "B/s").c_str());
    std::printf("%-40s %16s %16s\n",
                detail::concat("loop kernels, memory_bandwidth (", t, " thr)").c_str(),
                fmt(f.bandwidth, "B/s").c_str(), fmt(builtin.memory_bandwidth, "B/s").c_str());
  }
  std::printf("%-40s %16s\n", "  add_scaled (backend, 1 rank)",
              fmt(g_rates[1].add_scaled, "B/s").c_str());
  std::printf("%-40s %16s\n", "  scale (backend, 1 rank)", fmt(g_rates[1].adamw, "B/s").c_str());
  std::printf("%-40s %16s %16s\n", "thread link bus bandwidth",
              fmt(hw.links[0].bandwidth, "B/s").c_str(),
              fmt(builtin.links[0].bandwidth, "B/s").c_str());
  std::printf("%-40s %16s %16s\n", "thread link latency per step",
              fmt(hw.links[0].latency, "s").c_str(), fmt(builtin.links[0].latency, "s").c_str());
  std::printf("%-40s %16s %16s\n", "op overhead (per op pass)", fmt(hw.op_overhead, "s").c_str(),
              fmt(builtin.op_overhead, "s").c_str());
  std::printf("%-40s %16s %16s\n", "loop kernels, loop_rate (1 thr)",
              fmt(hw.loop_rate, "FLOP/s").c_str(), fmt(builtin.loop_rate, "FLOP/s").c_str());
  std::printf("%-40s %16s %16s\n", "memory capacity",
              fmt(static_cast<double>(hw.memory_capacity), "B").c_str(),
              fmt(static_cast<double>(builtin.memory_capacity), "B").c_str());

  const std::filesystem::path path(out_path);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  atomic_write(out_path, j.dump(2) + "\n", "hardware profile");
  const HardwareProfile back = load_hardware_profile(out_path);
  std::printf("\nwrote %s (reads back %s)\n", out_path.c_str(), back == hw ? "equal" : "DIFFERENT");
  return back == hw ? 0 : 1;
}
