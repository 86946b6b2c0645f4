// cuda/layernorm.cu — layernorm over the last dim: forward, backward, and the split-column form
// (partial sums, all-reduce by the executor, apply).
//
// Design note. Kernels and their decomposition:
//  - rows_kernel (forward, apply): one thread group per row — a warp for rows of at most 1024
//    columns, else the whole block (tiling::row_launch) — with a grid stride over rows. The
//    forward's statistics are two-pass in fp32, as the CPU backend computes them: the mean from
//    the row sum, then Σ (x - mean)², so no cancellation between E[x²] and E[x]²; the row is read
//    from global memory (L1/L2) once per pass instead of held in shared memory, which keeps any C
//    possible. apply takes the all-reduced (Σx, Σx²) instead and forms mean and rstd in double
//    exactly as the CPU does (no fused multiply-add: __dsub_rn/__dmul_rn), so both backends store
//    the same mean and rstd for the same sums.
//  - partial_sums_kernel, backward_partial_sums_kernel: the same groups, each thread accumulating
//    its columns in double, a double reduction, one rounding to fp32 per sum (as the CPU does; the
//    fp32 terms are those the CPU forms: x, x² exactly, dy·γ and dy·γ·x̂ rounded in fp32).
//  - backward_rows_kernel (backward, backward_apply): per row, the two sums Σ dy·γ and Σ dy·γ·x̂
//    (reduced in the group in fp32, or read from the all-reduced sums), then
//    dx += rstd·(dy·γ − Σdyγ/C − x̂·Σdyγx̂/C).
//  - column_partials_kernel + column_finish_kernel: dgamma += Σ_rows dy·x̂ and dbeta += Σ_rows dy
//    without atomics, so the result is deterministic: blocks of 32 columns × 8 row lanes sum one
//    chunk of rows each (coalesced: a warp reads 32 consecutive columns of one row), the 8 lanes
//    are folded in order through shared memory into a per-chunk partial in the workspace, and one
//    thread per column adds the chunks in order to its gradient (one rounding when it is bf16).
//    With a single chunk the first kernel adds into the gradients itself. tiling::column_chunks
//    bounds the workspace (2 · chunks · C floats) by the 2 floats per row the cost model prices.
// Loads widen fp32/bf16 to fp32 and stores round to nearest even (launch.cuh); mean, rstd and sums
// are fp32. The reduction order differs from the CPU's lanes, so results agree to fp32 rounding,
// not bit for bit (except mean and rstd of apply, computed from the same sums).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "cuda/layernorm.cuh"
#include "cuda/reduce.cuh"
#include "cuda/reduction_checks.hpp"
#include "cuda/tiling.hpp"

namespace carto::cuda {

namespace {

// Row kernels run up to 1024 threads a block (tiling::row_launch): registers are capped to fit.
constexpr int kRowThreads = static_cast<int>(tiling::kMaxBlockThreads);

using tiling::RowLaunch;

// ---- kernels
// -------------------------------------------------------------------------------------

// y = (x - mean)·rstd·gamma + beta per row; mean, rstd two-pass in fp32 (sums == nullptr) or from
// the global sums (rows, 2) over global_columns.
__global__ void __launch_bounds__(kRowThreads)
    rows_kernel(Elements x, Elements gamma, Elements beta, Elements y, float* mean, float* rstd,
                const float* sums, std::int64_t rows, std::int64_t columns, double global_columns,
                float epsilon, RowLaunch geo) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const std::int64_t base = r * columns;
    float mu = 0.0f, s = 0.0f;
    if (sums == nullptr) {
      float t = 0.0f;
      for (std::int64_t j = g.lane; j < columns; j += width) t += load(x, base + j);
      mu = group_reduce(t, SumOp{}, scratch, geo.whole_block()) / static_cast<float>(columns);
      float q = 0.0f;
      for (std::int64_t j = g.lane; j < columns; j += width) {
        const float d = load(x, base + j) - mu;
        q += d * d;
      }
      const float var = group_reduce(q, SumOp{}, scratch, geo.whole_block());
      s = 1.0f / sqrtf(var / static_cast<float>(columns) + epsilon);
    } else {
      const double m = static_cast<double>(sums[2 * r]) / global_columns;
      const double e2 = static_cast<double>(sums[2 * r + 1]) / global_columns;
      const double var = fmax(__dsub_rn(e2, __dmul_rn(m, m)), 0.0);
      mu = static_cast<float>(m);
      s = static_cast<float>(1.0 / sqrt(var + static_cast<double>(epsilon)));
    }
    for (std::int64_t j = g.lane; j < columns; j += width) {
      store(y, base + j, (load(x, base + j) - mu) * s * load(gamma, j) + load(beta, j));
    }
    if (g.lane == 0) {
      mean[r] = mu;
      rstd[r] = s;
    }
  }
}

// sums (rows, 2) = (Σ x, Σ x²) per row, accumulated in double.
__global__ void __launch_bounds__(kRowThreads)
    partial_sums_kernel(Elements x, float* sums, std::int64_t rows, std::int64_t columns,
                        RowLaunch geo) {
  __shared__ double scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    double a = 0.0, b = 0.0;
    for (std::int64_t j = g.lane; j < columns; j += width) {
      const double v = load(x, r * columns + j);
      a += v;
      b += v * v;  // exact: a widened fp32 squared fits in double
    }
    a = group_reduce(a, SumOp{}, scratch, geo.whole_block());
    b = group_reduce(b, SumOp{}, scratch, geo.whole_block());
    if (g.lane == 0) {
      sums[2 * r] = static_cast<float>(a);
      sums[2 * r + 1] = static_cast<float>(b);
    }
  }
}

// sums (rows, 2) = (Σ dy·γ, Σ dy·γ·x̂) per row, each fp32 term accumulated in double.
__global__ void __launch_bounds__(kRowThreads)
    backward_partial_sums_kernel(Elements dy, Elements x, Elements gamma, const float* mean,
                                 const float* rstd, float* sums, std::int64_t rows,
                                 std::int64_t columns, RowLaunch geo) {
  __shared__ double scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const float mu = mean[r], s = rstd[r];
    double a = 0.0, b = 0.0;
    for (std::int64_t j = g.lane; j < columns; j += width) {
      const std::int64_t i = r * columns + j;
      const float dyg = load(dy, i) * load(gamma, j);
      const float xhat = (load(x, i) - mu) * s;
      a += static_cast<double>(dyg);
      b += static_cast<double>(dyg * xhat);
    }
    a = group_reduce(a, SumOp{}, scratch, geo.whole_block());
    b = group_reduce(b, SumOp{}, scratch, geo.whole_block());
    if (g.lane == 0) {
      sums[2 * r] = static_cast<float>(a);
      sums[2 * r + 1] = static_cast<float>(b);
    }
  }
}

// dx += rstd·(dy·γ − mean(dy·γ) − x̂·mean(dy·γ·x̂)), the two means over `count` columns from the
// row's own sums (sums == nullptr) or from the global sums (rows, 2).
__global__ void __launch_bounds__(kRowThreads)
    backward_rows_kernel(Elements dy, Elements x, Elements gamma, const float* mean,
                         const float* rstd, const float* sums, Elements dx, std::int64_t rows,
                         std::int64_t columns, float count, RowLaunch geo) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  const float inv_c = 1.0f / count;
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const std::int64_t base = r * columns;
    const float mu = mean[r], s = rstd[r];
    float g_sum = 0.0f, gx_sum = 0.0f;
    if (sums == nullptr) {
      float a = 0.0f, b = 0.0f;
      for (std::int64_t j = g.lane; j < columns; j += width) {
        const float dyg = load(dy, base + j) * load(gamma, j);
        a += dyg;
        b += dyg * ((load(x, base + j) - mu) * s);
      }
      g_sum = group_reduce(a, SumOp{}, scratch, geo.whole_block());
      gx_sum = group_reduce(b, SumOp{}, scratch, geo.whole_block());
    } else {
      g_sum = sums[2 * r];
      gx_sum = sums[2 * r + 1];
    }
    const float g_mean = g_sum * inv_c, gx_mean = gx_sum * inv_c;
    for (std::int64_t j = g.lane; j < columns; j += width) {
      const float xhat = (load(x, base + j) - mu) * s;
      const float grad = s * (load(dy, base + j) * load(gamma, j) - g_mean - xhat * gx_mean);
      store(dx, base + j, load(dx, base + j) + grad);
    }
  }
}

// One chunk of rows (blockIdx.y) of 32 columns (blockIdx.x): partial_g[chunk, c] = Σ dy·x̂ and
// partial_b[chunk, c] = Σ dy over the chunk's rows; 8 row lanes (threadIdx.x / 32) folded in order.
// Without partials (one chunk) the sums are added to dgamma, dbeta directly.
__global__ void column_partials_kernel(Elements dy, Elements x, const float* mean,
                                       const float* rstd, float* partial_g, float* partial_b,
                                       Elements dgamma, Elements dbeta, std::int64_t rows,
                                       std::int64_t columns, std::int64_t chunk_rows) {
  constexpr int kTile = static_cast<int>(tiling::kColumnTile);
  constexpr int kLanes = static_cast<int>(tiling::kRowLanes);
  __shared__ float sg[kLanes][kTile + 1];
  __shared__ float sb[kLanes][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  const std::int64_t col = std::int64_t{blockIdx.x} * kTile + tx;
  const std::int64_t first = std::int64_t{blockIdx.y} * chunk_rows;
  const std::int64_t end = first + chunk_rows < rows ? first + chunk_rows : rows;
  float acc_g = 0.0f, acc_b = 0.0f;
  if (col < columns) {
    for (std::int64_t r = first + ty; r < end; r += kLanes) {
      const float d = load(dy, r * columns + col);
      const float xhat = (load(x, r * columns + col) - mean[r]) * rstd[r];
      acc_g += d * xhat;
      acc_b += d;
    }
  }
  sg[ty][tx] = acc_g;
  sb[ty][tx] = acc_b;
  __syncthreads();
  if (ty == 0 && col < columns) {
    float tg = sg[0][tx], tb = sb[0][tx];
    for (int l = 1; l < kLanes; ++l) {
      tg += sg[l][tx];
      tb += sb[l][tx];
    }
    if (partial_g == nullptr) {  // one chunk: straight into the gradients
      store(dgamma, col, load(dgamma, col) + tg);
      store(dbeta, col, load(dbeta, col) + tb);
    } else {
      partial_g[std::int64_t{blockIdx.y} * columns + col] = tg;
      partial_b[std::int64_t{blockIdx.y} * columns + col] = tb;
    }
  }
}

// dgamma[c] += Σ_chunk partial_g[chunk, c]; dbeta likewise; chunks in order.
__global__ void column_finish_kernel(const float* partial_g, const float* partial_b,
                                     std::int64_t chunks, std::int64_t columns, Elements dgamma,
                                     Elements dbeta) {
  for (std::int64_t c = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; c < columns;
       c += std::int64_t{gridDim.x} * blockDim.x) {
    float tg = 0.0f, tb = 0.0f;
    for (std::int64_t k = 0; k < chunks; ++k) {
      tg += partial_g[k * columns + c];
      tb += partial_b[k * columns + c];
    }
    store(dgamma, c, load(dgamma, c) + tg);
    store(dbeta, c, load(dbeta, c) + tb);
  }
}

// ---- host side
// -----------------------------------------------------------------------------------

struct NormRows {
  std::int64_t rows = 0, columns = 0;
};

// The element counts of a call's other views, by what they hold one value of (as the CPU checks).
struct Counted {
  std::string_view what;
  std::int64_t numel = 0;
};
struct NormViews {
  std::initializer_list<Counted> elements{};  // one per element of x (dy, y, dx)
  std::initializer_list<Counted> columns{};   // one per local column (gamma, beta and gradients)
  std::initializer_list<Counted> rows{};      // one per row (mean, rstd)
  std::int64_t sums = -1;                     // numel of (rows..., 2) sums; -1: no sums
};

NormRows check_norm(std::string_view call, const TensorShape& x, const NormViews& views) {
  const std::int64_t c = checks::last_extent(call, x);
  CARTO_CHECK(c > 0, call, ": the normalized dim of ", x, " is empty");
  const NormRows n{.rows = x.numel() / c, .columns = c};
  for (const Counted& v : views.elements) checks::require_numel(call, v.what, v.numel, x.numel());
  for (const Counted& v : views.columns) checks::require_numel(call, v.what, v.numel, c);
  for (const Counted& v : views.rows) checks::require_numel(call, v.what, v.numel, n.rows);
  if (views.sums >= 0) checks::require_numel(call, "sums (rows..., 2)", views.sums, 2 * n.rows);
  return n;
}

void require_global_columns(std::string_view call, std::int64_t global_columns, const NormRows& n) {
  CARTO_CHECK(global_columns >= n.columns, call, ": ", global_columns,
              " global columns cannot hold the ", n.columns, " local ones");
}

// dgamma += Σ_rows dy·x̂, dbeta += Σ_rows dy, deterministically: one kernel, or two with a
// workspace of partials when the rows are split into chunks.
void column_gradients(const Launch& launch, Elements dy, Elements x, const float* mean,
                      const float* rstd, Elements dgamma, Elements dbeta, const NormRows& n) {
  const tiling::ColumnChunks chunks = tiling::column_chunks(n.rows, n.columns);
  const std::size_t partial_floats =
      chunks.chunks > 1 ? static_cast<std::size_t>(chunks.chunks * n.columns) : 0;
  const Buffer work(*launch.workspace, 2 * partial_floats * sizeof(float),
                    MemoryCategory::temporaries);
  float* partial_g = chunks.chunks > 1 ? static_cast<float*>(work.data()) : nullptr;
  float* partial_b = chunks.chunks > 1 ? partial_g + partial_floats : nullptr;
  const dim3 grid(static_cast<unsigned>(ceil_div(n.columns, tiling::kColumnTile)),
                  static_cast<unsigned>(chunks.chunks));
  column_partials_kernel<<<grid, static_cast<unsigned>(tiling::kColumnTile * tiling::kRowLanes), 0,
                           launch.stream>>>(dy, x, mean, rstd, partial_g, partial_b, dgamma, dbeta,
                                            n.rows, n.columns, chunks.chunk_rows);
  CARTO_CUDA_CHECK_LAUNCH();
  if (chunks.chunks == 1) return;
  const Grid1d g = grid_1d(n.columns);
  column_finish_kernel<<<g.blocks, g.threads, 0, launch.stream>>>(
      partial_g, partial_b, chunks.chunks, n.columns, dgamma, dbeta);
  CARTO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm_forward(const Launch& launch, ConstTensorView x, ConstTensorView gamma,
                       ConstTensorView beta, TensorView y, TensorView mean, TensorView rstd,
                       const LayerNormArgs& args) {
  constexpr std::string_view kCall = "layernorm_forward";
  const NormRows n = check_norm(kCall, x.shape(),
                                {.elements = {{"y", y.numel()}},
                                 .columns = {{"gamma", gamma.numel()}, {"beta", beta.numel()}},
                                 .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}}});
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      checks::elements(kCall, "x", x), checks::elements(kCall, "gamma", gamma),
      checks::elements(kCall, "beta", beta), checks::elements(kCall, "y", y),
      checks::stats(kCall, "mean", mean), checks::stats(kCall, "rstd", rstd), nullptr, n.rows,
      n.columns, static_cast<double>(n.columns), args.epsilon, geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void layernorm_backward(const Launch& launch, ConstTensorView dy, ConstTensorView x,
                        ConstTensorView gamma, ConstTensorView mean, ConstTensorView rstd,
                        TensorView dx, TensorView dgamma, TensorView dbeta) {
  constexpr std::string_view kCall = "layernorm_backward";
  const NormRows n = check_norm(
      kCall, x.shape(),
      {.elements = {{"dy", dy.numel()}, {"dx", dx.numel()}},
       .columns = {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}, {"dbeta", dbeta.numel()}},
       .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}}});
  if (n.rows == 0) return;
  const Elements edy = checks::elements(kCall, "dy", dy), ex = checks::elements(kCall, "x", x);
  const float* pmean = checks::stats(kCall, "mean", mean);
  const float* prstd = checks::stats(kCall, "rstd", rstd);
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  backward_rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      edy, ex, checks::elements(kCall, "gamma", gamma), pmean, prstd, nullptr,
      checks::elements(kCall, "dx", dx), n.rows, n.columns, static_cast<float>(n.columns), geo);
  CARTO_CUDA_CHECK_LAUNCH();
  column_gradients(launch, edy, ex, pmean, prstd, checks::elements(kCall, "dgamma", dgamma),
                   checks::elements(kCall, "dbeta", dbeta), n);
}

void layernorm_partial_sums(const Launch& launch, ConstTensorView x, TensorView sums) {
  constexpr std::string_view kCall = "layernorm_partial_sums";
  const NormRows n = check_norm(kCall, x.shape(), {.sums = sums.numel()});
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  partial_sums_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      checks::elements(kCall, "x", x), checks::stats(kCall, "sums", sums), n.rows, n.columns, geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void layernorm_apply(const Launch& launch, ConstTensorView x, ConstTensorView sums,
                     std::int64_t global_columns, ConstTensorView gamma, ConstTensorView beta,
                     TensorView y, TensorView mean, TensorView rstd, const LayerNormArgs& args) {
  constexpr std::string_view kCall = "layernorm_apply";
  const NormRows n = check_norm(kCall, x.shape(),
                                {.elements = {{"y", y.numel()}},
                                 .columns = {{"gamma", gamma.numel()}, {"beta", beta.numel()}},
                                 .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}},
                                 .sums = sums.numel()});
  require_global_columns(kCall, global_columns, n);
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      checks::elements(kCall, "x", x), checks::elements(kCall, "gamma", gamma),
      checks::elements(kCall, "beta", beta), checks::elements(kCall, "y", y),
      checks::stats(kCall, "mean", mean), checks::stats(kCall, "rstd", rstd),
      checks::stats(kCall, "sums", sums), n.rows, n.columns, static_cast<double>(global_columns),
      args.epsilon, geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void layernorm_backward_partial_sums(const Launch& launch, ConstTensorView dy, ConstTensorView x,
                                     ConstTensorView gamma, ConstTensorView mean,
                                     ConstTensorView rstd, TensorView sums) {
  constexpr std::string_view kCall = "layernorm_backward_partial_sums";
  const NormRows n = check_norm(kCall, x.shape(),
                                {.elements = {{"dy", dy.numel()}},
                                 .columns = {{"gamma", gamma.numel()}},
                                 .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}},
                                 .sums = sums.numel()});
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  backward_partial_sums_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      checks::elements(kCall, "dy", dy), checks::elements(kCall, "x", x),
      checks::elements(kCall, "gamma", gamma), checks::stats(kCall, "mean", mean),
      checks::stats(kCall, "rstd", rstd), checks::stats(kCall, "sums", sums), n.rows, n.columns,
      geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void layernorm_backward_apply(const Launch& launch, ConstTensorView dy, ConstTensorView x,
                              ConstTensorView gamma, ConstTensorView mean, ConstTensorView rstd,
                              ConstTensorView sums, std::int64_t global_columns, TensorView dx,
                              TensorView dgamma, TensorView dbeta) {
  constexpr std::string_view kCall = "layernorm_backward_apply";
  const NormRows n = check_norm(
      kCall, x.shape(),
      {.elements = {{"dy", dy.numel()}, {"dx", dx.numel()}},
       .columns = {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}, {"dbeta", dbeta.numel()}},
       .rows = {{"mean", mean.numel()}, {"rstd", rstd.numel()}},
       .sums = sums.numel()});
  require_global_columns(kCall, global_columns, n);
  if (n.rows == 0) return;
  const Elements edy = checks::elements(kCall, "dy", dy), ex = checks::elements(kCall, "x", x);
  const float* pmean = checks::stats(kCall, "mean", mean);
  const float* prstd = checks::stats(kCall, "rstd", rstd);
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  backward_rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      edy, ex, checks::elements(kCall, "gamma", gamma), pmean, prstd,
      checks::stats(kCall, "sums", sums), checks::elements(kCall, "dx", dx), n.rows, n.columns,
      static_cast<float>(global_columns), geo);
  CARTO_CUDA_CHECK_LAUNCH();
  column_gradients(launch, edy, ex, pmean, prstd, checks::elements(kCall, "dgamma", dgamma),
                   checks::elements(kCall, "dbeta", dbeta), n);
}

}  // namespace carto::cuda
