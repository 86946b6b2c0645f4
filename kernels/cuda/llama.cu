// cuda/llama.cu — the CUDA backend's Llama kernels: RMSNorm over the last dim (whole rows and the
// split-column form: partial sums, all-reduce by the executor, apply), silu(gate)·up with its
// gradients, and rotary position embeddings. The CudaBackend methods are defined here.
//
// Design note. Semantics are backend.hpp's and the CPU backend's (kernels/cpu/llama_norm.cpp,
// kernels/cpu/llama_elementwise.cpp); results agree with it to fp32 rounding (other summation
// orders, fused multiply-adds), not bit for bit, except rstd of rmsnorm_apply (below).
//  - rms_rows_kernel (forward, apply): one thread group per row — a warp for rows of at most 1024
//    columns, else the whole block (tiling::row_launch) — with a grid stride over rows, as
//    layernorm.cu. The forward sums x² over the row in fp32 and forms rstd = 1/sqrt(Σx²/C + eps) in
//    fp32, as the CPU does; apply forms rstd from the all-reduced Σx² in double (no multiply to
//    contract), so both backends store the same rstd for the same sums. Then y = x·rstd·γ.
//  - rms_partial_sums_kernel, rms_backward_partial_sums_kernel: the same groups, each thread
//    accumulating its columns in double, a double reduction, one rounding to fp32 per row (the
//    fp32 terms the CPU forms: x² exactly, dy·γ·(x·rstd) rounded in fp32).
//  - rms_backward_rows_kernel (backward, backward_apply): per row Σ dy·γ·x̂ (reduced in the group in
//    fp32, or read from the all-reduced sums), then dx (=, +=) rstd·(dy·γ − x̂·Σ/C).
//  - gamma_partials_kernel + gamma_finish_kernel: dgamma (=, +=) Σ_rows dy·x̂ without atomics, so
//    deterministic: blocks of 32 columns × 8 row lanes sum one chunk of rows each, the lanes folded
//    in order into a per-chunk partial in the workspace (tiling::column_chunks: at most one float
//    per row), then one thread per column adds the chunks in order; one chunk stores directly.
//  - silu_mul: one grid-stride thread per element; σ(z) = 1/(1 + exp(min(−z, 80))) as the CPU.
//  - rotary: rotary_table_kernel fills a table of cos and sin over the S local positions and d/2
//    frequencies, angle (position_offset + p)·θ^(−2i/d) and its cos, sin computed in double and
//    rounded once (S·d floats of workspace, as the CPU's table); rotary_kernel then rotates each
//    pair (2i, 2i+1) of every row by its table row (row index mod S), one thread per pair, so
//    y may be x. Backward is the inverse rotation (the sine negated).
// Gradients are stored in the caller's CopyMode by the kernels themselves (assign writes, no zero
// fill; accumulate adds in fp32 and rounds once). Loads widen fp32/bf16 to fp32 and stores round
// to nearest even (launch.cuh); rstd and sums are fp32.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "cuda/cuda_backend.hpp"
#include "cuda/elementwise.cuh"
#include "cuda/launch.cuh"
#include "cuda/reduce.cuh"
#include "cuda/reduction_checks.hpp"
#include "cuda/tiling.hpp"

namespace carto::cuda {

namespace {

// Row kernels run up to 1024 threads a block (tiling::row_launch): registers are capped to fit.
constexpr int kRowThreads = static_cast<int>(tiling::kMaxBlockThreads);

using tiling::RowLaunch;

__device__ __forceinline__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

// ---- RMSNorm kernels
// -----------------------------------------------------------------------------

// y = x·rstd·γ per row; rstd from the row's Σx² in fp32 (sums == nullptr) or from the global sums
// (rows) over global_columns, in double.
__global__ void __launch_bounds__(kRowThreads)
    rms_rows_kernel(Elements x, Elements gamma, Elements y, float* rstd, const float* sums,
                    std::int64_t rows, std::int64_t columns, double global_columns, float epsilon,
                    RowLaunch geo) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const std::int64_t base = r * columns;
    float s = 0.0f;
    if (sums == nullptr) {
      float q = 0.0f;
      for (std::int64_t j = g.lane; j < columns; j += width) {
        const float v = load(x, base + j);
        q += v * v;
      }
      q = group_reduce(q, SumOp{}, scratch, geo.whole_block());
      s = 1.0f / sqrtf(q / static_cast<float>(columns) + epsilon);
    } else {
      s = static_cast<float>(
          1.0 / sqrt(static_cast<double>(sums[r]) / global_columns + static_cast<double>(epsilon)));
    }
    for (std::int64_t j = g.lane; j < columns; j += width) {
      store(y, base + j, load(x, base + j) * s * load(gamma, j));
    }
    if (g.lane == 0) rstd[r] = s;
  }
}

// sums (rows) = Σ x² per row, accumulated in double.
__global__ void __launch_bounds__(kRowThreads)
    rms_partial_sums_kernel(Elements x, float* sums, std::int64_t rows, std::int64_t columns,
                            RowLaunch geo) {
  __shared__ double scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    double a = 0.0;
    for (std::int64_t j = g.lane; j < columns; j += width) {
      const double v = load(x, r * columns + j);
      a += v * v;  // exact: a widened fp32 squared fits in double
    }
    a = group_reduce(a, SumOp{}, scratch, geo.whole_block());
    if (g.lane == 0) sums[r] = static_cast<float>(a);
  }
}

// sums (rows) = Σ dy·γ·x̂ per row, each fp32 term accumulated in double.
__global__ void __launch_bounds__(kRowThreads)
    rms_backward_partial_sums_kernel(Elements dy, Elements x, Elements gamma, const float* rstd,
                                     float* sums, std::int64_t rows, std::int64_t columns,
                                     RowLaunch geo) {
  __shared__ double scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const float s = rstd[r];
    double a = 0.0;
    for (std::int64_t j = g.lane; j < columns; j += width) {
      const std::int64_t i = r * columns + j;
      const float xhat = load(x, i) * s;
      const float term = load(dy, i) * load(gamma, j) * xhat;
      a += static_cast<double>(term);
    }
    a = group_reduce(a, SumOp{}, scratch, geo.whole_block());
    if (g.lane == 0) sums[r] = static_cast<float>(a);
  }
}

// dx (=, +=) rstd·(dy·γ − x̂·Σ(dy·γ·x̂)·inv_c), the sum from the row itself (sums == nullptr) or
// from the global sums (rows).
__global__ void __launch_bounds__(kRowThreads)
    rms_backward_rows_kernel(Elements dy, Elements x, Elements gamma, const float* rstd,
                             const float* sums, Elements dx, bool accumulate, std::int64_t rows,
                             std::int64_t columns, float inv_c, RowLaunch geo) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(geo, blockIdx.x, threadIdx.x);
  const std::int64_t width = geo.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const std::int64_t base = r * columns;
    const float s = rstd[r];
    float gx = 0.0f;
    if (sums == nullptr) {
      float a = 0.0f;
      for (std::int64_t j = g.lane; j < columns; j += width) {
        a += load(dy, base + j) * load(gamma, j) * (load(x, base + j) * s);
      }
      gx = group_reduce(a, SumOp{}, scratch, geo.whole_block());
    } else {
      gx = sums[r];
    }
    const float gx_mean = gx * inv_c;
    for (std::int64_t j = g.lane; j < columns; j += width) {
      const float xhat = load(x, base + j) * s;
      const float grad = s * (load(dy, base + j) * load(gamma, j) - xhat * gx_mean);
      store(dx, base + j, accumulate ? load(dx, base + j) + grad : grad);
    }
  }
}

// One chunk of rows (blockIdx.y) of 32 columns (blockIdx.x): partial[chunk, c] = Σ dy·x̂ over the
// chunk's rows; 8 row lanes (threadIdx.x / 32) folded in order. Without partials (one chunk) the
// sum is stored into dgamma directly, in its mode.
__global__ void gamma_partials_kernel(Elements dy, Elements x, const float* rstd, float* partial,
                                      Elements dgamma, bool accumulate, std::int64_t rows,
                                      std::int64_t columns, std::int64_t chunk_rows) {
  constexpr int kTile = static_cast<int>(tiling::kColumnTile);
  constexpr int kLanes = static_cast<int>(tiling::kRowLanes);
  __shared__ float sg[kLanes][kTile + 1];
  const int tx = static_cast<int>(threadIdx.x) % kTile, ty = static_cast<int>(threadIdx.x) / kTile;
  const std::int64_t col = std::int64_t{blockIdx.x} * kTile + tx;
  const std::int64_t first = std::int64_t{blockIdx.y} * chunk_rows;
  const std::int64_t end = first + chunk_rows < rows ? first + chunk_rows : rows;
  float acc = 0.0f;
  if (col < columns) {
    for (std::int64_t r = first + ty; r < end; r += kLanes) {
      const std::int64_t i = r * columns + col;
      acc += load(dy, i) * (load(x, i) * rstd[r]);
    }
  }
  sg[ty][tx] = acc;
  __syncthreads();
  if (ty == 0 && col < columns) {
    float t = sg[0][tx];
    for (int l = 1; l < kLanes; ++l) t += sg[l][tx];
    if (partial == nullptr) {  // one chunk: straight into the gradient
      store(dgamma, col, accumulate ? load(dgamma, col) + t : t);
    } else {
      partial[std::int64_t{blockIdx.y} * columns + col] = t;
    }
  }
}

// dgamma[c] (=, +=) Σ_chunk partial[chunk, c], chunks in order.
__global__ void gamma_finish_kernel(const float* partial, std::int64_t chunks, std::int64_t columns,
                                    Elements dgamma, bool accumulate) {
  for (std::int64_t c = first_index(); c < columns; c += grid_stride()) {
    float t = 0.0f;
    for (std::int64_t k = 0; k < chunks; ++k) t += partial[k * columns + c];
    store(dgamma, c, accumulate ? load(dgamma, c) + t : t);
  }
}

// ---- silu(gate)·up
// -------------------------------------------------------------------------------

__device__ __forceinline__ float sigmoid(float z) { return 1.0f / (1.0f + expf(fminf(-z, 80.0f))); }

__global__ void silu_mul_forward_kernel(Elements gate, Elements up, Elements y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float z = load(gate, i);
    store(y, i, z * sigmoid(z) * load(up, i));
  }
}

// dgate (=, +=) dy·up·σ(z)·(1 + z·(1 − σ(z))), dup (=, +=) dy·z·σ(z).
__global__ void silu_mul_backward_kernel(Elements gate, Elements up, Elements dy, Elements dgate,
                                         Elements dup, std::int64_t n, bool accumulate) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float z = load(gate, i);
    const float s = sigmoid(z);
    const float d = load(dy, i);
    const float g = d * load(up, i) * (s * (1.0f + z * (1.0f - s)));
    const float u = d * (z * s);
    store(dgate, i, accumulate ? load(dgate, i) + g : g);
    store(dup, i, accumulate ? load(dup, i) + u : u);
  }
}

// ---- rotary
// --------------------------------------------------------------------------------------

// table[p·d + i] = cos, table[p·d + d/2 + i] = sin of (offset + p)·θ^(−2i/d), in double, rounded
// once; one thread per (position, frequency).
__global__ void rotary_table_kernel(float* table, std::int64_t seq, std::int64_t d, double theta,
                                    std::int64_t offset) {
  const std::int64_t half = d / 2;
  for (std::int64_t t = first_index(); t < seq * half; t += grid_stride()) {
    const std::int64_t p = t / half, i = t % half;
    const double pos = static_cast<double>(offset + p);
    const double angle = pos * pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(d));
    double s = 0.0, c = 0.0;
    sincos(angle, &s, &c);
    table[p * d + i] = static_cast<float>(c);
    table[p * d + half + i] = static_cast<float>(s);
  }
}

// y (=, +=) the rotation of each pair of x by its row's table row (the inverse when sign = −1);
// one thread per pair, which reads both elements before writing them (y may be x).
__global__ void rotary_kernel(Elements x, Elements y, const float* table, std::int64_t seq,
                              std::int64_t d, std::int64_t pairs, float sign, bool accumulate) {
  const std::int64_t half = d / 2;
  for (std::int64_t t = first_index(); t < pairs; t += grid_stride()) {
    const std::int64_t row = t / half, i = t % half;
    const float* cs = table + (row % seq) * d;
    const float c = cs[i], s = sign * cs[half + i];
    const std::int64_t at = row * d + 2 * i;
    const float a = load(x, at), b = load(x, at + 1);
    float v0 = a * c - b * s;
    float v1 = a * s + b * c;
    if (accumulate) {
      v0 = load(y, at) + v0;
      v1 = load(y, at + 1) + v1;
    }
    store(y, at, v0);
    store(y, at + 1, v1);
  }
}

// ---- host side
// -----------------------------------------------------------------------------------

// Makes the backend's device current and gives the launch context of one call (as
// cuda_backend.cu does for the other families).
Launch launch_of(CudaBackend& backend) {
  int current = -1;
  CARTO_CUDA_CHECK(cudaGetDevice(&current));
  if (current != backend.device()) CARTO_CUDA_CHECK(cudaSetDevice(backend.device()));
  return Launch{.stream = backend.stream(), .workspace = &backend.allocator()};
}

template <class Kernel, class... Args>
void launch_1d(const Launch& launch, std::int64_t n, Kernel kernel, Args... args) {
  if (n <= 0) return;
  const Grid1d grid = grid_1d(n);
  kernel<<<grid.blocks, grid.threads, 0, launch.stream>>>(args...);
  CARTO_CUDA_CHECK_LAUNCH();
}

struct RmsRows {
  std::int64_t rows = 0, columns = 0;
};

struct Counted {
  std::string_view what;
  std::int64_t numel = 0;
};

// Checks x (rows..., C) against the per-element views (dy, y, dx), the per-column views (gamma,
// dgamma) and the per-row views (rstd, sums), with the CPU backend's wording.
RmsRows check_rms(std::string_view call, const TensorShape& x,
                  std::initializer_list<Counted> elements, std::initializer_list<Counted> columns,
                  std::initializer_list<Counted> rows) {
  const std::int64_t c = checks::last_extent(call, x);
  CARTO_CHECK(c > 0, call, ": the normalized dim of ", x, " is empty");
  const RmsRows n{.rows = x.numel() / c, .columns = c};
  for (const Counted& v : elements) checks::require_numel(call, v.what, v.numel, x.numel());
  for (const Counted& v : columns) checks::require_numel(call, v.what, v.numel, c);
  for (const Counted& v : rows) checks::require_numel(call, v.what, v.numel, n.rows);
  return n;
}

void require_global(std::string_view call, std::int64_t global_columns, const RmsRows& n) {
  CARTO_CHECK(global_columns >= n.columns, call, ": ", global_columns,
              " global columns cannot hold the ", n.columns, " local ones");
}

// dgamma (=, +=) Σ_rows dy·x̂, deterministically: one kernel, or two with a workspace of partials
// when the rows are split into chunks. No rows: an assigned dgamma is zeroed.
void gamma_gradient(const Launch& launch, Elements dy, Elements x, const float* rstd,
                    TensorView dgamma, Elements edgamma, bool accumulate, const RmsRows& n) {
  if (n.rows == 0) {
    if (!accumulate) fill(launch, dgamma, 0.0f);
    return;
  }
  const tiling::ColumnChunks chunks = tiling::column_chunks(n.rows, n.columns);
  const std::size_t partial_floats =
      chunks.chunks > 1 ? static_cast<std::size_t>(chunks.chunks * n.columns) : 0;
  const Buffer work(*launch.workspace, partial_floats * sizeof(float), MemoryCategory::temporaries);
  float* partial = chunks.chunks > 1 ? static_cast<float*>(work.data()) : nullptr;
  const dim3 grid(static_cast<unsigned>(ceil_div(n.columns, tiling::kColumnTile)),
                  static_cast<unsigned>(chunks.chunks));
  gamma_partials_kernel<<<grid, static_cast<unsigned>(tiling::kColumnTile * tiling::kRowLanes), 0,
                          launch.stream>>>(dy, x, rstd, partial, edgamma, accumulate, n.rows,
                                           n.columns, chunks.chunk_rows);
  CARTO_CUDA_CHECK_LAUNCH();
  if (chunks.chunks == 1) return;
  const Grid1d g = grid_1d(n.columns);
  gamma_finish_kernel<<<g.blocks, g.threads, 0, launch.stream>>>(partial, chunks.chunks, n.columns,
                                                                 edgamma, accumulate);
  CARTO_CUDA_CHECK_LAUNCH();
}

// The rotation of x into y (forward), or its inverse (backward: x = dy, y = dx), in `mode`.
void rotary_apply(const Launch& launch, std::string_view call, ConstTensorView x, TensorView y,
                  const RotaryArgs& args, bool inverse, CopyMode mode) {
  checks::require_numel(call, inverse ? "dx" : "y", y.numel(), x.numel());
  const TensorShape& shape = x.shape();
  CARTO_CHECK(shape.rank() >= 2, call, ": x must be (..., S, d); got ", shape);
  const std::int64_t d = shape.dims()[shape.rank() - 1].extent;
  const std::int64_t seq = shape.dims()[shape.rank() - 2].extent;
  CARTO_CHECK(d > 0 && d % 2 == 0, call, ": the last dim of ", shape,
              " must be even (rotary rotates pairs)");
  CARTO_CHECK(args.theta > 1.0 && args.position_offset >= 0, call, ": theta must be above 1 (got ",
              args.theta, ") and position_offset non-negative (got ", args.position_offset, ")");
  const Elements ex = checks::elements(call, inverse ? "dy" : "x", x);
  const Elements ey = checks::elements(call, inverse ? "dx" : "y", y);
  const std::int64_t pairs = x.numel() / 2;
  if (pairs == 0) return;
  const Buffer table(*launch.workspace, static_cast<std::size_t>(seq * d) * sizeof(float),
                     MemoryCategory::temporaries);
  auto* ptable = static_cast<float*>(table.data());
  launch_1d(launch, seq * (d / 2), rotary_table_kernel, ptable, seq, d, args.theta,
            args.position_offset);
  launch_1d(launch, pairs, rotary_kernel, ex, ey, static_cast<const float*>(ptable), seq, d, pairs,
            inverse ? -1.0f : 1.0f, mode == CopyMode::accumulate);
  // `table` goes back to the caching allocator here, kept for this stream: a later user's kernels
  // run after these two.
}

}  // namespace

void CudaBackend::rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y,
                                  TensorView rstd, const RmsNormArgs& args) {
  constexpr std::string_view kCall = "rmsnorm_forward";
  const Launch launch = launch_of(*this);
  const RmsRows n = check_rms(kCall, x.shape(), {{"y", y.numel()}}, {{"gamma", gamma.numel()}},
                              {{"rstd", rstd.numel()}});
  const Elements ex = checks::elements(kCall, "x", x), eg = checks::elements(kCall, "gamma", gamma),
                 ey = checks::elements(kCall, "y", y);
  float* prstd = checks::stats(kCall, "rstd", rstd);
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  rms_rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      ex, eg, ey, prstd, nullptr, n.rows, n.columns, static_cast<double>(n.columns), args.epsilon,
      geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                   ConstTensorView rstd, TensorView dx, TensorView dgamma,
                                   const NormGradModes& modes) {
  constexpr std::string_view kCall = "rmsnorm_backward";
  const Launch launch = launch_of(*this);
  const RmsRows n =
      check_rms(kCall, x.shape(), {{"dy", dy.numel()}, {"dx", dx.numel()}},
                {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}}, {{"rstd", rstd.numel()}});
  const Elements edy = checks::elements(kCall, "dy", dy), ex = checks::elements(kCall, "x", x),
                 eg = checks::elements(kCall, "gamma", gamma),
                 edx = checks::elements(kCall, "dx", dx),
                 edg = checks::elements(kCall, "dgamma", dgamma);
  const float* prstd = checks::stats(kCall, "rstd", rstd);
  if (n.rows > 0) {
    const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
    rms_backward_rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
        edy, ex, eg, prstd, nullptr, edx, modes.dx == CopyMode::accumulate, n.rows, n.columns,
        1.0f / static_cast<float>(n.columns), geo);
    CARTO_CUDA_CHECK_LAUNCH();
  }
  gamma_gradient(launch, edy, ex, prstd, dgamma, edg, modes.dgamma == CopyMode::accumulate, n);
}

void CudaBackend::rmsnorm_partial_sums(ConstTensorView x, TensorView sums) {
  constexpr std::string_view kCall = "rmsnorm_partial_sums";
  const Launch launch = launch_of(*this);
  const RmsRows n = check_rms(kCall, x.shape(), {}, {}, {{"sums (rows...)", sums.numel()}});
  const Elements ex = checks::elements(kCall, "x", x);
  float* psums = checks::stats(kCall, "sums", sums);
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  rms_partial_sums_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(ex, psums, n.rows,
                                                                         n.columns, geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rmsnorm_apply(ConstTensorView x, ConstTensorView sums,
                                std::int64_t global_columns, ConstTensorView gamma, TensorView y,
                                TensorView rstd, const RmsNormArgs& args) {
  constexpr std::string_view kCall = "rmsnorm_apply";
  const Launch launch = launch_of(*this);
  const RmsRows n = check_rms(kCall, x.shape(), {{"y", y.numel()}}, {{"gamma", gamma.numel()}},
                              {{"rstd", rstd.numel()}, {"sums (rows...)", sums.numel()}});
  require_global(kCall, global_columns, n);
  const Elements ex = checks::elements(kCall, "x", x), eg = checks::elements(kCall, "gamma", gamma),
                 ey = checks::elements(kCall, "y", y);
  const float* psums = checks::stats(kCall, "sums", sums);
  float* prstd = checks::stats(kCall, "rstd", rstd);
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  rms_rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      ex, eg, ey, prstd, psums, n.rows, n.columns, static_cast<double>(global_columns),
      args.epsilon, geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x,
                                                ConstTensorView gamma, ConstTensorView rstd,
                                                TensorView sums) {
  constexpr std::string_view kCall = "rmsnorm_backward_partial_sums";
  const Launch launch = launch_of(*this);
  const RmsRows n = check_rms(kCall, x.shape(), {{"dy", dy.numel()}}, {{"gamma", gamma.numel()}},
                              {{"rstd", rstd.numel()}, {"sums (rows...)", sums.numel()}});
  const Elements edy = checks::elements(kCall, "dy", dy), ex = checks::elements(kCall, "x", x),
                 eg = checks::elements(kCall, "gamma", gamma);
  const float* prstd = checks::stats(kCall, "rstd", rstd);
  float* psums = checks::stats(kCall, "sums", sums);
  if (n.rows == 0) return;
  const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
  rms_backward_partial_sums_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
      edy, ex, eg, prstd, psums, n.rows, n.columns, geo);
  CARTO_CUDA_CHECK_LAUNCH();
}

void CudaBackend::rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x,
                                         ConstTensorView gamma, ConstTensorView rstd,
                                         ConstTensorView sums, std::int64_t global_columns,
                                         TensorView dx, TensorView dgamma,
                                         const NormGradModes& modes) {
  constexpr std::string_view kCall = "rmsnorm_backward_apply";
  const Launch launch = launch_of(*this);
  const RmsRows n = check_rms(kCall, x.shape(), {{"dy", dy.numel()}, {"dx", dx.numel()}},
                              {{"gamma", gamma.numel()}, {"dgamma", dgamma.numel()}},
                              {{"rstd", rstd.numel()}, {"sums (rows...)", sums.numel()}});
  require_global(kCall, global_columns, n);
  const Elements edy = checks::elements(kCall, "dy", dy), ex = checks::elements(kCall, "x", x),
                 eg = checks::elements(kCall, "gamma", gamma),
                 edx = checks::elements(kCall, "dx", dx),
                 edg = checks::elements(kCall, "dgamma", dgamma);
  const float* prstd = checks::stats(kCall, "rstd", rstd);
  const float* psums = checks::stats(kCall, "sums", sums);
  if (n.rows > 0) {
    const RowLaunch geo = tiling::row_launch(n.rows, n.columns);
    rms_backward_rows_kernel<<<geo.blocks, geo.threads, 0, launch.stream>>>(
        edy, ex, eg, prstd, psums, edx, modes.dx == CopyMode::accumulate, n.rows, n.columns,
        1.0f / static_cast<float>(global_columns), geo);
    CARTO_CUDA_CHECK_LAUNCH();
  }
  gamma_gradient(launch, edy, ex, prstd, dgamma, edg, modes.dgamma == CopyMode::accumulate, n);
}

void CudaBackend::silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) {
  constexpr std::string_view kCall = "silu_mul_forward";
  const Launch launch = launch_of(*this);
  checks::require_numel(kCall, "up", up.numel(), gate.numel());
  checks::require_numel(kCall, "y", y.numel(), gate.numel());
  launch_1d(launch, gate.numel(), silu_mul_forward_kernel, checks::elements(kCall, "gate", gate),
            checks::elements(kCall, "up", up), checks::elements(kCall, "y", y), gate.numel());
}

void CudaBackend::silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                                    TensorView dgate, TensorView dup, CopyMode mode) {
  constexpr std::string_view kCall = "silu_mul_backward";
  const Launch launch = launch_of(*this);
  checks::require_numel(kCall, "up", up.numel(), gate.numel());
  checks::require_numel(kCall, "dy", dy.numel(), gate.numel());
  checks::require_numel(kCall, "dgate", dgate.numel(), gate.numel());
  checks::require_numel(kCall, "dup", dup.numel(), gate.numel());
  launch_1d(launch, gate.numel(), silu_mul_backward_kernel, checks::elements(kCall, "gate", gate),
            checks::elements(kCall, "up", up), checks::elements(kCall, "dy", dy),
            checks::elements(kCall, "dgate", dgate), checks::elements(kCall, "dup", dup),
            gate.numel(), mode == CopyMode::accumulate);
}

void CudaBackend::rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) {
  rotary_apply(launch_of(*this), "rotary_forward", x, y, args, false, CopyMode::assign);
}

void CudaBackend::rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                                  CopyMode mode) {
  rotary_apply(launch_of(*this), "rotary_backward", dy, dx, args, true, mode);
}

}  // namespace carto::cuda
