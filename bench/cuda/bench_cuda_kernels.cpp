// The CUDA backend's memory-bound kernels at GPT-2 124M training shapes (B = 8, S = 1024, H = 768,
// 12 heads), fp32 and bf16: layernorm forward, GELU forward, add, AdamW, copy_strided (the head
// split of the fused QKV projection) and softmax forward (causal). Each reports GB/s (the bytes the
// kernel must move at least: every input read once, every output written once) and two fractions
// of it: of_copy against the device-to-device cudaMemcpy bandwidth measured in the same run
// (bench::copy_bandwidth, read plus write), and of_profile against the memory bandwidth the cost
// model prices (hardware::h200(): memory_bandwidth · memory_efficiency), i.e. measured / predicted
// rate. BM_CopyD2D shows the copy itself.
#include <carto/cost/hardware.hpp>
#include <cstdint>
#include <string>

#include "cuda_bench.hpp"

namespace {

using namespace carto;

constexpr std::int64_t kRows = 8 * 1024;  // B·S tokens
constexpr std::int64_t kHidden = 768;
constexpr std::int64_t kHeads = 12;
constexpr std::int64_t kSeq = 1024;

DType dtype_of(const benchmark::State& state) {
  return state.range(0) == 0 ? DType::fp32 : DType::bf16;
}

// A device tensor of normal values.
struct Tensor {
  Tensor(const TensorShape& shape, DType dtype, std::uint64_t id)
      : buffer(bench::backend().allocate(shape, dtype, MemoryCategory::activations)),
        view(buffer.view(shape, dtype)) {
    bench::backend().fill_normal(view, 1.0f, {.seed = 7, .id = id}, {});
  }
  Buffer buffer;
  TensorView view;
};

void report(benchmark::State& state, double bytes) {
  const HardwareProfile hw = hardware::h200();
  state.SetLabel(std::string(to_string_view(dtype_of(state))));
  bench::set_rate(state, "GB/s", bytes * 1e-9);
  bench::set_rate(state, "of_copy", bytes / bench::copy_bandwidth());
  bench::set_rate(state, "of_profile", bytes / (hw.memory_bandwidth * hw.memory_efficiency));
}

void BM_CopyD2D(benchmark::State& state) {
  const auto bytes = static_cast<std::size_t>(kRows * kHidden * 16);
  Buffer a = bench::backend().allocate({{"bytes", static_cast<std::int64_t>(bytes)}},
                                       DType::fp8_e4m3, MemoryCategory::activations);
  Buffer b = bench::backend().allocate({{"bytes", static_cast<std::int64_t>(bytes)}},
                                       DType::fp8_e4m3, MemoryCategory::activations);
  bench::time_iterations(state, [&] {
    CARTO_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice,
                                     bench::backend().stream()));
  });
  bench::set_rate(state, "GB/s", 2.0 * static_cast<double>(bytes) * 1e-9);
  bench::set_rate(state, "of_copy", 2.0 * static_cast<double>(bytes) / bench::copy_bandwidth());
}

void BM_LayerNormForward(benchmark::State& state) {
  const DType dt = dtype_of(state);
  const TensorShape x_shape{{"rows", kRows}, {"hidden", kHidden}};
  Tensor x(x_shape, dt, 1), y(x_shape, dt, 2);
  Tensor gamma({{"hidden", kHidden}}, dt, 3), beta({{"hidden", kHidden}}, dt, 4);
  Tensor mean({{"rows", kRows}}, DType::fp32, 5), rstd({{"rows", kRows}}, DType::fp32, 6);
  bench::time_iterations(state, [&] {
    bench::backend().layernorm_forward(x.view, gamma.view, beta.view, y.view, mean.view, rstd.view,
                                       {});
  });
  const double e = static_cast<double>(size_bytes(dt));
  report(state, 2.0 * kRows * kHidden * e + 2.0 * kHidden * e + 2.0 * kRows * 4);
}

void BM_GeluForward(benchmark::State& state) {
  const DType dt = dtype_of(state);
  const TensorShape shape{{"rows", kRows}, {"ffn", 4 * kHidden}};
  Tensor x(shape, dt, 1), y(shape, dt, 2);
  bench::time_iterations(state, [&] { bench::backend().gelu_forward(x.view, y.view); });
  report(state, 2.0 * static_cast<double>(shape.numel() * size_bytes(dt)));
}

void BM_Add(benchmark::State& state) {
  const DType dt = dtype_of(state);
  const TensorShape shape{{"rows", kRows}, {"hidden", kHidden}};
  Tensor a(shape, dt, 1), b(shape, dt, 2), y(shape, dt, 3);
  bench::time_iterations(state, [&] { bench::backend().add(a.view, b.view, y.view); });
  report(state, 3.0 * static_cast<double>(shape.numel() * size_bytes(dt)));
}

void BM_AdamW(benchmark::State& state) {
  // GPT-2 124M's parameters in one tensor: fp32 master weights and moments, the gradient in the
  // benchmark's dtype. Reads param, m, v, grad; writes param, m, v.
  const DType dt = dtype_of(state);
  const TensorShape shape{{"params", 124 * 1000 * 1000}};
  Tensor param(shape, DType::fp32, 1), m(shape, DType::fp32, 2), v(shape, DType::fp32, 3);
  Tensor grad(shape, dt, 4);
  bench::backend().fill(v.view, 1e-4f);  // second moments are non-negative
  std::int64_t step = 1;
  bench::time_iterations(state, [&] {
    bench::backend().adamw_update(param.view, grad.view, m.view, v.view, {.step = step++});
  });
  report(state,
         static_cast<double>(shape.numel()) * (6.0 * 4 + static_cast<double>(size_bytes(dt))));
}

void BM_CopyStridedHeads(benchmark::State& state) {
  // Q out of the fused QKV projection (B, S, 3H) into (B, heads, S, d): split_heads' copy.
  const DType dt = dtype_of(state);
  const TensorShape fused{{"batch", kRows / kSeq}, {"seq", kSeq}, {"qkv", 3 * kHidden}};
  const TensorShape heads{
      {"batch", kRows / kSeq}, {"heads", kHeads}, {"seq", kSeq}, {"d", kHidden / kHeads}};
  Tensor src(fused, dt, 1), dst(heads, dt, 2);
  const StridedBox from = heads_box(fused, 3, 0, kHeads);
  const StridedBox to{.offset = 0,
                      .strides = {kHeads * kSeq * (kHidden / kHeads), kSeq * (kHidden / kHeads),
                                  kHidden / kHeads, 1}};
  const Index extents{kRows / kSeq, kHeads, kSeq, kHidden / kHeads};
  bench::time_iterations(state, [&] {
    bench::backend().copy_strided(src.view, from, dst.view, to, extents, CopyMode::assign);
  });
  report(state, 2.0 * static_cast<double>(heads.numel() * size_bytes(dt)));
}

void BM_SoftmaxForward(benchmark::State& state) {
  // The materialized attention probabilities of one layer: (B, heads, S, S), causal.
  const DType dt = dtype_of(state);
  const TensorShape shape{{"batch", kRows / kSeq}, {"heads", kHeads}, {"q", kSeq}, {"k", kSeq}};
  Tensor x(shape, dt, 1), y(shape, dt, 2);
  bench::time_iterations(state, [&] {
    bench::backend().softmax_forward(x.view, y.view, {.scale = 0.125f, .masking = Masking::causal});
  });
  report(state, 2.0 * static_cast<double>(shape.numel() * size_bytes(dt)));
}

// Arg 0: fp32, 1: bf16.
BENCHMARK(BM_CopyD2D)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_LayerNormForward)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_GeluForward)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Add)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_AdamW)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_CopyStridedHeads)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SoftmaxForward)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

CARTO_CUDA_BENCHMARK_MAIN();
