// cuda/softmax.cu — softmax(scale · x) along the last dim with an optional causal mask.
//
// Design note. One thread group per row (tiling::row_launch: a warp for rows of at most 1024 keys,
// else the whole block), with a grid stride over rows. Row r is query r % Sq of the last two dims;
// under a causal mask it sees the keys whose global position (placement offset + local index) is
// not after its own, a prefix of `visible` keys (tiling::CausalMask, as the CPU's SoftmaxRows).
//  - forward_kernel: pass 1 keeps a running (max, Σ exp(x - max)) per thread over its keys — the
//    online softmax (Milakov & Gimelshein 2018), one read of the row for both statistics — and
//    merges the pairs over the group; pass 2 writes y = exp(scale·x - max) / Σ on the visible keys
//    and 0 on the masked tail. y may be x: every element is read and then written by one thread.
//  - backward_kernel: the group sums dy·y over the visible keys, then dx += scale·y·(dy - Σ);
//    masked entries (y = 0) are left untouched, as on the CPU.
// fp32 compute, fp32/bf16 loads and stores (launch.cuh). The sums are reduced in another order than
// the CPU's lanes, so results agree to fp32 rounding, not bit for bit.
#include <cstdint>
#include <string_view>

#include "cuda/reduce.cuh"
#include "cuda/reduction_checks.hpp"
#include "cuda/softmax.cuh"
#include "cuda/tiling.hpp"

namespace carto::cuda {

namespace {

// Row kernels run up to 1024 threads a block (tiling::row_launch): registers are capped to fit.
constexpr int kRowThreads = static_cast<int>(tiling::kMaxBlockThreads);

using tiling::CausalMask;
using tiling::RowLaunch;

// Rows of `keys` keys; row r is local query r % queries of the mask.
struct SoftmaxRows {
  std::int64_t rows = 0, keys = 0, queries = 1;
  CausalMask mask{};
};

__global__ void __launch_bounds__(kRowThreads)
    forward_kernel(Elements x, Elements y, SoftmaxRows geo, float scale, RowLaunch launch) {
  __shared__ MaxSum scratch[32];
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  for (std::int64_t r = g.first_row; r < geo.rows; r += g.row_step) {
    const std::int64_t base = r * geo.keys;
    const std::int64_t n = geo.mask.visible(r % geo.queries, geo.keys);
    MaxSum t = empty_max_sum();
    for (std::int64_t j = g.lane; j < n; j += width) t = push(t, scale * load(x, base + j));
    const MaxSum row = group_reduce(t, MergeOp{}, scratch, launch.whole_block());
    const float inv = 1.0f / row.sum;
    for (std::int64_t j = g.lane; j < geo.keys; j += width) {
      store(y, base + j, j < n ? expf(scale * load(x, base + j) - row.max) * inv : 0.0f);
    }
  }
}

__global__ void __launch_bounds__(kRowThreads)
    backward_kernel(Elements y, Elements dy, Elements dx, SoftmaxRows geo, float scale,
                    RowLaunch launch) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  for (std::int64_t r = g.first_row; r < geo.rows; r += g.row_step) {
    const std::int64_t base = r * geo.keys;
    const std::int64_t n = geo.mask.visible(r % geo.queries, geo.keys);
    float t = 0.0f;
    for (std::int64_t j = g.lane; j < n; j += width) t += load(dy, base + j) * load(y, base + j);
    const float dot = group_reduce(t, SumOp{}, scratch, launch.whole_block());
    for (std::int64_t j = g.lane; j < n; j += width) {
      const float yj = load(y, base + j);
      store(dx, base + j, load(dx, base + j) + scale * yj * (load(dy, base + j) - dot));
    }
  }
}

SoftmaxRows softmax_rows(std::string_view call, const TensorShape& s, const SoftmaxArgs& args) {
  SoftmaxRows out;
  out.keys = checks::last_extent(call, s);
  out.rows = out.keys > 0 ? s.numel() / out.keys : 0;
  out.mask.causal = args.masking == Masking::causal;
  if (out.mask.causal) {
    CARTO_CHECK(s.rank() >= 2, call, ": a causal mask needs (..., queries, keys); got ", s);
    const Index local = checks::extents_of(s);
    const GlobalIndexer where(args.placement, local);
    out.queries = local[s.rank() - 2];
    out.mask.query_offset = where.offset[s.rank() - 2];
    out.mask.key_offset = where.offset[s.rank() - 1];
  }
  return out;
}

}  // namespace

void softmax_forward(const Launch& launch, ConstTensorView x, TensorView y,
                     const SoftmaxArgs& args) {
  constexpr std::string_view kCall = "softmax_forward";
  const SoftmaxRows geo = softmax_rows(kCall, x.shape(), args);
  checks::require_numel(kCall, "y", y.numel(), x.numel());
  // visible depends on the row's query only, and grows with it: the first query decides.
  if (geo.rows > 0) {
    CARTO_CHECK(geo.mask.visible(0, geo.keys) > 0, kCall, ": row 0 has every key masked");
  }
  const Elements ex = checks::elements(kCall, "x", x), ey = checks::elements(kCall, "y", y);
  if (geo.rows == 0) return;
  const RowLaunch l = tiling::row_launch(geo.rows, geo.keys);
  forward_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(ex, ey, geo, args.scale, l);
  CARTO_CUDA_CHECK_LAUNCH();
}

void softmax_backward(const Launch& launch, ConstTensorView y, ConstTensorView dy, TensorView dx,
                      const SoftmaxArgs& args) {
  constexpr std::string_view kCall = "softmax_backward";
  const SoftmaxRows geo = softmax_rows(kCall, y.shape(), args);
  checks::require_numel(kCall, "dy", dy.numel(), y.numel());
  checks::require_numel(kCall, "dx", dx.numel(), y.numel());
  const Elements ey = checks::elements(kCall, "y", y), edy = checks::elements(kCall, "dy", dy),
                 edx = checks::elements(kCall, "dx", dx);
  if (geo.rows == 0) return;
  const RowLaunch l = tiling::row_launch(geo.rows, geo.keys);
  backward_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(ey, edy, edx, geo, args.scale, l);
  CARTO_CUDA_CHECK_LAUNCH();
}

}  // namespace carto::cuda
