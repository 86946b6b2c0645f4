// Calibration of the CPU backend's hardware profile: fp32 GEMM FLOP/s (OpenBLAS cblas_sgemm on one
// thread), memory bandwidth (a large copy), and the thread-to-thread exchange bandwidth and latency
// (two threads swapping buffers as the thread communicator will). After the benchmarks it writes a
// `cpu` hardware profile JSON file that load_hardware_profile() reads back, and prints each
// measured figure beside the built-in `cpu` profile's.
//
//   bench_calibrate [--profile_out=PATH] [benchmark flags]
// PATH defaults to $CARTO_CPU_PROFILE, else build/cpu-profile.json (relative to the working
// directory). The file is written only when every figure was measured (no --benchmark_filter).
//
// Model behind the figures (cost/hardware.hpp, cost/collectives.hpp): a copy of S bytes moves 2S
// bytes (read + write), so memory_bandwidth = 2S / t. One exchange of `size` bytes each way between
// 2 ranks is an all-gather of S = 2·size over n = 2: t = (n-1)·α + (n-1)/n · S / B = α + size / B,
// so α is the time of an 8-byte exchange and B = size / (t - α) at 64 MiB.
#include <benchmark/benchmark.h>
#include <cblas.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <carto/cost.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace carto;

// Mean rates as the benchmarks report them (GEMM: the best size); 0 = not measured.
struct Measured {
  double sgemm_flops = 0;
  double copy_bandwidth = 0;
  double exchange_latency = 0;  // mean seconds of an 8-byte exchange
  double exchange_large_s = 0;  // mean seconds of a 64 MiB exchange
} g_measured;

constexpr std::int64_t kSmallExchange = 8;
constexpr std::int64_t kLargeExchange = 64LL << 20;

std::vector<float> random_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// C (N x N) = A (N x N) · B (N x N), fp32, row-major: 2·N³ FLOPs.
void BM_Sgemm(benchmark::State& state) {
  openblas_set_num_threads(1);
  const int n = static_cast<int>(state.range(0));
  const std::size_t nn = static_cast<std::size_t>(n) * static_cast<std::size_t>(n);
  const std::vector<float> a = random_floats(nn, 1);
  const std::vector<float> b = random_floats(nn, 2);
  std::vector<float> c(nn);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
    benchmark::ClobberMemory();
  }
  const double flops = 2.0 * n * n * static_cast<double>(n);
  state.counters["FLOP/s"] = benchmark::Counter(flops * static_cast<double>(state.iterations()),
                                                benchmark::Counter::kIsRate);
  state.counters["profile_FLOP/s"] = hardware::cpu().peak_flops.fp32;
}
BENCHMARK(BM_Sgemm)->RangeMultiplier(2)->Range(256, 2048)->Unit(benchmark::kMillisecond);

// A copy of `bytes` bytes: 2·bytes of memory traffic.
void BM_Copy(benchmark::State& state) {
  const std::size_t bytes = static_cast<std::size_t>(state.range(0));
  std::vector<char> src(bytes, 1);
  std::vector<char> dst(bytes, 0);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  state.counters["bytes/s"] =
      benchmark::Counter(2.0 * static_cast<double>(bytes) * static_cast<double>(state.iterations()),
                         benchmark::Counter::kIsRate);
  state.counters["profile_bytes/s"] = hardware::cpu().memory_bandwidth;
}
BENCHMARK(BM_Copy)->Arg(256LL << 20)->Unit(benchmark::kMillisecond)->UseRealTime();

// Two ranks (this thread and a peer) each copy `size` bytes into the other's receive buffer, then
// publish a sequence number and wait for the peer's: one exchange per iteration.
class Exchange {
 public:
  explicit Exchange(std::size_t size)
      : send_{std::vector<char>(size, 1), std::vector<char>(size, 2)},
        recv_{std::vector<char>(size, 0), std::vector<char>(size, 0)},
        peer_([this] { run_peer(); }) {}
  ~Exchange() {
    stop_.store(true, std::memory_order_release);
    round_[0].fetch_add(1, std::memory_order_release);
    peer_.join();
  }
  Exchange(const Exchange&) = delete;
  Exchange& operator=(const Exchange&) = delete;

  void once() { step(0); }

 private:
  void step(int rank) {
    const int other = 1 - rank;
    std::memcpy(recv_[other].data(), send_[rank].data(), send_[rank].size());
    const std::uint64_t mine = round_[rank].fetch_add(1, std::memory_order_acq_rel) + 1;
    while (round_[other].load(std::memory_order_acquire) < mine) std::this_thread::yield();
  }
  void run_peer() {
    for (std::uint64_t k = 1;; ++k) {
      while (round_[0].load(std::memory_order_acquire) < k) std::this_thread::yield();
      if (stop_.load(std::memory_order_acquire)) return;
      step(1);
    }
  }

  std::vector<char> send_[2];
  std::vector<char> recv_[2];
  std::atomic<std::uint64_t> round_[2] = {0, 0};
  std::atomic<bool> stop_{false};
  std::thread peer_;
};

void BM_ThreadExchange(benchmark::State& state) {
  const std::int64_t size = state.range(0);
  double total = 0;
  {
    Exchange ex(static_cast<std::size_t>(size));
    for (auto _ : state) {
      const auto t0 = std::chrono::steady_clock::now();
      ex.once();
      total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    }
  }
  const double mean = total / static_cast<double>(state.iterations());
  // busbw of an all-gather of S = 2·size over 2 ranks: (S / t) · 1/2 = size / t.
  state.counters["busbw"] = static_cast<double>(size) / mean;
  state.counters["profile_busbw"] = hardware::cpu().links[0].bandwidth;
  state.counters["mean_s"] = mean;
  if (size == kSmallExchange) g_measured.exchange_latency = mean;
  if (size == kLargeExchange) g_measured.exchange_large_s = mean;
}
BENCHMARK(BM_ThreadExchange)
    ->Arg(kSmallExchange)
    ->Arg(64 << 10)
    ->Arg(1 << 20)
    ->Arg(kLargeExchange)
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

// Keeps the best rate of each figure as the benchmarks report it.
class Recorder : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    for (const Run& r : runs) {
      if (r.run_type != Run::RT_Iteration || r.error_occurred) continue;
      const auto rate = [&](const char* name) {
        const auto it = r.counters.find(name);
        return it == r.counters.end() ? 0.0 : it->second.value;
      };
      const std::string name = r.benchmark_name();
      if (name.rfind("BM_Sgemm", 0) == 0)
        g_measured.sgemm_flops = std::max(g_measured.sgemm_flops, rate("FLOP/s"));
      if (name.rfind("BM_Copy", 0) == 0)
        g_measured.copy_bandwidth = std::max(g_measured.copy_bandwidth, rate("bytes/s"));
    }
    ConsoleReporter::ReportRuns(runs);
  }
};

std::string fmt(double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%10.3g %s", v, unit);
  return buf;
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_path = "build/cpu-profile.json";
  if (const char* env = std::getenv("CARTO_CPU_PROFILE"); env != nullptr && *env != '\0')
    out_path = env;
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--profile_out=", 0) == 0) {
      out_path = a.substr(std::strlen("--profile_out="));
    } else {
      args.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(args.size());
  benchmark::Initialize(&n, args.data());
  if (benchmark::ReportUnrecognizedArguments(n, args.data())) return 1;
  Recorder recorder;
  benchmark::RunSpecifiedBenchmarks(&recorder);
  benchmark::Shutdown();

  const Measured& m = g_measured;
  if (m.sgemm_flops <= 0 || m.copy_bandwidth <= 0 || m.exchange_latency <= 0 ||
      m.exchange_large_s <= m.exchange_latency) {
    std::printf("\nnot every figure was measured (a --benchmark_filter?); no profile written\n");
    return 0;
  }
  HardwareProfile hw = hardware::cpu();
  hw.description = "CPU backend: threads of one process as ranks, OpenBLAS GEMM (calibrated)";
  // The CPU backend computes 16-bit types in fp32, so every dtype runs at the sgemm rate.
  hw.peak_flops = {.fp32 = m.sgemm_flops, .bf16 = m.sgemm_flops, .fp16 = m.sgemm_flops};
  hw.matmul_efficiency = 1.0;
  hw.memory_efficiency = 1.0;
  hw.memory_bandwidth = m.copy_bandwidth;
  // Thread ranks share the machine's memory: each may in principle use all of it.
  hw.memory_capacity = static_cast<std::int64_t>(sysconf(_SC_PHYS_PAGES)) *
                       static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
  hw.links[0].latency = m.exchange_latency;
  hw.links[0].bandwidth =
      static_cast<double>(kLargeExchange) / (m.exchange_large_s - m.exchange_latency);

  const HardwareProfile builtin = hardware::cpu();
  std::printf("\n%-32s %16s %16s\n", "figure", "measured", "built-in cpu");
  std::printf("%-32s %16s %16s\n", "fp32 GEMM (1 thread)",
              fmt(hw.peak_flops.fp32, "FLOP/s").c_str(),
              fmt(builtin.peak_flops.fp32, "FLOP/s").c_str());
  std::printf("%-32s %16s %16s\n", "memory bandwidth (copy)",
              fmt(hw.memory_bandwidth, "B/s").c_str(),
              fmt(builtin.memory_bandwidth, "B/s").c_str());
  std::printf("%-32s %16s %16s\n", "thread link bus bandwidth",
              fmt(hw.links[0].bandwidth, "B/s").c_str(),
              fmt(builtin.links[0].bandwidth, "B/s").c_str());
  std::printf("%-32s %16s %16s\n", "thread link latency per step",
              fmt(hw.links[0].latency, "s").c_str(), fmt(builtin.links[0].latency, "s").c_str());
  std::printf("%-32s %16s %16s\n", "memory capacity",
              fmt(static_cast<double>(hw.memory_capacity), "B").c_str(),
              fmt(static_cast<double>(builtin.memory_capacity), "B").c_str());

  const std::filesystem::path path(out_path);
  if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
  save_hardware_profile(hw, out_path);
  const HardwareProfile back = load_hardware_profile(out_path);
  std::printf("\nwrote %s (reads back %s)\n", out_path.c_str(), back == hw ? "equal" : "DIFFERENT");
  return back == hw ? 0 : 1;
}
