// The calling thread's team of workers for the loop kernels (parallel.hpp's design note).
//
// A run publishes (parts, body, context), counts every worker in `pending` and advances
// `generation`; each worker wakes on the new generation, runs its part when it has one, and counts
// itself out, so the caller never writes the next run's fields while a worker may still read them.
// Waiting is a short spin and then std::atomic::wait, a futex on Linux: an idle team costs no CPU.
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "parallel.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace carto::cpu::detail {

namespace {

// Iterations of the spin before sleeping: a few microseconds, enough for back-to-back kernels,
// short enough that a GEMM's threads get the core back at once.
constexpr int kSpin = 512;

inline void relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

class Team {
 public:
  Team() = default;
  Team(const Team&) = delete;
  Team& operator=(const Team&) = delete;
  ~Team() {
    stop_.store(true, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (std::thread& t : workers_) t.join();
  }

  void run(int parts, WorkerTeam::Body body, const void* context) {
    grow(parts - 1);
    parts_ = parts;
    body_ = body;
    context_ = context;
    error_ = nullptr;
    const int workers = static_cast<int>(workers_.size());
    pending_.store(workers, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    std::exception_ptr mine;
    try {
      body(context, 0);
    } catch (...) {
      mine = std::current_exception();
    }
    int left = pending_.load(std::memory_order_acquire);
    for (int i = 0; left != 0 && i < kSpin; ++i, left = pending_.load(std::memory_order_acquire))
      relax();
    while (left != 0) {
      pending_.wait(left, std::memory_order_acquire);
      left = pending_.load(std::memory_order_acquire);
    }
    if (mine) std::rethrow_exception(mine);
    if (error_) std::rethrow_exception(error_);
  }

 private:
  void grow(int workers) {
    while (static_cast<int>(workers_.size()) < workers) {
      const int index = static_cast<int>(workers_.size()) + 1;
      const std::uint32_t seen = generation_.load(std::memory_order_relaxed);
      workers_.emplace_back([this, index, seen] { work(index, seen); });
    }
  }

  void work(int index, std::uint32_t seen) {
    for (;;) {
      std::uint32_t g = generation_.load(std::memory_order_acquire);
      for (int i = 0; g == seen && i < kSpin; ++i, g = generation_.load(std::memory_order_acquire))
        relax();
      while (g == seen) {
        generation_.wait(seen, std::memory_order_acquire);
        g = generation_.load(std::memory_order_acquire);
      }
      seen = g;
      if (stop_.load(std::memory_order_relaxed)) return;
      if (index < parts_) {
        try {
          body_(context_, index);
        } catch (...) {
          const std::lock_guard lock(error_mutex_);
          if (!error_) error_ = std::current_exception();
        }
      }
      if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
    }
  }

  std::vector<std::thread> workers_;
  std::atomic<std::uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  int parts_ = 0;
  WorkerTeam::Body body_ = nullptr;
  const void* context_ = nullptr;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace

void WorkerTeam::run(int parts, Body body, const void* context) {
  thread_local Team team;
  team.run(parts, body, context);
}

}  // namespace carto::cpu::detail
