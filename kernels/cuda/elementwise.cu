// cuda/elementwise.cu — the kernels of elementwise.cuh. Compiled with --fmad=false (see there).
#include <cuda_runtime.h>

#include <carto/runtime/kernel_checks.hpp>
#include <cstddef>
#include <string_view>

#include "cuda/elementwise.cuh"

namespace carto::cuda {

namespace {

// ---- checks (the CPU backend's messages) ---------------------------------------------------

using kernel_checks::extents_of;
using kernel_checks::require_numel;

// The element count of b after checking that b's dims are the trailing dims of x.
std::int64_t bias_width(std::string_view call, const TensorShape& x, const TensorShape& b) {
  bool ok = b.rank() <= x.rank();
  for (std::size_t i = 0; ok && i < b.rank(); ++i) {
    ok = b.dims()[i].extent == x.dims()[x.rank() - b.rank() + i].extent;
  }
  CARTO_CHECK(ok, call, ": bias ", b, " must match the trailing dims of ", x);
  return b.numel();
}

// ---- kernels -----------------------------------------------------------------------------------

__device__ __forceinline__ std::int64_t first_index() {
  return static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ std::int64_t grid_stride() {
  return static_cast<std::int64_t>(gridDim.x) * blockDim.x;
}

__global__ void fill_kernel(Elements x, std::int64_t n, float value) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) store(x, i, value);
}

// One thread per Philox block along a row: two normals (words 0, 1 and 2, 3).
__global__ void fill_normal_kernel(Elements x, RowPlacement rows, RngStream rng, float stddev,
                                   std::int64_t groups, std::int64_t total) {
  for (std::int64_t t = first_index(); t < total; t += grid_stride()) {
    const std::int64_t row = t / groups;
    const BlockGroup g = block_group(row_global_start(rows, row), rows.row_length, t % groups, 2);
    if (g.count == 0) continue;
    const PhiloxCounter words = rng::block(rng, g.block);
    const std::int64_t first = row * rows.row_length + g.first_col;
    for (int s = 0; s < g.count; ++s) {
      const int slot = g.first_slot + s;
      store(x, first + s, stddev * rng::normal_of_words(words[2 * slot], words[2 * slot + 1]));
    }
  }
}

__global__ void copy_strided_kernel(Elements src, Elements dst, StridedWalk walk, bool accumulate) {
  for (std::int64_t i = first_index(); i < walk.count; i += grid_stride()) {
    const WalkOffsets o = walk_offsets(walk, i);
    float v = load(src, o.src);
    if (accumulate) v += load(dst, o.dst);
    store(dst, o.dst, v);
  }
}

// GELU (tanh form) as the CPU backend writes it: 0.5·(1 + tanh u) = σ(2u) = 1 / (1 + e^(-2u)),
// with the exponent capped at 80 so that 1 + e and the products stay finite.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
struct GeluTerms {
  float e;      // e^(-2u)
  float sigma;  // 1 / (1 + e)
};
__device__ __forceinline__ GeluTerms gelu_terms(float v) {
  const float u = kSqrt2OverPi * (v + kGeluCubic * v * v * v);
  const float e = expf(fminf(-2.0f * u, 80.0f));
  return {e, 1.0f / (1.0f + e)};
}

__global__ void gelu_forward_kernel(Elements x, Elements y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load(x, i);
    store(y, i, v * gelu_terms(v).sigma);
  }
}

// dx += dy · (σ + 2x·σ·(1 - σ)·du/dx), 1 - σ = e·σ.
__global__ void gelu_backward_kernel(Elements x, Elements dy, Elements dx, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) {
    const float v = load(x, i);
    const GeluTerms t = gelu_terms(v);
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
    store(dx, i, load(dx, i) + load(dy, i) * (t.sigma + 2.0f * v * t.sigma * (t.e * t.sigma) * du));
  }
}

// Forward: dst = keep ? src·kept : 0. Backward: dst += keep ? src·kept : 0 (a dropped element is
// left as it is). One thread per Philox block along a row: four mask words.
__global__ void dropout_kernel(Elements src, Elements dst, RowPlacement rows, RngStream rng,
                               float probability, float kept, bool backward, std::int64_t groups,
                               std::int64_t total) {
  for (std::int64_t t = first_index(); t < total; t += grid_stride()) {
    const std::int64_t row = t / groups;
    const BlockGroup g = block_group(row_global_start(rows, row), rows.row_length, t % groups, 4);
    if (g.count == 0) continue;
    PhiloxCounter words{};
    if (probability > 0.0f) words = rng::block(rng, g.block);  // p = 0 keeps every element
    const std::int64_t first = row * rows.row_length + g.first_col;
    for (int s = 0; s < g.count; ++s) {
      const bool keep = rng::keep_of_word(words[g.first_slot + s], probability);
      const std::int64_t i = first + s;
      if (!backward) {
        store(dst, i, keep ? load(src, i) * kept : 0.0f);
      } else if (keep) {
        store(dst, i, load(dst, i) + load(src, i) * kept);
      }
    }
  }
}

__global__ void add_kernel(Elements a, Elements b, Elements y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    store(y, i, load(a, i) + load(b, i));
}

__global__ void scale_kernel(Elements x, float factor, Elements y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride()) store(y, i, factor * load(x, i));
}

__global__ void add_scaled_kernel(Elements x, float factor, Elements y, std::int64_t n) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    store(y, i, load(y, i) + factor * load(x, i));
}

__global__ void bias_forward_kernel(Elements x, Elements b, Elements y, std::int64_t n,
                                    std::int64_t width) {
  for (std::int64_t i = first_index(); i < n; i += grid_stride())
    store(y, i, load(x, i) + load(b, i % width));
}

// Pass 1 of bias_backward: partial[chunk, col] = Σ dy[row, col] over the chunk's rows.
// Block (kColumnTile, kRowLanes), grid (column tiles, row chunks).
__global__ void column_sums_kernel(Elements dy, std::int64_t rows, std::int64_t width,
                                   std::int64_t rows_per_chunk, float* partial) {
  __shared__ float lanes[kRowLanes][kColumnTile + 1];
  const std::int64_t col = static_cast<std::int64_t>(blockIdx.x) * kColumnTile + threadIdx.x;
  const std::int64_t chunk = blockIdx.y;
  const std::int64_t begin = chunk * rows_per_chunk;
  const std::int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float sum = 0.0f;
  if (col < width) {
    for (std::int64_t r = begin + threadIdx.y; r < end; r += kRowLanes)
      sum += load(dy, r * width + col);
  }
  lanes[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && col < width) {
    float total = lanes[0][threadIdx.x];
    for (int l = 1; l < kRowLanes; ++l) total += lanes[l][threadIdx.x];
    partial[chunk * width + col] = total;
  }
}

// Pass 2: db[col] += Σ_chunks partial[chunk, col], in chunk order.
__global__ void add_partials_kernel(const float* partial, std::int64_t chunks, std::int64_t width,
                                    Elements db) {
  for (std::int64_t col = first_index(); col < width; col += grid_stride()) {
    float total = 0.0f;
    for (std::int64_t c = 0; c < chunks; ++c) total += partial[c * width + col];
    store(db, col, load(db, col) + total);
  }
}

// ---- launching --------------------------------------------------------------------------------

template <class Kernel, class... Args>
void launch_1d(const Launch& launch, std::int64_t n, Kernel kernel, Args... args) {
  if (n <= 0) return;
  const Grid1d grid = grid_1d(n);
  kernel<<<grid.blocks, grid.threads, 0, launch.stream>>>(args...);
  CARTO_CUDA_CHECK_LAUNCH();
}

void check_dropout(std::string_view call, std::int64_t src, std::int64_t dst,
                   const DropoutArgs& args) {
  require_numel(call, "the output", dst, src);
  CARTO_CHECK(args.probability >= 0.0f && args.probability < 1.0f, call,
              ": dropout probability must be in [0, 1); got ", args.probability);
}

void run_dropout(const Launch& launch, ConstTensorView src, TensorView dst, const DropoutArgs& args,
                 bool backward) {
  const RowPlacement rows = row_placement(args.placement, extents_of(src.shape()));
  const std::int64_t groups = groups_per_row(rows.row_length, 4);
  const float kept = 1.0f / (1.0f - args.probability);
  launch_1d(launch, src.numel() == 0 ? 0 : rows.rows * groups, dropout_kernel, elements_of(src),
            elements_of(dst), rows, args.rng, args.probability, kept, backward, groups,
            rows.rows * groups);
}

}  // namespace

void fill(const Launch& launch, TensorView x, float value) {
  launch_1d(launch, x.numel(), fill_kernel, elements_of(x), x.numel(), value);
}

void fill_normal(const Launch& launch, TensorView x, float stddev, RngStream rng,
                 const ShardPlacement& placement) {
  const Elements e = elements_of(x);
  const RowPlacement rows = row_placement(placement, extents_of(x.shape));
  const std::int64_t groups = groups_per_row(rows.row_length, 2);
  const std::int64_t total = x.numel() == 0 ? 0 : rows.rows * groups;
  launch_1d(launch, total, fill_normal_kernel, e, rows, rng, stddev, groups, total);
}

void copy_strided(const Launch& launch, ConstTensorView src, const StridedBox& from, TensorView dst,
                  const StridedBox& to, const Index& extents, CopyMode mode) {
  const StridedWalk walk = strided_walk(from, to, extents);
  if (walk.count == 0) return;
  const WalkOffsets last = walk_last(walk);
  CARTO_CHECK(from.offset >= 0 && last.src < src.numel(), "copy_strided: the source box reaches ",
              "element ", last.src, " of a tensor ", src.shape());
  CARTO_CHECK(to.offset >= 0 && last.dst < dst.numel(), "copy_strided: the destination box ",
              "reaches element ", last.dst, " of a tensor ", dst.shape);
  const Elements s = elements_of(src), d = elements_of(dst);
  const bool contiguous =
      walk.rank == 0 || (walk.rank == 1 && walk.src_stride[0] == 1 && walk.dst_stride[0] == 1);
  if (mode == CopyMode::assign && s.bf16 == d.bf16 && contiguous) {
    const std::size_t element = s.bf16 ? 2 : 4;
    CARTO_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(d.data) + walk.dst_offset * element,
                                     static_cast<const char*>(s.data) + walk.src_offset * element,
                                     static_cast<std::size_t>(walk.count) * element,
                                     cudaMemcpyDeviceToDevice, launch.stream));
    return;
  }
  launch_1d(launch, walk.count, copy_strided_kernel, s, d, walk, mode == CopyMode::accumulate);
}

void convert_elements(const Launch& launch, Elements src, Elements dst, std::int64_t count) {
  StridedWalk walk;
  walk.rank = 1;
  walk.extent[0] = count;
  walk.src_stride[0] = walk.dst_stride[0] = 1;
  walk.count = count;
  launch_1d(launch, count, copy_strided_kernel, src, dst, walk, false);
}

void gelu_forward(const Launch& launch, ConstTensorView x, TensorView y) {
  require_numel("gelu_forward", "y", y.numel(), x.numel());
  launch_1d(launch, x.numel(), gelu_forward_kernel, elements_of(x), elements_of(y), x.numel());
}

void gelu_backward(const Launch& launch, ConstTensorView x, ConstTensorView dy, TensorView dx) {
  require_numel("gelu_backward", "dy", dy.numel(), x.numel());
  require_numel("gelu_backward", "dx", dx.numel(), x.numel());
  launch_1d(launch, x.numel(), gelu_backward_kernel, elements_of(x), elements_of(dy),
            elements_of(dx), x.numel());
}

// y may be x: each element is read before it is written, by the same thread.
void dropout_forward(const Launch& launch, ConstTensorView x, TensorView y,
                     const DropoutArgs& args) {
  check_dropout("dropout_forward", x.numel(), y.numel(), args);
  run_dropout(launch, x, y, args, false);
}

void dropout_backward(const Launch& launch, ConstTensorView dy, TensorView dx,
                      const DropoutArgs& args) {
  check_dropout("dropout_backward", dy.numel(), dx.numel(), args);
  run_dropout(launch, dy, dx, args, true);
}

void add(const Launch& launch, ConstTensorView a, ConstTensorView b, TensorView y) {
  require_numel("add", "b", b.numel(), a.numel());
  require_numel("add", "y", y.numel(), a.numel());
  launch_1d(launch, a.numel(), add_kernel, elements_of(a), elements_of(b), elements_of(y),
            a.numel());
}

void scale(const Launch& launch, ConstTensorView x, float factor, TensorView y) {
  require_numel("scale", "y", y.numel(), x.numel());
  launch_1d(launch, x.numel(), scale_kernel, elements_of(x), factor, elements_of(y), x.numel());
}

void add_scaled(const Launch& launch, ConstTensorView x, float factor, TensorView y) {
  require_numel("add_scaled", "y", y.numel(), x.numel());
  launch_1d(launch, x.numel(), add_scaled_kernel, elements_of(x), factor, elements_of(y),
            x.numel());
}

void bias_forward(const Launch& launch, ConstTensorView x, ConstTensorView b, TensorView y) {
  const std::int64_t w = bias_width("bias_forward", x.shape(), b.shape());
  require_numel("bias_forward", "y", y.numel(), x.numel());
  launch_1d(launch, x.numel(), bias_forward_kernel, elements_of(x), elements_of(b), elements_of(y),
            x.numel(), w);
}

void bias_backward(const Launch& launch, ConstTensorView dy, TensorView db) {
  const std::int64_t w = bias_width("bias_backward", dy.shape(), db.shape);
  const Elements g = elements_of(dy), out = elements_of(db);
  const std::int64_t rows = dy.numel() / w;
  if (rows == 0 || w == 0) return;
  const ColumnSumTiles tiles = column_sum_tiles(rows, w);
  CARTO_CHECK(launch.workspace != nullptr, "bias_backward: the launch has no workspace allocator");
  const Buffer partial(*launch.workspace,
                       static_cast<std::size_t>(tiles.row_chunks * w) * sizeof(float),
                       MemoryCategory::temporaries);
  const dim3 grid(static_cast<unsigned>(tiles.column_tiles),
                  static_cast<unsigned>(tiles.row_chunks));
  const dim3 block(kColumnTile, kRowLanes);
  column_sums_kernel<<<grid, block, 0, launch.stream>>>(g, rows, w, tiles.rows_per_chunk,
                                                        static_cast<float*>(partial.data()));
  CARTO_CUDA_CHECK_LAUNCH();
  launch_1d(launch, w, add_partials_kernel, static_cast<const float*>(partial.data()),
            tiles.row_chunks, w, out);
  // `partial` goes back to the caching allocator here, kept for this stream: a later user's
  // kernels run after these two.
}

}  // namespace carto::cuda
