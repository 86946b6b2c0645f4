// The CPU backend's threads (cpu_backend.hpp's design note): how many a rank's kernels use, the
// CARTO_CPU_THREADS override and its refusal of bad values, OpenBLAS's process-wide count, and
// that the split loop kernels compute the same bits on one thread and on several, and how
// parallel_ranges cuts its range into chunks.
//
// References: the kernels on one thread (CpuOptions{.threads = 1}), for the kernels run on more
// threads; the per-shard adamw_update, for the fused adamw_update_all; an element-by-element loop
// on the host, for strided copies whose dims merge into long runs; the range itself, for the
// chunks parallel_ranges hands out.
#include <algorithm>
#include <cpu/cpu_backend.hpp>
#include <cpu/parallel.hpp>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <utility>
#include <vector>

#include "kernels/kernel_support.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// Sets an environment variable for the scope of a test, restoring its absence after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { ::setenv(name, value, 1); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;
  ~ScopedEnv() { ::unsetenv(name_); }

 private:
  const char* name_;
};

std::vector<float> run_kernels(cpu::CpuBackend& backend, const std::vector<float>& x,
                               const std::vector<float>& dy) {
  const TensorShape s{{"rows", 512}, {"c", 384}};
  DeviceTensor tx(backend, s, x), tdy(backend, s, dy), dx(backend, s), y(backend, s);
  backend.gelu_backward(tx, tdy, dx, CopyMode::assign);
  backend.add_scaled(tdy, 0.5f, dx);
  DeviceTensor mean(backend, {{"rows", 512}}), rstd(backend, {{"rows", 512}});
  DeviceTensor g(backend, {{"c", 384}}, random_normal(384, 7)),
      b(backend, {{"c", 384}}, random_normal(384, 8));
  backend.layernorm_forward(dx, g, b, y, mean, rstd, {});
  backend.softmax_forward(y, y, {.scale = 0.7f});
  std::vector<float> out = y.download();
  const std::vector<float> m = mean.download();
  out.insert(out.end(), m.begin(), m.end());
  return out;
}

}  // namespace

TEST_CASE("CPU threads: an option, CARTO_CPU_THREADS, or the cores divided among the ranks",
          "[kernels][cpu][threads]") {
  const int cores = cpu::available_cores();
  REQUIRE(cores >= 1);
  {
    const cpu::CpuBackend three(cpu::CpuOptions{.threads = 3});
    CHECK(three.threads() == 3);
    CHECK(cpu::blas_threads() == 3);  // the only backend alive (this executable builds no other)
    const cpu::CpuBackend automatic;  // two alive: the cores split between them
    CHECK(automatic.threads() == std::max(1, cores / 2));
    CHECK(cpu::blas_threads() == std::min(3, std::max(1, cores / 2)));
  }
  {
    const cpu::CpuBackend alone;
    CHECK(alone.threads() == cores);
    CHECK(cpu::blas_threads() == cores);
  }
  {
    const ScopedEnv env("CARTO_CPU_THREADS", "2");
    const cpu::CpuBackend from_env;
    CHECK(from_env.threads() == 2);
    const cpu::CpuBackend explicit_one(cpu::CpuOptions{.threads = 1});  // the option wins
    CHECK(explicit_one.threads() == 1);
    CHECK(cpu::blas_threads() == 1);
  }
  for (const char* bad : {"0", "-3", "two", "4x", "5000"}) {
    const ScopedEnv env("CARTO_CPU_THREADS", bad);
    INFO("CARTO_CPU_THREADS=" << bad);
    CHECK_THROWS_WITH(cpu::CpuBackend(), Catch::Contains("CARTO_CPU_THREADS") &&
                                             Catch::Contains("whole number of threads"));
  }
  CHECK_THROWS_WITH(cpu::CpuBackend(cpu::CpuOptions{.threads = -1}),
                    Catch::Contains("CpuOptions::threads"));
}

TEST_CASE("CPU threads: parallel_ranges covers its range once, in chunks of at least the grain",
          "[kernels][cpu][threads]") {
  using cpu::detail::kChunksPerThread;
  using cpu::detail::parallel_ranges;
  // (begin, end) of every call, in the order the calls returned.
  const auto chunks = [](int threads, std::int64_t n, std::int64_t grain) {
    std::mutex mutex;
    std::vector<std::pair<std::int64_t, std::int64_t>> calls;
    parallel_ranges(threads, n, grain, [&](std::int64_t begin, std::int64_t end) {
      const std::lock_guard lock(mutex);
      calls.emplace_back(begin, end);
    });
    std::sort(calls.begin(), calls.end());
    return calls;
  };
  SECTION("a long range: a few chunks per thread that tile it") {
    for (const int threads : {2, 3, 4}) {
      const std::int64_t n = 1'000'003, grain = 1000;
      const auto calls = chunks(threads, n, grain);
      CHECK(static_cast<std::int64_t>(calls.size()) == threads * kChunksPerThread);
      std::int64_t next = 0;
      for (const auto& [begin, end] : calls) {
        CHECK(begin == next);
        CHECK(end - begin >= grain);
        next = end;
      }
      CHECK(next == n);
    }
  }
  SECTION("a range of a few grains: as many chunks as whole grains") {
    const auto calls = chunks(4, 5500, 1000);
    REQUIRE(calls.size() == 5);
    CHECK(calls.front().first == 0);
    CHECK(calls.back().second == 5500);
    for (const auto& [begin, end] : calls) CHECK(end - begin >= 1000);
  }
  SECTION("shorter than two grains, or one thread: one call on the caller") {
    CHECK(chunks(4, 1999, 1000) == std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 1999}});
    CHECK(chunks(1, 100'000, 10) ==
          std::vector<std::pair<std::int64_t, std::int64_t>>{{0, 100'000}});
    CHECK(chunks(4, 0, 10).empty());
  }
  SECTION("a chunk that throws: the error reaches the caller") {
    CHECK_THROWS_AS(parallel_ranges(2, 100'000, 1000,
                                    [](std::int64_t begin, std::int64_t) {
                                      if (begin > 50'000) throw std::runtime_error("chunk");
                                    }),
                    std::runtime_error);
  }
}

TEST_CASE("CPU threads: split loop kernels compute the one-thread bits",
          "[kernels][cpu][threads]") {
  const std::vector<float> x = random_normal(512 * 384, 1), dy = random_normal(512 * 384, 2);
  cpu::CpuBackend one(cpu::CpuOptions{.threads = 1});
  const std::vector<float> want = run_kernels(one, x, dy);
  for (const int threads : {2, 3}) {
    INFO(threads << " threads");
    cpu::CpuBackend many(cpu::CpuOptions{.threads = threads});
    const std::vector<float> got = run_kernels(many, x, dy);
    REQUIRE(got.size() == want.size());
    std::int64_t differ = 0;
    for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
    CHECK(differ == 0);
  }
}

TEST_CASE("CPU AdamW: one fused call over many shards equals one call per shard",
          "[kernels][cpu][adamw]") {
  cpu::CpuBackend backend(cpu::CpuOptions{.threads = 2});
  const std::vector<std::int64_t> sizes{70000, 3, 1, 40001, 768};  // ranges split inside shards
  const AdamWArgs args{.learning_rate = 3e-3f, .weight_decay = 0.1f, .step = 4};
  std::vector<DeviceTensor> fused, single, grads, m1, v1, m2, v2;
  std::vector<AdamWShard> shards;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const TensorShape s{{"flat", sizes[i]}};
    const auto o = static_cast<std::uint32_t>(10 * i);
    const std::vector<float> p = random_normal(sizes[i], o), g = random_normal(sizes[i], o + 1),
                             m = random_normal(sizes[i], o + 2, 0.1f);
    std::vector<float> v = random_normal(sizes[i], o + 3, 0.1f);
    for (float& e : v) e = e * e;  // a second moment is >= 0
    fused.emplace_back(backend, s, p);
    single.emplace_back(backend, s, p);
    grads.emplace_back(backend, s, g);
    m1.emplace_back(backend, s, m);
    v1.emplace_back(backend, s, v);
    m2.emplace_back(backend, s, m);
    v2.emplace_back(backend, s, v);
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    shards.push_back({.param = fused[i], .grad = grads[i], .m = m1[i], .v = v1[i]});
    backend.adamw_update(single[i], grads[i], m2[i], v2[i], args);
  }
  backend.adamw_update_all(shards, args);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    INFO("shard " << i);
    CHECK(fused[i].download() == single[i].download());
    CHECK(m1[i].download() == m2[i].download());
    CHECK(v1[i].download() == v2[i].download());
    CHECK(fused[i].download() != grads[i].download());
  }
}

TEST_CASE("CPU strided copies: whole rows merge into long runs, on several threads",
          "[kernels][cpu][copy]") {
  cpu::CpuBackend backend(cpu::CpuOptions{.threads = 2});
  // (8, 64, 96) into (8, 64, 160) at column 32: rows of 96 contiguous in the source only; then a
  // copy of whole (64, 96) planes between equal shapes, which merges into one run.
  const TensorShape src_shape{{"a", 8}, {"b", 64}, {"c", 96}},
      dst_shape{{"a", 8}, {"b", 64}, {"c", 160}};
  const std::vector<float> src = random_normal(src_shape.numel(), 30);
  std::vector<float> start = random_normal(dst_shape.numel(), 31);
  for (const CopyMode mode : {CopyMode::assign, CopyMode::accumulate}) {
    DeviceTensor s(backend, src_shape, src), d(backend, dst_shape, start);
    backend.copy_box(s, {.offset = {0, 0, 0}, .extent = {8, 64, 96}}, d, {0, 0, 32}, mode);
    std::vector<double> want(start.begin(), start.end());
    for (std::int64_t a = 0; a < 8; ++a)
      for (std::int64_t b = 0; b < 64; ++b)
        for (std::int64_t c = 0; c < 96; ++c) {
          const auto to = static_cast<std::size_t>((a * 64 + b) * 160 + 32 + c);
          const double v = src[static_cast<std::size_t>((a * 64 + b) * 96 + c)];
          want[to] = mode == CopyMode::assign ? v : static_cast<double>(start[to]) + v;
        }
    CARTO_CHECK_CLOSE("box copy", d.download(), want, fp32_chain(1, max_abs(want)));
  }
  DeviceTensor s(backend, src_shape, src), d(backend, src_shape);
  backend.copy_box(s, {.offset = {2, 0, 0}, .extent = {5, 64, 96}}, d, {1, 0, 0}, CopyMode::assign);
  const std::vector<float> got = d.download();
  for (std::size_t i = 0; i < static_cast<std::size_t>(5 * 64 * 96); ++i) {
    if (got[64 * 96 + i] != src[2 * 64 * 96 + i]) FAIL("element " << i << " differs");
  }
}
