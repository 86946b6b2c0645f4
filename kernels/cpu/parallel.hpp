// cpu/parallel.hpp — a rank's loop kernels split over its threads (internal).
//
// Design note: a CpuBackend runs its kernels on threads() threads (cpu_backend.hpp says how many).
// parallel_ranges splits [0, n) into at most that many contiguous ranges and runs them as one
// OpenMP team (`num_threads`, the calling thread taking one range): each rank thread that calls
// it gets a team of its own, so thread ranks in one process never share or resize each other's
// teams. Every element is computed by the same code in the same order whatever the split, so the
// results are the same bits on 1 thread and on many; kernels whose outputs sum over the split
// dimension (dgamma over rows) are not split. Ranges shorter than `grain` elements are not worth a
// thread: small calls run on the calling thread alone.
#pragma once

#include <algorithm>
#include <cstdint>

namespace carto::cpu::detail {

// Elements per thread below which a loop kernel stays on one thread (64 KiB of fp32).
inline constexpr std::int64_t kParallelGrain = 16384;

// f(begin, end) over [0, n), on up to `threads` threads, each range at least `grain` long.
template <class F>
void parallel_ranges(int threads, std::int64_t n, std::int64_t grain, F&& f) {
  const std::int64_t g = std::max<std::int64_t>(grain, 1);
  const std::int64_t parts = std::min<std::int64_t>(threads, std::max<std::int64_t>(1, n / g));
  if (parts <= 1) {
    if (n > 0) f(std::int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast <int>(parts)) schedule(static, 1)
  for (std::int64_t p = 0; p < parts; ++p) f(n * p / parts, n * (p + 1) / parts);
}

}  // namespace carto::cpu::detail
