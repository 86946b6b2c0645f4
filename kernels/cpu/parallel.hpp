// cpu/parallel.hpp — a rank's loop kernels split over its threads (internal).
//
// Design note: a CpuBackend runs its kernels on threads() threads (cpu_backend.hpp says how many).
// parallel_ranges splits [0, n) into contiguous chunks, a few per thread, which the calling thread
// and its own team of workers (WorkerTeam, pool.cpp) take in turn from a shared counter: each rank
// thread that calls it has a team of its own, so thread ranks in one process never share or
// resize each other's teams. The calling thread starts on the first chunk at once. A worker that
// slept through the GEMM before wakes late (a futex wake): with one fixed range per thread the
// caller would wait for the worker's part after finishing its own, with chunks it takes more of
// them instead (GPT-2 124M on one rank, bench_train alternated, OPENBLAS_THREAD_TIMEOUT=13:
// 0.761-0.763 s/step against 0.768-0.769 with one range per thread). Every element is computed by
// the same code in the same order whatever the chunks and whichever thread runs them, so the
// results are the same bits on 1 thread and on many; kernels whose outputs sum over the split
// dimension (dgamma over rows) are not split. Chunks shorter than `grain` elements are not worth
// a thread: small calls run on the calling thread alone.
//
// Why not an OpenMP team: libgomp's idle threads spin on their core for a while after each
// parallel region (OMP_WAIT_POLICY is read once, when the library loads), and OpenBLAS's pthreads
// want that core for the GEMM that follows. On GPT-2 124M with both cores that spinning cost a
// third of the step (bench_train: 2.54 s/step with a libgomp team against 1.69 s with
// OMP_WAIT_POLICY=passive). A team's workers here sleep in the kernel (a futex through
// std::atomic::wait) as soon as a brief spin finds no work.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace carto::cpu::detail {

// Elements per thread below which a loop kernel stays on one thread (64 KiB of fp32).
inline constexpr std::int64_t kParallelGrain = 16384;
// Chunks per thread of a split call: enough that a late worker leaves the caller at most a chunk
// to wait for, few enough that each chunk's call costs nothing against its work.
inline constexpr std::int64_t kChunksPerThread = 4;

// The calling thread's workers: run(parts, body) calls body(p) once for each p in [0, parts),
// p = 0 on the calling thread and the others on workers, and returns when all have returned. An
// exception from any part is rethrown on the calling thread (the first one; the other parts still
// finish). Workers are started on first use, kept for the thread's lifetime and joined when it
// ends. Not reentrant: a body must not call run on the same thread.
class WorkerTeam {
 public:
  using Body = void (*)(const void* context, int part);
  static void run(int parts, Body body, const void* context);
};

// f(begin, end) over [0, n) in contiguous chunks of at least `grain` elements (but one call
// when n is shorter), on up to `threads` threads; f may run on any of them and must not depend on
// which or on how [0, n) is cut.
template <class F>
void parallel_ranges(int threads, std::int64_t n, std::int64_t grain, F&& f) {
  const std::int64_t g = std::max<std::int64_t>(grain, 1);
  const std::int64_t parts = std::min<std::int64_t>(threads, std::max<std::int64_t>(1, n / g));
  if (parts <= 1) {
    if (n > 0) f(std::int64_t{0}, n);
    return;
  }
  struct Context {
    F* f;
    std::int64_t n, chunks;
    mutable std::atomic<std::int64_t> next{0};
  } const context{&f, n, std::min(parts * kChunksPerThread, n / g)};
  WorkerTeam::run(
      static_cast<int>(parts),
      [](const void* raw, int /*part*/) {
        const auto& c = *static_cast<const Context*>(raw);
        for (std::int64_t i = c.next.fetch_add(1, std::memory_order_relaxed); i < c.chunks;
             i = c.next.fetch_add(1, std::memory_order_relaxed)) {
          (*c.f)(c.n * i / c.chunks, c.n * (i + 1) / c.chunks);
        }
      },
      &context);
}

}  // namespace carto::cpu::detail
