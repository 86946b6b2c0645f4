// What only the CUDA backend can be asked, checked against the CPU backend (cpu::CpuBackend) as the
// reference:
//  - randomness is bit-identical: fill_normal (fp32) and dropout's masks are pure functions of
//    (RngStream, global element index), so both backends must produce the same bits, also for a
//    shard placed inside a larger global tensor (dropout's kept values are x · 1/(1-p), one fp32
//    multiply, so they are bit-equal too);
//  - forward kernels overwrite their outputs: every output starts as NaN on the GPU, so an element
//    a kernel forgets to write stays NaN and is counted;
//  - the caching allocator's bookkeeping: bytes in use are the size classes of the live requests,
//    freed blocks are reused without a new cudaMalloc, and the memory tracker installed on top sees
//    exactly the requested bytes, kernel workspace included and given back.
// Tolerances of the overwrite check: each backend's result is within fp32_chain(K, scale) of the
// exact value for a kernel whose longest chain of dependent roundings is K (the generic kernel
// tests hold both backends to that), so the two differ by at most twice that bound.
#include <bit>
#include <carto/runtime/executor.hpp>
#include <carto/runtime/memory.hpp>
#include <catch2/catch.hpp>
#include <cmath>
#include <cpu/cpu_backend.hpp>
#include <cstdint>
#include <cuda/cuda_backend.hpp>
#include <cuda/geometry.hpp>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "kernels/kernel_support.hpp"
#include "kernels/test_allocators.hpp"

using namespace carto;
using namespace carto::test;

namespace {

// Elements whose bits differ, and the first of them.
struct BitReport {
  std::int64_t differing = 0;
  std::int64_t first = -1;
};
BitReport compare_bits(const std::vector<float>& got, const std::vector<float>& want) {
  BitReport r;
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<std::uint32_t>(got[i]) != std::bit_cast<std::uint32_t>(want[i])) {
      if (r.first < 0) r.first = static_cast<std::int64_t>(i);
      ++r.differing;
    }
  }
  return r;
}

#define CARTO_CHECK_BITS(what, got, want)                                                      \
  do {                                                                                         \
    const BitReport bits_ = compare_bits((got), (want));                                       \
    INFO(what << ": " << bits_.differing << " of " << (want).size() << " elements differ"      \
              << (bits_.first >= 0 ? " (first at " + std::to_string(bits_.first) + ")" : "")); \
    CHECK(bits_.differing == 0);                                                               \
  } while (false)

cpu::CpuBackend& cpu_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

}  // namespace

TEST_CASE("fill_normal on CUDA equals the CPU backend bit for bit", "[cuda][rng]") {
  // Odd extents put shard edges inside Philox blocks of four normals.
  const TensorShape global{{"a", 10}, {"b", 7}, {"c", 258}};
  const TensorShape local{{"a", 5}, {"b", 7}, {"c", 129}};
  const RngStream rng{.seed = 91, .id = stream_id(RngPurpose::test, 3, 0)};
  struct Placed {
    TensorShape shape;
    ShardPlacement placement;
  };
  for (const Placed& p : {Placed{global, {}}, Placed{local, {{10, 7, 258}, {5, 0, 129}}}}) {
    DeviceTensor want(cpu_backend(), p.shape);
    DeviceTensor got(test_backend(), p.shape);
    cpu_backend().fill_normal(want, 0.02f, rng, p.placement);
    test_backend().fill_normal(got, 0.02f, rng, p.placement);
    CARTO_CHECK_BITS("fill_normal " << p.shape, got.download(), want.download());
  }
}

TEST_CASE("dropout on CUDA draws the CPU backend's masks bit for bit", "[cuda][rng]") {
  const DType dtype = CARTO_TEST_DTYPES();
  const TensorShape local{{"rows", 4}, {"cols", 33}};
  const ShardPlacement shard{.global_extents = {8, 66}, .offset = {4, 33}};
  const std::vector<float> x = random_input(local.numel(), 21, dtype);
  const std::vector<float> dy = random_input(local.numel(), 22, dtype);
  const std::vector<float> dx0 = random_input(local.numel(), 23, dtype);
  for (const float p : {0.1f, 0.5f}) {
    const DropoutArgs args{.probability = p, .rng = {.seed = 5, .id = 77}, .placement = shard};
    DeviceTensor want(cpu_backend(), local, x, dtype), got(test_backend(), local, x, dtype);
    DeviceTensor y_want(cpu_backend(), local, dtype), y_got(test_backend(), local, dtype);
    cpu_backend().dropout_forward(want, y_want, args);
    test_backend().dropout_forward(got, y_got, args);
    const std::vector<float> yw = y_want.download(), yg = y_got.download();
    // x is never exactly zero (random_input), so the zeros of y are the dropped elements.
    std::int64_t dropped = 0;
    for (const float v : yw) dropped += v == 0.0f ? 1 : 0;
    INFO("p = " << p << ", " << to_string_view(dtype) << ": " << dropped << " of " << yw.size()
                << " dropped");
    CHECK(dropped > 0);
    CHECK(dropped < static_cast<std::int64_t>(yw.size()));
    CARTO_CHECK_BITS("dropout_forward", yg, yw);

    // Backward adds dy · 1/(1-p) into dx where kept: the same mask, and dx unchanged elsewhere
    // (the sum may differ by the rounding of a fused multiply-add, so values are compared within
    // one rounding of the stored dtype).
    DeviceTensor dy_w(cpu_backend(), local, dy, dtype), dy_g(test_backend(), local, dy, dtype);
    DeviceTensor dx_w(cpu_backend(), local, dx0, dtype), dx_g(test_backend(), local, dx0, dtype);
    cpu_backend().dropout_backward(dy_w, dx_w, args, CopyMode::accumulate);
    test_backend().dropout_backward(dy_g, dx_g, args, CopyMode::accumulate);
    const std::vector<float> bw = dx_w.download(), bg = dx_g.download();
    std::int64_t mask_differs = 0;
    for (std::size_t i = 0; i < bw.size(); ++i) {
      const bool kept_w = bw[i] != dx0[i], kept_g = bg[i] != dx0[i];
      mask_differs += kept_w != kept_g ? 1 : 0;
    }
    CHECK(mask_differs == 0);
    const double u = dtype == DType::bf16 ? kBf16Unit : kUnit;
    CARTO_CHECK_CLOSE("dropout_backward", bg, to_double(bw),
                      (Tolerance{.atol = 0.0, .rtol = 2.0 * u}));
  }
}

namespace {

// One forward kernel run on both backends with the same inputs; the GPU outputs start as NaN.
struct OverwriteCase {
  std::string name;
  std::vector<std::pair<TensorShape, std::vector<float>>> inputs;
  std::vector<TensorShape> outputs;
  std::int64_t chain = 1;  // the longest chain of dependent fp32 roundings of an output element
  std::function<void(Backend&, std::vector<DeviceTensor>& in, std::vector<DeviceTensor>& out)> run;
};

void check_overwrites(const OverwriteCase& c) {
  auto make = [&](Backend& b, std::vector<DeviceTensor>& in, std::vector<DeviceTensor>& out,
                  float poison) {
    in.reserve(c.inputs.size());
    out.reserve(c.outputs.size());
    for (const auto& [shape, values] : c.inputs) in.emplace_back(b, shape, values);
    for (const TensorShape& shape : c.outputs) {
      out.emplace_back(b, shape);
      b.fill(out.back(), poison);
    }
  };
  std::vector<DeviceTensor> cin, cout, gin, gout;
  make(cpu_backend(), cin, cout, 0.0f);
  make(test_backend(), gin, gout, std::numeric_limits<float>::quiet_NaN());
  c.run(cpu_backend(), cin, cout);
  c.run(test_backend(), gin, gout);
  for (std::size_t o = 0; o < gout.size(); ++o) {
    const std::vector<float> got = gout[o].download();
    const std::vector<double> want = to_double(cout[o].download());
    std::int64_t unwritten = 0;
    for (const float v : got) unwritten += std::isnan(v) ? 1 : 0;
    INFO(c.name << " output " << o << ": " << unwritten << " of " << got.size()
                << " elements still NaN");
    CHECK(unwritten == 0);
    const Tolerance one = fp32_chain(c.chain, max_abs(want));
    CARTO_CHECK_CLOSE(c.name, got, want, (Tolerance{.atol = 2 * one.atol, .rtol = 2 * one.rtol}));
  }
}

TensorShape dims(std::initializer_list<std::int64_t> extents) {
  TensorShape s;
  int d = 0;
  for (const std::int64_t e : extents) {
    const std::string name = "d" + std::to_string(d++);
    s.push_back({.name = DimName(std::string_view(name)), .extent = e});
  }
  return s;
}

}  // namespace

TEST_CASE("CUDA forward kernels write every element of their outputs", "[cuda][kernels]") {
  auto in = [](std::initializer_list<std::int64_t> e, std::uint32_t object, float stddev = 1.0f) {
    const TensorShape s = dims(e);
    return std::pair<TensorShape, std::vector<float>>{s, random_normal(s.numel(), object, stddev)};
  };
  const std::vector<std::int32_t> ids{3, 0, 39, 17, 5, 5, 22, 8, 1, 30, 11, 2};
  const TensorShape ids_shape{{"b", 3}, {"s", 4}};
  std::vector<OverwriteCase> cases;
  cases.push_back({"gemm",
                   {in({2, 24, 40}, 1), in({40, 32}, 2)},
                   {dims({2, 24, 32})},
                   41,
                   [](Backend& b, auto& i, auto& o) { b.gemm(i[0], i[1], o[0], {}); }});
  cases.push_back({"layernorm_forward",
                   {in({6, 48}, 3), in({48}, 4), in({48}, 5)},
                   {dims({6, 48}), dims({6}), dims({6})},
                   2 * 48 + 8,
                   [](Backend& b, auto& i, auto& o) {
                     b.layernorm_forward(i[0], i[1], i[2], o[0], o[1], o[2], {});
                   }});
  cases.push_back({"softmax_forward",
                   {in({2, 3, 16, 16}, 6)},
                   {dims({2, 3, 16, 16})},
                   16 + 8,
                   [](Backend& b, auto& i, auto& o) {
                     b.softmax_forward(i[0], o[0], {.scale = 0.5f, .masking = Masking::causal});
                   }});
  cases.push_back({"attention_forward",
                   {in({2, 2, 16, 8}, 7), in({2, 2, 16, 8}, 8), in({2, 2, 16, 8}, 9)},
                   {dims({2, 2, 16, 8}), dims({2, 2, 16})},
                   2 * 16 + 8 + 8,
                   [](Backend& b, auto& i, auto& o) {
                     b.attention_forward(i[0], i[1], i[2], o[0], o[1],
                                         {.scale = 0.35355339f, .masking = Masking::causal});
                   }});
  cases.push_back(
      {"gelu_forward", {in({1000}, 10)}, {dims({1000})}, 8, [](Backend& b, auto& i, auto& o) {
         b.gelu_forward(i[0], o[0]);
       }});
  cases.push_back({"dropout_forward",
                   {in({3, 100}, 11)},
                   {dims({3, 100})},
                   1,
                   [](Backend& b, auto& i, auto& o) {
                     b.dropout_forward(i[0], o[0], {.probability = 0.25f, .rng = {.seed = 3}});
                   }});
  cases.push_back(
      {"add", {in({500}, 12), in({500}, 13)}, {dims({500})}, 1, [](Backend& b, auto& i, auto& o) {
         b.add(i[0], i[1], o[0]);
       }});
  cases.push_back({"scale", {in({500}, 14)}, {dims({500})}, 1, [](Backend& b, auto& i, auto& o) {
                     b.scale(i[0], 1.7f, o[0]);
                   }});
  cases.push_back({"bias_forward",
                   {in({4, 30}, 15), in({30}, 16)},
                   {dims({4, 30})},
                   1,
                   [](Backend& b, auto& i, auto& o) { b.bias_forward(i[0], i[1], o[0]); }});
  cases.push_back({"embedding_forward",
                   {in({40, 16}, 17)},
                   {dims({3, 4, 16})},
                   0,
                   [&](Backend& b, auto& i, auto& o) {
                     const DeviceIds d(b, ids_shape, ids);
                     b.embedding_forward(i[0], d, o[0], {});
                     b.synchronize();
                   }});
  cases.push_back({"cross_entropy_forward",
                   {in({12, 40}, 18)},
                   {dims({1}), dims({12})},
                   40 + 8,
                   [&](Backend& b, auto& i, auto& o) {
                     const DeviceIds t(b, {{"rows", 12}}, ids);
                     b.cross_entropy_forward(i[0], t, o[0], o[1], {});
                     b.synchronize();
                   }});
  cases.push_back({"cross_entropy_row_max",
                   {in({12, 40}, 19)},
                   {dims({12})},
                   0,
                   [](Backend& b, auto& i, auto& o) { b.cross_entropy_row_max(i[0], o[0]); }});
  cases.push_back({"copy_strided (a transpose)",
                   {in({6, 10}, 20)},
                   {dims({10, 6})},
                   0,
                   [](Backend& b, auto& i, auto& o) {
                     b.copy_strided(i[0], {.offset = 0, .strides = {1, 10}}, o[0],
                                    {.offset = 0, .strides = {6, 1}}, {10, 6}, CopyMode::assign);
                   }});
  for (const OverwriteCase& c : cases) {
    SECTION(c.name) { check_overwrites(c); }
  }
}

TEST_CASE("the caching allocator tracks what it hands out and reuses freed blocks",
          "[cuda][memory]") {
  cuda::CudaBackend backend;
  cuda::CachingAllocator& cache = backend.caching_allocator();
  const std::size_t base = cache.allocated_bytes();
  const std::vector<std::int64_t> elements{1, 100, 257, 5000, 70000, 1 << 20, (3 << 20) + 7};
  std::size_t classes = 0;
  std::int64_t requested = 0;
  for (const std::int64_t n : elements) {
    classes += cuda::size_class(static_cast<std::size_t>(n) * 4);
    requested += n * 4;
  }
  MemoryTracker tracker;
  TrackingAllocator tracking(backend.device_allocator(), tracker);
  const AllocatorGuard guard(backend, tracking);
  auto hold_all = [&] {
    std::vector<Buffer> held;
    for (const std::int64_t n : elements)
      held.push_back(backend.allocate({{"n", n}}, DType::fp32, MemoryCategory::activations));
    return held;
  };
  std::int64_t mallocs_after_first = 0;
  {
    const std::vector<Buffer> held = hold_all();
    CHECK(cache.allocated_bytes() - base == classes);
    CHECK(cache.reserved_bytes() >= cache.allocated_bytes());
    CHECK(tracker.current_bytes() == requested);
    mallocs_after_first = cache.mallocs();
  }
  CHECK(cache.allocated_bytes() == base);
  CHECK(tracker.current_bytes() == 0);
  CHECK(tracker.peak_bytes() == requested);
  {
    const std::int64_t hits = cache.cache_hits();
    const std::vector<Buffer> again = hold_all();
    CHECK(cache.mallocs() == mallocs_after_first);  // every block came from the cache
    CHECK(cache.cache_hits() - hits == static_cast<std::int64_t>(elements.size()));
  }
  // A kernel's workspace goes through the tracker and is given back once the kernel is enqueued.
  {
    const TensorShape qkv{{"b", 2}, {"a", 4}, {"s", 64}, {"d", 16}};
    DeviceTensor q(backend, qkv, random_normal(qkv.numel(), 30));
    DeviceTensor k(backend, qkv, random_normal(qkv.numel(), 31));
    DeviceTensor v(backend, qkv, random_normal(qkv.numel(), 32));
    DeviceTensor out(backend, qkv), lse(backend, {{"b", 2}, {"a", 4}, {"s", 64}});
    const std::int64_t held = tracker.current_bytes();
    const std::size_t held_classes = cache.allocated_bytes();
    backend.attention_forward(q, k, v, out, lse, {.scale = 0.25f, .masking = Masking::causal});
    backend.synchronize();
    CHECK(tracker.current_bytes() == held);
    CHECK(cache.allocated_bytes() == held_classes);
  }
}
