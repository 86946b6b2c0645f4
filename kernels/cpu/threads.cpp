// The CPU backend's threads: how many a rank's kernels use, and OpenBLAS's process-wide count
// (cpu_backend.hpp's design note).
#include <cblas.h>
#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include "cpu_backend.hpp"
#include "elements.hpp"

namespace carto::cpu {

namespace {

// The CpuBackends alive and their requested thread counts (0: automatic), and the count last
// given to OpenBLAS.
struct Registry {
  std::mutex mutex;
  std::multiset<int> requested;
  std::atomic<int> alive{0};
};
Registry& registry() {
  static Registry r;
  return r;
}

int automatic_threads(int alive) { return std::max(1, available_cores() / std::max(alive, 1)); }

// OpenBLAS's count: the smallest threads() among the backends alive. Called with the mutex held.
void update_blas_threads(const Registry& r) {
  if (r.requested.empty()) return;
  const int automatic = automatic_threads(r.alive.load());
  int least = std::numeric_limits<int>::max();
  for (const int t : r.requested) least = std::min(least, t > 0 ? t : automatic);
  openblas_set_num_threads(least);
}

int threads_from_environment() {
  const char* text = std::getenv("CARTO_CPU_THREADS");
  if (text == nullptr || *text == '\0') return 0;
  char* end = nullptr;
  const long value = std::strtol(text, &end, 10);
  CARTO_CHECK(*end == '\0' && value >= 1 && value <= 1024, "CARTO_CPU_THREADS='", text,
              "': expected a whole number of threads from 1 to 1024 (or unset: the cores divided "
              "among the ranks in the process)");
  return static_cast<int>(value);
}

}  // namespace

int available_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
}

CpuBackend::CpuBackend(CpuOptions options) {
  CARTO_CHECK(options.threads >= 0 && options.threads <= 1024,
              "CpuOptions::threads = ", options.threads,
              ": expected 1 to 1024, or 0 for CARTO_CPU_THREADS / the cores "
              "divided among the ranks");
  requested_ = options.threads > 0 ? options.threads : threads_from_environment();
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.requested.insert(requested_);
  r.alive.fetch_add(1);
  update_blas_threads(r);
}

CpuBackend::~CpuBackend() {
  Registry& r = registry();
  const std::lock_guard lock(r.mutex);
  r.requested.erase(r.requested.find(requested_));
  r.alive.fetch_sub(1);
  update_blas_threads(r);
}

int CpuBackend::threads() const {
  return requested_ > 0 ? requested_ : automatic_threads(registry().alive.load());
}

int blas_threads() { return openblas_get_num_threads(); }

namespace detail {
int kernel_threads(const Backend& backend) {
  const auto* cpu = dynamic_cast<const CpuBackend*>(&backend);
  return cpu != nullptr ? cpu->threads() : 1;
}
}  // namespace detail

}  // namespace carto::cpu
