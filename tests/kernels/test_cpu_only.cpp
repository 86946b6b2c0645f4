// Tests of the CPU backend itself, not of the Backend interface: OpenBLAS's thread count and ranks
// on threads (test_cpu_threads.cpp: how many threads a rank's kernels use), the exact workspace the
// CPU kernels allocate (and that the fp32 path stages nothing), the vectorized exp behind its
// kernels, and the host allocator's cache.
#include <algorithm>
#include <bit>
#include <cpu/cpu_backend.hpp>
#include <cpu/vector_math.hpp>
#include <cstdint>
#include <cstring>
#include <thread>

#include "kernels/kernel_support.hpp"
#include "kernels/test_allocators.hpp"

using namespace carto;
using namespace carto::test;

namespace {
TensorShape matrix(std::int64_t batch, std::int64_t rows, std::int64_t cols) {
  return {{"batch", batch}, {"rows", rows}, {"cols", cols}};
}
}  // namespace

TEST_CASE("Ranks on threads run GEMMs concurrently with one BLAS thread each",
          "[kernels][gemm][cpu]") {
  cpu::CpuBackend first(cpu::CpuOptions{.threads = 1});
  CHECK(cpu::blas_threads() == 1);  // the smallest count of the backends alive
  const TensorShape s = matrix(1, 64, 64);
  const std::vector<float> a = random_normal(s.numel(), 200), b = random_normal(s.numel(), 201);
  DeviceTensor da(first, s, a), db(first, s, b), dc(first, s);
  first.gemm(da, db, dc, {});
  const std::vector<float> expected = dc.download();
  std::vector<std::int64_t> mismatches(4, 0);
  std::vector<std::thread> ranks;
  for (std::size_t r = 0; r < 4; ++r) {
    ranks.emplace_back([&, r] {
      cpu::CpuBackend backend;
      DeviceTensor x(backend, s, a), y(backend, s, b), z(backend, s);
      for (int rep = 0; rep < 20; ++rep) {
        backend.gemm(x, y, z, {});
        const std::vector<float> got = z.download();
        for (std::size_t i = 0; i < got.size(); ++i) mismatches[r] += got[i] != expected[i];
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  for (std::int64_t m : mismatches) CHECK(m == 0);  // one thread, same blocking: bitwise equal
}

TEST_CASE("CPU attention allocates one block of scores as its workspace",
          "[kernels][memory][cpu]") {
  cpu::CpuBackend backend;
  CountingAllocator counting(backend.device_allocator());
  const AllocatorGuard guard(backend, counting);
  {
    const TensorShape s{{"b", 1}, {"h", 2}, {"s", 16}, {"d", 4}};
    DeviceTensor q(backend, s, random_normal(s.numel(), 500));
    CHECK(counting.live == s.numel() * 4);
    DeviceTensor out(backend, s), lse(backend, {{"rows", 32}});
    backend.attention_forward(q, q, q, out, lse, {.scale = 0.5f});
    // Workspace: the scores of one block of query rows (all 16) against the 16 keys, and a row of
    // 16 dropout factors, allocated as temporaries and freed again; fp32 views stage nothing.
    CHECK(counting.peak == (2 * s.numel() + 32 + 16 * 16 + 16) * 4);  // q, out, lse, workspace
    CHECK(counting.calls[static_cast<std::size_t>(MemoryCategory::temporaries)] == 1);
  }
  CHECK(counting.live == 0);
}

TEST_CASE("CPU kernels stage bf16 views in temporaries and fp32 views not at all",
          "[kernels][memory][cpu]") {
  cpu::CpuBackend backend;
  CountingAllocator counting(backend.device_allocator());
  const AllocatorGuard guard(backend, counting);
  const auto temporaries = [&] {
    return counting.calls[static_cast<std::size_t>(MemoryCategory::temporaries)];
  };
  const TensorShape s{{"n", 10000}};
  DeviceTensor x32(backend, s, random_normal(s.numel(), 510)), y32(backend, s);
  DeviceTensor x16(backend, s, random_normal(s.numel(), 510), DType::bf16),
      y16(backend, s, DType::bf16);
  const std::int64_t before = temporaries();
  backend.gelu_forward(x32, y32);
  backend.add_scaled(x32, 0.5f, y32);
  CHECK(temporaries() == before);
  const std::int64_t tensors = counting.live;
  backend.gelu_forward(x16, y16);
  CHECK(temporaries() == before + 1);
  // Two slots of one block (4096 fp32) each, not the whole tensor.
  CHECK(counting.peak - tensors == 2 * 4096 * 4);
  CHECK(counting.live == tensors);
}

// The exp behind softmax, attention, cross-entropy and GELU, against exp in double at every
// 257th float of its normal range (8.7 million arguments), and at the edges it documents.
TEST_CASE("the kernels' vectorized exp is within 2 ulp", "[kernels][exp][cpu]") {
  using cpu::detail::exp_approx;
  const auto bits = [](float f) { return std::bit_cast<std::uint32_t>(f); };
  double worst = 0;
  float worst_at = 0;
  std::int64_t over = 0;
  for (const float sign : {1.0f, -1.0f}) {
    const float limit = sign > 0 ? 88.3762f : -87.3365f;
    for (std::uint32_t b = 0; b <= bits(std::fabs(limit)); b += 257) {
      const float x = sign * std::bit_cast<float>(b);
      const double exact = std::exp(static_cast<double>(x));
      const auto rounded = static_cast<float>(exact);
      const double ulp = std::nextafter(rounded, INFINITY) - rounded;
      const double err = std::fabs(static_cast<double>(exp_approx(x)) - exact) / ulp;
      over += err > 2.0;
      if (err > worst) {
        worst = err;
        worst_at = x;
      }
    }
  }
  INFO("worst " << worst << " ulp at " << worst_at);
  CHECK(over == 0);
  CHECK(exp_approx(0.0f) == 1.0f);
  CHECK(exp_approx(-INFINITY) == 0.0f);  // masked scores
  CHECK(exp_approx(-100.0f) == 0.0f);    // below FLT_MIN: 0, not a subnormal
  CHECK(exp_approx(89.0f) == INFINITY);
  CHECK(std::isnan(exp_approx(NAN)));
}

TEST_CASE("CPU host allocator: large freed blocks come back for the same size, within the peak",
          "[kernels][memory][cpu]") {
  cpu::HostAllocator host;
  constexpr std::size_t big = cpu::HostAllocator::kCachedFrom * 4, small = 1024;
  void* a = host.allocate(big, MemoryCategory::temporaries);
  REQUIRE(a != nullptr);
  CHECK(reinterpret_cast<std::uintptr_t>(a) % 64 == 0);
  std::memset(a, 0x5A, big);
  host.deallocate(a, big, MemoryCategory::temporaries);
  CHECK(host.cached_bytes() == big);
  CHECK(host.live_bytes() == 0);
  // The same size gets the same block back; its contents are whatever was left there.
  void* b = host.allocate(big, MemoryCategory::activations);
  CHECK(b == a);
  CHECK(host.cached_bytes() == 0);
  CHECK(static_cast<unsigned char*>(b)[big - 1] == 0x5A);
  host.deallocate(b, big, MemoryCategory::activations);
  // Small blocks are not cached.
  void* s = host.allocate(small, MemoryCategory::temporaries);
  host.deallocate(s, small, MemoryCategory::temporaries);
  CHECK(host.cached_bytes() == big);
  // Another size misses; live + cached stays within 1.25 times the peak (big): the cached block
  // would make it 1.5, so it goes back to the system.
  void* c = host.allocate(big / 2, MemoryCategory::temporaries);
  CHECK(host.live_bytes() == big / 2);
  CHECK(host.live_bytes() + host.cached_bytes() <= big + big / 4);
  CHECK(host.cached_bytes() == 0);
  host.deallocate(c, big / 2, MemoryCategory::temporaries);
  CHECK(host.cached_bytes() == big / 2);
  host.release_cached();
  CHECK(host.cached_bytes() == 0);
}

TEST_CASE("CPU host allocator: a repeated step's temporaries are served from the cache",
          "[kernels][memory][cpu]") {
  cpu::HostAllocator host;
  const std::vector<std::size_t> sizes = {1 << 20, 3 << 18, 1 << 20, 5 << 17, 1 << 22};
  std::vector<void*> first;
  for (int step = 0; step < 3; ++step) {
    std::vector<void*> blocks;
    for (const std::size_t n : sizes)
      blocks.push_back(host.allocate(n, MemoryCategory::temporaries));
    if (step == 0) first = blocks;
    // From the second step on every block is one the first step used (in some order).
    if (step > 0)
      for (void* p : blocks) CHECK(std::find(first.begin(), first.end(), p) != first.end());
    std::size_t total = 0;
    for (const std::size_t n : sizes) total += n;
    CHECK(host.live_bytes() == total);
    CHECK(host.cached_bytes() == 0);
    for (std::size_t i = 0; i < sizes.size(); ++i)
      host.deallocate(blocks[i], sizes[i], MemoryCategory::temporaries);
    CHECK(host.cached_bytes() == total);
  }
}
