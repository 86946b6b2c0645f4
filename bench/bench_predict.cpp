// Predicted against measured step time and peak memory, under the profile cpu_profile() picks
// (the calibrated one when bench_calibrate has written it, else the built-in `cpu`), for GPT-2 124M
// (batch 4, sequence 64, fp32, one rank) and the demo's model (2 layers, hidden 64, 4 heads,
// sequence 64, batch 16; vocabulary 96 for its character set) on 1, 2, 2x2 and 4 thread ranks under
// the plan the demo's search picks (the budget halfway between the least memory any plan needs and
// the fastest plan's).
//
// Measured: the median over the timed steps of the busiest rank's CPU time: the rank thread's CPU
// time with one thread per rank, the process's CPU time over the threads with one rank of several
// threads. That is what a rank takes with cores of its own, which the profile prices, also where
// ranks share cores or other programs load the machine; wall_s is the wall time beside it.
// Counters: predicted_s, measured_s, ratio = measured / predicted, wall_s, peak memory measured
// and predicted and their ratio. With --table, each case also prints rank 0's per-op table of one
// traced step (carto/runtime/trace_table.hpp).
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <carto/cost/hardware.hpp>
#include <carto/layers/gpt.hpp>
#include <carto/runtime/thread_comm.hpp>
#include <carto/runtime/trace_table.hpp>
#include <carto/runtime/trainer.hpp>
#include <carto/search.hpp>
#include <carto/spec/text.hpp>
#include <chrono>
#include <cpu/cpu_backend.hpp>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <iostream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace carto;

bool g_table = false;
const unsigned kCores = std::max(1U, std::thread::hardware_concurrency());

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Case {
  GptConfig config;
  std::int64_t batch;
  std::string mesh;
  int steps;
};

TokenBatch batch_of(const GptConfig& c, std::int64_t batch, int step) {
  TokenBatch b{.batch = batch, .seq = c.seq};
  std::uint64_t x = 0x9e3779b97f4a7c15ULL * static_cast<std::uint64_t>(step + 1);
  for (std::int64_t i = 0; i < batch * c.seq + 1; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    const auto id = static_cast<std::int32_t>(x % static_cast<std::uint64_t>(c.vocab));
    if (i < batch * c.seq) b.ids.push_back(id);
    if (i > 0) b.targets.push_back(id);
  }
  return b;
}

void BM_Predict(benchmark::State& state, const Case& c) {
  const DeviceMesh mesh = parse_mesh(c.mesh);
  const auto ranks = static_cast<int>(mesh.num_devices());
  const CpuProfileChoice profile = cpu_profile(ranks, kCores);
  const HardwareProfile hw = profile.profile;
  auto make_graph = [&](std::int64_t b) {
    return build_gpt(c.config, {.batch = b, .precision = Precision::fp32, .dropout = 0.0});
  };
  SearchOptions options{.precision = Precision::fp32,
                        .dropout_masks = DropoutMasks::regenerated,
                        .tolerance = 0.05,
                        .meshes = {mesh},
                        .time_bounds = false};
  const Plan any = search(make_graph, c.config.name, c.batch, ranks, hw, options);
  options.memory_budget = (any.frontier.back().peak_bytes + any.frontier.front().peak_bytes) / 2;
  options.time_bounds = true;
  const Plan plan = search(make_graph, c.config.name, c.batch, ranks, hw, options);
  const Graph g = make_graph(c.batch / plan.micro_batches);
  const int threads = cpu_threads_per_rank(ranks, kCores);
  const bool shared = static_cast<unsigned>(ranks * threads) > kCores;

  std::vector<double> measured, wall;
  std::vector<std::int64_t> peaks(static_cast<std::size_t>(ranks), 0);
  trace::Trace tr;
  std::mutex mu;
  for (auto _ : state) {
    measured.clear();
    wall.clear();
    std::vector<std::vector<double>> busy(static_cast<std::size_t>(ranks));
    std::vector<std::vector<double>> walls(static_cast<std::size_t>(ranks));
    run_threads(ranks, [&](Communicator& world) {
      cpu::CpuBackend backend;
      MeshComms comms(world, plan.mesh);
      Trainer trainer(g, plan, backend, comms, hw);
      const auto r = static_cast<std::size_t>(world.rank());
      for (int s = 0; s < c.steps + 2; ++s) {
        const double cpu0 = thread_cpu_seconds();
        const std::clock_t process0 = std::clock();
        const StepStats st = trainer.step_with_stats(batch_of(c.config, c.batch, s));
        if (s < 2) continue;  // warm-up
        busy[r].push_back(threads == 1 ? thread_cpu_seconds() - cpu0
                                       : static_cast<double>(std::clock() - process0) /
                                             CLOCKS_PER_SEC / threads);
        walls[r].push_back(st.seconds);
      }
      const std::lock_guard lock(mu);
      peaks[r] = trainer.memory().peak_bytes();
    });
    for (int s = 0; s < c.steps; ++s) {
      double m = 0, w = 0;
      for (int r = 0; r < ranks; ++r) {
        m = std::max(m, busy[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
        w = std::max(w, walls[static_cast<std::size_t>(r)][static_cast<std::size_t>(s)]);
      }
      measured.push_back(m);
      wall.push_back(w);
    }
    std::sort(measured.begin(), measured.end());
    std::sort(wall.begin(), wall.end());
    state.SetIterationTime(measured[measured.size() / 2]);
  }
  const double med = measured[measured.size() / 2];
  const std::int64_t peak = *std::max_element(peaks.begin(), peaks.end());
  state.counters["predicted_s"] = plan.step_time_s;
  state.counters["measured_s"] = med;
  state.counters["ratio"] = med / plan.step_time_s;
  state.counters["wall_s"] = wall[wall.size() / 2];
  state.counters["peak_MiB"] = static_cast<double>(peak) / (1 << 20);
  state.counters["pred_peak_MiB"] = static_cast<double>(plan.peak_memory_bytes) / (1 << 20);
  state.counters["peak_ratio"] =
      static_cast<double>(peak) / static_cast<double>(plan.peak_memory_bytes);
  state.SetLabel(detail::concat(plan.mesh, " zero ", plan.zero_stage, ", ", plan.micro_batches,
                                " micro-batch(es), ", threads, " thread(s)/rank, ",
                                shared ? "ranks share cores" : "a core each", "; ",
                                profile.calibrated ? "calibrated" : "built-in", " profile"));
  if (!g_table) return;
  run_threads(ranks, [&](Communicator& world) {
    cpu::CpuBackend backend;
    MeshComms comms(world, plan.mesh);
    Trainer trainer(g, plan, backend, comms, hw, {.trace = &tr});
    trainer.step(batch_of(c.config, c.batch, 0));  // warm-up, then one traced step
    tr.rank(world.rank()).clear();
    trainer.step(batch_of(c.config, c.batch, 1));
  });
  const std::vector<trace::OpRow> rows =
      trace::op_table(tr.rank(0), g, plan,
                      plan_strategies(g, plan,
                                      {.precision = plan.precision,
                                       .dropout_masks = DropoutMasks::regenerated,
                                       .gradient_reduction = plan.gradient_reduction}),
                      hw);
  std::cout << "\n"
            << c.config.name << " on " << plan.mesh << ", rank 0 (" << profile.note << "):\n";
  trace::write_op_table(std::cout, rows);
  std::cout << "\n";
}

const GptConfig kDemo{
    .name = "demo", .layers = 2, .hidden = 64, .heads = 4, .vocab = 96, .seq = 64};
const GptConfig kGpt2{
    .name = "gpt2-124m", .layers = 12, .hidden = 768, .heads = 12, .vocab = 50257, .seq = 64};

}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (std::strcmp(argv[i], "--table") == 0) {
      g_table = true;
    } else {
      args.push_back(argv[i]);
    }
  }
  for (const char* mesh : {"x=1", "x=2", "x=2,y=2", "x=4"}) {
    benchmark::RegisterBenchmark((std::string("BM_Predict/demo/") + mesh).c_str(),
                                 [mesh](benchmark::State& s) {
                                   BM_Predict(s, {kDemo, 16, mesh, 20});
                                 })
        ->UseManualTime()
        ->Iterations(1)
        ->Unit(benchmark::kMillisecond);
  }
  benchmark::RegisterBenchmark("BM_Predict/gpt2-124m/x=1",
                               [](benchmark::State& s) {
                                 BM_Predict(s, {kGpt2, 4, "x=1", 6});
                               })
      ->UseManualTime()
      ->Iterations(1)
      ->Unit(benchmark::kMillisecond);
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  std::cout << cpu_profile(1, kCores).note << "\n";
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
