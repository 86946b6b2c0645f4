// What the GPU benchmarks share: one CudaBackend, CUDA-event timing of work on its stream (Google
// Benchmark's manual time), the device's copy bandwidth and bf16 GEMM rate measured in the same run
// (the ceilings each figure is set against), and a main that skips without a device.
//
// Timing design: a benchmark iteration enqueues its kernel(s) between two events on the backend's
// stream and reports the events' elapsed time (cudaEventElapsedTime, resolution about 0.5 us), so
// launch overhead on the host is not counted where the GPU overlaps it and nothing else on the
// stream is. Every benchmark uses UseManualTime(); rates come from benchmark::Counter with
// kIsIterationInvariantRate, which divides by that manual time.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <carto/runtime/backend.hpp>
#include <cstdio>
#include <cuda/cuda_backend.hpp>
#include <cuda/cuda_check.hpp>

namespace carto::bench {

inline cuda::CudaBackend& backend() {
  static cuda::CudaBackend instance(0);
  return instance;
}

class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    CARTO_CUDA_CHECK(cudaEventCreate(&start_));
    CARTO_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start() { CARTO_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  // Seconds between start() and now on the stream; waits for the stream to get there.
  double stop() {
    CARTO_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    CARTO_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CARTO_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return 1e-3 * static_cast<double>(ms);
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

// Times `enqueue` once per benchmark iteration, after one untimed warm-up call; returns the
// seconds of all timed iterations together.
template <class Enqueue>
double time_iterations(benchmark::State& state, Enqueue&& enqueue) {
  EventTimer timer(backend().stream());
  enqueue();
  backend().synchronize();
  double total = 0;
  for (auto _ : state) {
    timer.start();
    enqueue();
    const double t = timer.stop();
    state.SetIterationTime(t);
    total += t;
  }
  return total;
}

// Device-to-device cudaMemcpy of 1 GiB: bytes read plus written per second, best of 10 (measured
// once per process, on first use).
inline double copy_bandwidth() {
  static const double measured = [] {
    constexpr std::size_t kBytes = std::size_t{1} << 30;
    void* a = nullptr;
    void* b = nullptr;
    CARTO_CUDA_CHECK(cudaMalloc(&a, kBytes));
    CARTO_CUDA_CHECK(cudaMalloc(&b, kBytes));
    CARTO_CUDA_CHECK(cudaMemset(a, 1, kBytes));
    EventTimer timer(backend().stream());
    double best = 1e30;
    for (int i = 0; i < 11; ++i) {
      timer.start();
      CARTO_CUDA_CHECK(cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice, backend().stream()));
      const double t = timer.stop();
      if (i > 0) best = std::min(best, t);  // the first copy warms up
    }
    cudaFree(a);
    cudaFree(b);
    return 2.0 * static_cast<double>(kBytes) / best;
  }();
  return measured;
}

inline void set_rate(benchmark::State& state, const char* name, double per_iteration) {
  state.counters[name] =
      benchmark::Counter(per_iteration, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace carto::bench

// main of a GPU benchmark program: one line and exit code 77 (skipped) without a CUDA device.
#define CARTO_CUDA_BENCHMARK_MAIN()                                   \
  int main(int argc, char** argv) {                                   \
    if (carto::cuda::device_count() == 0) {                           \
      std::puts("no CUDA device found; skipping");                    \
      return 77;                                                      \
    }                                                                 \
    benchmark::Initialize(&argc, argv);                               \
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1; \
    benchmark::RunSpecifiedBenchmarks();                              \
    benchmark::Shutdown();                                            \
    return 0;                                                         \
  }
