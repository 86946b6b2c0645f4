// cuda/geometry.hpp — the integer arithmetic of the CUDA backend: grids, tiles, index maps, the
// row-major to cuBLASLt mapping and the caching allocator's size classes.
//
// Design note: everything a kernel's correctness depends on apart from its floating point (which
// elements a thread touches, how a strided box is walked, which Philox block feeds which element,
// how a GEMM maps onto cuBLASLt's column-major operands, how a request rounds to a size class)
// lives here as constexpr functions of plain integers. The header is host-only C++ (no CUDA
// header), so tests/cuda/test_cuda_geometry.cpp checks it with g++ over whole domains on a machine
// without a GPU. The functions kernels call are CARTO_HOST_DEVICE (carto/runtime/rng.hpp) and take
// the plain structs below by value (they are kernel arguments); the host builders validate their
// inputs with CARTO_CHECK first.
#pragma once

#include <carto/runtime/backend.hpp>
#include <carto/runtime/rng.hpp>
#include <cstddef>
#include <cstdint>

namespace carto::cuda {

// ---- grids ------------------------------------------------------------------------------------

CARTO_HOST_DEVICE constexpr std::int64_t ceil_div(std::int64_t a, std::int64_t b) {
  return (a + b - 1) / b;
}
// A 1-D grid-stride launch over n elements: blocks of `threads`, at most `max_blocks` blocks.
struct Grid1d {
  unsigned blocks = 1;
  unsigned threads = 256;
};
constexpr Grid1d grid_1d(std::int64_t n, unsigned threads = 256, std::int64_t max_blocks = 65535) {
  const std::int64_t b = n <= 0 ? 1 : ceil_div(n, threads);
  return {static_cast<unsigned>(b < max_blocks ? b : max_blocks), threads};
}

// ---- size classes of the caching allocator ---------------------------------------------------

// Every block is one cudaMalloc (256-byte aligned by CUDA) of a class size, never split. Up to
// 1 KiB the classes are multiples of 256; up to 8 MiB four per octave (2^k · {4, 5, 6, 7} / 4, all
// multiples of 256), so a class wastes less than a quarter of the request; past 8 MiB multiples of
// 2 MiB, less than a quarter again. A training step requests the same sizes every step, so from
// the second step on each request finds a block of its class in the cache.
inline constexpr std::size_t kAllocationAlignment = 256;
inline constexpr std::size_t kLargeClassGranule = std::size_t{2} << 20;
inline constexpr std::size_t kLargeClassFrom = std::size_t{8} << 20;

constexpr std::size_t size_class(std::size_t bytes) {
  if (bytes <= 1024) return bytes <= 256 ? 256 : (bytes + 255) / 256 * 256;
  if (bytes > kLargeClassFrom)
    return (bytes + kLargeClassGranule - 1) / kLargeClassGranule * kLargeClassGranule;
  std::size_t octave = 1024;  // the largest power of two below bytes
  while (octave * 2 < bytes) octave *= 2;
  const std::size_t step = octave / 4;
  return (bytes + step - 1) / step * step;
}

// ---- strided boxes (copy_strided) -------------------------------------------------------------

// A box of `count` elements walked in row-major order of `extent`, with the element offsets of the
// source and the destination. Built from copy_strided's arguments with the dims of extent 1
// dropped and a dim merged into the next one when both tensors step over it contiguously (so a
// box of whole rows is one dim), which leaves fewer divisions per element.
struct StridedWalk {
  int rank = 0;
  std::int64_t extent[kMaxRank] = {};
  std::int64_t src_stride[kMaxRank] = {};
  std::int64_t dst_stride[kMaxRank] = {};
  std::int64_t src_offset = 0;
  std::int64_t dst_offset = 0;
  std::int64_t count = 0;
};

constexpr StridedWalk strided_walk(const StridedBox& from, const StridedBox& to,
                                   const Index& extents) {
  CARTO_CHECK(from.strides.size() == extents.size() && to.strides.size() == extents.size(),
              "copy_strided: ", extents.size(), " extents with ", from.strides.size(),
              " source and ", to.strides.size(), " destination strides");
  StridedWalk w;
  w.src_offset = from.offset;
  w.dst_offset = to.offset;
  w.count = 1;
  for (std::size_t d = 0; d < extents.size(); ++d) {
    CARTO_CHECK(extents[d] >= 0 && from.strides[d] >= 0 && to.strides[d] >= 0, "copy_strided: dim ",
                d, " has extent ", extents[d], " and strides ", from.strides[d], ", ",
                to.strides[d], "; none may be negative");
    w.count *= extents[d];
    if (extents[d] == 1) continue;
    if (w.rank > 0 && w.src_stride[w.rank - 1] == extents[d] * from.strides[d] &&
        w.dst_stride[w.rank - 1] == extents[d] * to.strides[d]) {
      w.extent[w.rank - 1] *= extents[d];  // the previous dim steps over exactly this one
      w.src_stride[w.rank - 1] = from.strides[d];
      w.dst_stride[w.rank - 1] = to.strides[d];
      continue;
    }
    w.extent[w.rank] = extents[d];
    w.src_stride[w.rank] = from.strides[d];
    w.dst_stride[w.rank] = to.strides[d];
    ++w.rank;
  }
  if (w.count == 0) w.rank = 0;
  return w;
}

struct WalkOffsets {
  std::int64_t src = 0;
  std::int64_t dst = 0;
};
// The offsets of the element number `linear` (row-major over the walk's extents).
CARTO_HOST_DEVICE constexpr WalkOffsets walk_offsets(const StridedWalk& w, std::int64_t linear) {
  WalkOffsets o{w.src_offset, w.dst_offset};
  for (int d = w.rank - 1; d >= 0; --d) {
    const std::int64_t i = linear % w.extent[d];
    linear /= w.extent[d];
    o.src += i * w.src_stride[d];
    o.dst += i * w.dst_stride[d];
  }
  return o;
}

// The largest offset the box reaches in each tensor (-1 when it is empty).
constexpr WalkOffsets walk_last(const StridedWalk& w) {
  if (w.count == 0) return {-1, -1};
  return walk_offsets(w, w.count - 1);
}

// ---- placed rows (fill_normal, dropout) ------------------------------------------------------

// A local tensor as rows along its last dim, placed in its global tensor (ShardPlacement): local
// element (row, col) has the global index row_global_start(row) + col, so a row's global indices
// are consecutive and a thread can take whole Philox blocks along it.
struct RowPlacement {
  int outer_rank = 0;                        // the leading (row) dims
  std::int64_t outer_extent[kMaxRank] = {};  // their local extents
  std::int64_t outer_stride[kMaxRank] = {};  // their global strides
  std::int64_t base = 0;                     // the global index of local element 0
  std::int64_t rows = 1;
  std::int64_t row_length = 1;
};

inline RowPlacement row_placement(const ShardPlacement& where, const Index& local) {
  const GlobalIndexer indexer(where, local);  // validates the placement
  RowPlacement p;
  Index zero = local;
  for (std::int64_t& c : zero) c = 0;
  p.base = indexer.global_index(zero);
  if (local.empty()) return p;  // a scalar: one row of one element
  const std::size_t rank = local.size();
  p.row_length = local[rank - 1];
  p.rows = 1;
  for (std::size_t d = 0; d + 1 < rank; ++d) {
    p.outer_extent[p.outer_rank] = local[d];
    p.outer_stride[p.outer_rank] = indexer.stride[d];
    ++p.outer_rank;
    p.rows *= local[d];
  }
  return p;
}

CARTO_HOST_DEVICE constexpr std::int64_t row_global_start(const RowPlacement& p, std::int64_t row) {
  std::int64_t g = p.base;
  for (int d = p.outer_rank - 1; d >= 0; --d) {
    g += (row % p.outer_extent[d]) * p.outer_stride[d];
    row /= p.outer_extent[d];
  }
  return g;
}

// Philox blocks along a row. A block yields `per_block` consecutive indices (4 dropout words, 2
// normals); group j of a row that starts at global index g0 and has `length` elements is block
// g0 / per_block + j, restricted to the row: local columns [first_col, first_col + count), whose
// first index is slot `first_slot` of the block. Groups j in [0, groups_per_row) cover the row
// exactly once whatever g0 is; some trailing groups may be empty (count 0).
struct BlockGroup {
  std::uint64_t block = 0;
  std::int64_t first_col = 0;
  std::int64_t count = 0;
  int first_slot = 0;
};
CARTO_HOST_DEVICE constexpr std::int64_t groups_per_row(std::int64_t length, int per_block) {
  return (length + 2 * (per_block - 1)) / per_block;  // ⌈(per_block - 1 + length) / per_block⌉
}
CARTO_HOST_DEVICE constexpr BlockGroup block_group(std::int64_t g0, std::int64_t length,
                                                   std::int64_t j, int per_block) {
  const std::int64_t block = g0 / per_block + j;
  const std::int64_t start = block * per_block;
  const std::int64_t lo = start > g0 ? start : g0;
  const std::int64_t end = start + per_block, row_end = g0 + length;
  const std::int64_t hi = end < row_end ? end : row_end;
  return {.block = static_cast<std::uint64_t>(block),
          .first_col = lo - g0,
          .count = hi > lo ? hi - lo : 0,
          .first_slot = static_cast<int>(lo - start)};
}

// ---- column sums (bias_backward) -------------------------------------------------------------

// db[j] += Σ_rows dy[row, j] in two passes with a fixed order (deterministic): blocks of
// kColumnTile columns × kRowLanes lanes sum chunks of rows_per_chunk rows into an fp32 partial per
// (chunk, column) (lane l takes rows l, l + kRowLanes, ... of its chunk; the lanes add in lane
// order), then one thread per column adds the chunks' partials in chunk order. The chunks give the
// GPU about target_blocks blocks when the columns alone give fewer.
inline constexpr int kColumnTile = 32;
inline constexpr int kRowLanes = 8;
struct ColumnSumTiles {
  std::int64_t column_tiles = 1;
  std::int64_t row_chunks = 1;
  std::int64_t rows_per_chunk = 1;
};
constexpr ColumnSumTiles column_sum_tiles(std::int64_t rows, std::int64_t width,
                                          std::int64_t target_blocks = 1024) {
  ColumnSumTiles t;
  t.column_tiles = width <= 0 ? 1 : ceil_div(width, kColumnTile);
  if (rows <= 0) return t;
  constexpr std::int64_t kMinRowsPerChunk = 4 * kRowLanes;
  std::int64_t chunks = target_blocks / t.column_tiles;
  const std::int64_t most = ceil_div(rows, kMinRowsPerChunk);
  if (chunks > most) chunks = most;
  if (chunks < 1) chunks = 1;
  if (chunks > 65535) chunks = 65535;  // gridDim.y
  t.rows_per_chunk = ceil_div(rows, chunks);
  t.row_chunks = ceil_div(rows, t.rows_per_chunk);
  return t;
}

// ---- GEMM: row-major operands onto cuBLASLt --------------------------------------------------

// A row-major matrix (r, c) with leading dimension c is, read column-major, its transpose (c, r)
// with leading dimension c. So the row-major product C = op(A)·op(B), C (m, n), is the
// column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ, (n, m): cuBLASLt's first operand is B's memory and its
// second A's, with the same transpose flags (a row-major B (k, n) read column-major is already the
// (n, k) operand op(B)ᵀ needs; a transposed one, stored (n, k), needs cuBLASLt's transpose), and
// cuBLASLt's m, n, k are our n, m, k. Batches are strided (stride 0 broadcasts one matrix). When A
// is batched and untransposed and B is broadcast, A's and C's batches are contiguous rows: the
// batch folds into one GEMM of batch·m rows.
struct RowMajorGemm {
  std::int64_t a_rows = 0, a_cols = 0, a_batch = 1;  // a as stored (batch..., rows, cols)
  std::int64_t b_rows = 0, b_cols = 0, b_batch = 1;
  std::int64_t c_rows = 0, c_cols = 0, c_batch = 1;
  bool transpose_a = false, transpose_b = false;
};
// One column-major operand as cuBLASLt's matrix layout describes it (before its op).
struct LtMatrix {
  std::int64_t rows = 0, cols = 0, ld = 0, batch_stride = 0;
};
struct LtGemm {
  bool transpose_first = false, transpose_second = false;  // cuBLASLt's transa, transb
  std::int64_t m = 0, n = 0, k = 0, batch = 1;
  LtMatrix first, second, c;  // first = B's memory, second = A's, c = C's
};

// Whether the operand dims agree (the caller names the shapes when they do not).
constexpr bool gemm_dims_agree(const RowMajorGemm& g) {
  const std::int64_t m = g.transpose_a ? g.a_cols : g.a_rows;
  const std::int64_t k = g.transpose_a ? g.a_rows : g.a_cols;
  const std::int64_t bk = g.transpose_b ? g.b_cols : g.b_rows;
  const std::int64_t n = g.transpose_b ? g.b_rows : g.b_cols;
  return m == g.c_rows && n == g.c_cols && k == bk && (g.a_batch == g.c_batch || g.a_batch == 1) &&
         (g.b_batch == g.c_batch || g.b_batch == 1);
}

constexpr LtGemm lt_gemm(const RowMajorGemm& g) {
  LtGemm lt;
  const std::int64_t m = g.c_rows, n = g.c_cols;
  lt.k = g.transpose_a ? g.a_rows : g.a_cols;
  lt.transpose_first = g.transpose_b;
  lt.transpose_second = g.transpose_a;
  lt.m = n;
  lt.n = m;
  lt.batch = g.c_batch;
  lt.first = {.rows = g.b_cols,
              .cols = g.b_rows,
              .ld = g.b_cols,
              .batch_stride = g.b_batch == 1 ? 0 : g.b_rows * g.b_cols};
  lt.second = {.rows = g.a_cols,
               .cols = g.a_rows,
               .ld = g.a_cols,
               .batch_stride = g.a_batch == 1 ? 0 : g.a_rows * g.a_cols};
  lt.c = {.rows = n, .cols = m, .ld = n, .batch_stride = m * n};
  if (g.c_batch > 1 && g.a_batch == g.c_batch && g.b_batch == 1 && !g.transpose_a) {
    lt.n = g.c_batch * m;  // A (batch·m, k) and C (batch·m, n): one GEMM
    lt.batch = 1;
    lt.second = {.rows = g.a_cols, .cols = g.c_batch * g.a_rows, .ld = g.a_cols, .batch_stride = 0};
    lt.c = {.rows = n, .cols = g.c_batch * m, .ld = n, .batch_stride = 0};
    lt.first.batch_stride = 0;
  }
  return lt;
}

}  // namespace carto::cuda
