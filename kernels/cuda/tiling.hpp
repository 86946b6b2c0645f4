// cuda/tiling.hpp — the index arithmetic of the CUDA reduction kernels (layernorm, softmax,
// attention, embedding, cross-entropy), host-testable.
//
// Design note: every index a kernel computes that is more than `blockIdx.x * blockDim.x +
// threadIdx.x` lives here as a constexpr function of plain integers: which rows a thread group
// visits, which keys a causal query row sees (with the global offsets of a shard), the global index
// of a probability element (the dropout counter), the thread -> element maps of the attention tiles
// and their shared-memory footprints. The kernels call these functions from device code (nvcc
// --expt-relaxed-constexpr), and tests/cuda/test_cuda_tiling.cpp checks them with g++ alone, over
// whole domains: every row visited once, every tile element owned by exactly one thread, the causal
// window equal to the brute-force mask. No CUDA header, no carto header: only <cstdint>.
#pragma once

#include <cstdint>

namespace carto::cuda::tiling {

constexpr std::int64_t div_up(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }
constexpr std::int64_t round_up(std::int64_t a, std::int64_t b) { return div_up(a, b) * b; }
constexpr std::int64_t clamp(std::int64_t v, std::int64_t lo, std::int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

inline constexpr std::int64_t kWarp = 32;

// ---- row reductions
// ------------------------------------------------------------------------------
// A kernel that reduces along the last dim runs one thread group per row: a warp when the row has
// at most kWarpRowColumns columns (each lane then handles at most 32 elements and the reduction is
// shuffles only), else the whole block (shuffles, then one value per warp through shared memory).
// Groups walk the rows with a grid stride, so the grid stays below kMaxRowBlocks.
inline constexpr std::int64_t kWarpRowColumns = 1024;
inline constexpr std::int64_t kWarpRowsPerBlock = 8;
inline constexpr std::int64_t kMaxRowBlocks = std::int64_t{1} << 20;
inline constexpr std::int64_t kMaxBlockThreads = 1024;
// A whole-block row: about this many columns per thread, at least 64 and at most 1024 threads.
inline constexpr std::int64_t kColumnsPerThread = 8;

struct RowLaunch {
  unsigned threads = 256;
  unsigned rows_per_block = 1;  // 1: the whole block is one row's group; else a warp per row
  unsigned blocks = 1;
  [[nodiscard]] constexpr bool whole_block() const { return rows_per_block == 1; }
  [[nodiscard]] constexpr unsigned group_width() const {
    return whole_block() ? threads : static_cast<unsigned>(kWarp);
  }
};

constexpr RowLaunch row_launch(std::int64_t rows, std::int64_t columns) {
  RowLaunch l;
  if (columns <= kWarpRowColumns) {
    l.threads = static_cast<unsigned>(kWarp * kWarpRowsPerBlock);
    l.rows_per_block = static_cast<unsigned>(kWarpRowsPerBlock);
  } else {
    l.threads = static_cast<unsigned>(
        clamp(round_up(div_up(columns, kColumnsPerThread), kWarp), 2 * kWarp, kMaxBlockThreads));
    l.rows_per_block = 1;
  }
  l.blocks = static_cast<unsigned>(clamp(div_up(rows, l.rows_per_block), 1, kMaxRowBlocks));
  return l;
}

// The rows thread `thread` of block `block` works on: first_row, first_row + row_step, ... below
// the row count; lane is its index within the row's group (the column it starts at).
struct RowGroup {
  std::int64_t first_row = 0, row_step = 1;
  unsigned lane = 0;
};
constexpr RowGroup row_group(const RowLaunch& l, unsigned block, unsigned thread) {
  const unsigned width = l.group_width();
  return {.first_row = std::int64_t{block} * l.rows_per_block + thread / width,
          .row_step = std::int64_t{l.blocks} * l.rows_per_block,
          .lane = thread % width};
}

// ---- causal masks with global offsets
// ------------------------------------------------------------
// Local query i and local key j of a shard sit at global positions query_offset + i and
// key_offset + j; a causal mask hides key j from query i when its global position is later.
struct CausalMask {
  bool causal = false;
  std::int64_t query_offset = 0, key_offset = 0;

  [[nodiscard]] constexpr bool sees(std::int64_t query, std::int64_t key) const {
    return !causal || key_offset + key <= query_offset + query;
  }
  // The number of leading local keys (of `keys`) query `query` sees: the visible keys are a prefix.
  [[nodiscard]] constexpr std::int64_t visible(std::int64_t query, std::int64_t keys) const {
    return causal ? clamp(query_offset + query - key_offset + 1, 0, keys) : keys;
  }
  // The first local query (of `queries`) that sees local key `key`; `queries` when none does.
  [[nodiscard]] constexpr std::int64_t first_query(std::int64_t key, std::int64_t queries) const {
    return causal ? clamp(key_offset + key - query_offset, 0, queries) : 0;
  }
};

// ---- global indices of the (B, a, Sq, Sk) probabilities
// ------------------------------------------
// The dropout mask of probability (b, h, i, j) is rng::keep at its global row-major index:
// Σ_d (offset[d] + local[d]) · stride[d], the strides of the global extents.
struct ProbIndexer {
  std::int64_t stride[4] = {0, 0, 0, 1};
  std::int64_t offset[4] = {0, 0, 0, 0};

  [[nodiscard]] constexpr std::int64_t index(std::int64_t b, std::int64_t h, std::int64_t i,
                                             std::int64_t j) const {
    return (offset[0] + b) * stride[0] + (offset[1] + h) * stride[1] + (offset[2] + i) * stride[2] +
           (offset[3] + j) * stride[3];
  }
};
constexpr ProbIndexer prob_indexer(const std::int64_t (&global)[4],
                                   const std::int64_t (&offset)[4]) {
  ProbIndexer p;
  std::int64_t s = 1;
  for (int d = 3; d >= 0; --d) {
    p.stride[d] = s;
    p.offset[d] = offset[d];
    s *= global[d];
  }
  return p;
}

// ---- attention tiles
// -----------------------------------------------------------------------------
// Each attention kernel runs 256 threads as a 16 × 16 grid (ty = thread / 16, tx = thread % 16). A
// block owns `rows` rows of one (batch, head) — query rows (forward, dq) or key rows (dk, dv) — and
// walks the other sequence in tiles of `cols`. Thread (ty, tx) computes the scores of rows
// ty + 16·r (r < rows/16) against columns tx + 16·c (c < cols/16), and owns the output elements of
// the same rows at head-dim columns tx + 16·e (e < dim/16). A row's 16 score-owning threads are the
// 16 lanes of one half warp, so a row max or sum is four xor-shuffles; strides of 16 keep the
// shared-memory reads of a warp on distinct banks or broadcast (see the padding below).
// dim is the head dim rounded up to 32, 64 or 128 (the kernel's template parameter); the
// tiles are zero-padded beyond the actual head dim.
inline constexpr int kTileThreads = 256;
inline constexpr int kTileSide = 16;
inline constexpr std::int64_t kMaxHeadDim = 128;

// The padded head dim the kernels are instantiated for; 0 when d is not supported.
constexpr int head_dim_class(std::int64_t d) {
  return d < 1 ? 0 : d <= 32 ? 32 : d <= 64 ? 64 : d <= kMaxHeadDim ? 128 : 0;
}

struct Tile {
  int rows = 64, cols = 64, dim = 64;

  [[nodiscard]] constexpr int thread_rows() const { return rows / kTileSide; }
  [[nodiscard]] constexpr int thread_cols() const { return cols / kTileSide; }
  [[nodiscard]] constexpr int thread_dims() const { return dim / kTileSide; }
  // Row strides in shared memory (floats): a head-dim row pads by one so that the 16 rows a half
  // warp reads at one column fall on 16 banks; a score row pads by 16 so that the two rows a warp
  // writes at once take the two halves of the banks.
  [[nodiscard]] constexpr int dim_stride() const { return dim + 1; }
  [[nodiscard]] constexpr int score_stride() const { return cols + 16; }
};

constexpr int tile_row(int ty, int r) { return ty + kTileSide * r; }
constexpr int tile_col(int tx, int c) { return tx + kTileSide * c; }

// The tiles of the three kernels; `dim` from head_dim_class.
constexpr Tile forward_tile(int dim) { return {.rows = 64, .cols = 64, .dim = dim}; }
constexpr Tile backward_tile(int dim) { return {.rows = 64, .cols = 32, .dim = dim}; }

// Shared-memory layouts, in floats from the start of the dynamic shared memory.
// Forward: Q (rows × dim), K then V of a key tile in one buffer (cols × dim), P (rows × cols).
struct ForwardSmem {
  int q = 0, kv = 0, p = 0, total = 0;
};
constexpr ForwardSmem forward_smem(const Tile& t) {
  ForwardSmem s;
  s.q = 0;
  s.kv = s.q + t.rows * t.dim_stride();
  s.p = s.kv + t.cols * t.dim_stride();
  s.total = s.p + t.rows * t.score_stride();
  return s;
}
// Backward (both kernels): the block's own `rows` of two head-dim tensors (K, V for dk/dv; Q, dO
// for dq), a `cols` tile of the two others, two score tiles (rows × cols) and two per-column or
// per-row vectors (logsumexp and D = rowsum(dO ∘ O)) of max(rows, cols) floats.
struct BackwardSmem {
  int own_a = 0, own_b = 0, tile_a = 0, tile_b = 0, scores_a = 0, scores_b = 0, lse = 0, dsum = 0,
      total = 0;
};
constexpr BackwardSmem backward_smem(const Tile& t) {
  BackwardSmem s;
  const int own = t.rows * t.dim_stride(), tile = t.cols * t.dim_stride();
  const int scores = t.rows * t.score_stride(), vec = t.rows > t.cols ? t.rows : t.cols;
  s.own_b = s.own_a + own;
  s.tile_a = s.own_b + own;
  s.tile_b = s.tile_a + tile;
  s.scores_a = s.tile_b + tile;
  s.scores_b = s.scores_a + scores;
  s.lse = s.scores_b + scores;
  s.dsum = s.lse + vec;
  s.total = s.dsum + vec;
  return s;
}

// A (rows × dim) tile loaded by kTileThreads threads, element `idx` = thread + k·kTileThreads:
// row idx / dim, column idx % dim (consecutive threads read consecutive global elements).
struct TileElement {
  int row = 0, col = 0;
};
constexpr TileElement tile_element(int idx, int dim) { return {idx / dim, idx % dim}; }

// The key tiles [0, end) a query tile [first, first + rows) of `queries` needs: up to the keys its
// last row sees (causal rows see a growing prefix).
constexpr std::int64_t key_end(const CausalMask& m, std::int64_t first, std::int64_t rows,
                               std::int64_t queries, std::int64_t keys) {
  const std::int64_t last = (first + rows < queries ? first + rows : queries) - 1;
  return last < first ? 0 : m.visible(last, keys);
}

// ---- layernorm backward: dgamma, dbeta reduced over rows without atomics
// -------------------------
// Blocks of 32 columns × 8 row lanes each sum a chunk of rows. With one chunk they add straight
// into dgamma, dbeta; with more, each writes a per-chunk partial (the workspace, chunks × C floats
// per gradient) and a second kernel adds the chunks in order. At most kMaxChunks chunks, of at
// least kMinChunkRows rows, and at most rows / C of them, so that the workspace stays within the 2
// floats per row the cost model prices for a layernorm's backward (profile/op_cost.hpp).
inline constexpr std::int64_t kColumnTile = 32;
inline constexpr std::int64_t kRowLanes = 8;
inline constexpr std::int64_t kMinChunkRows = 32;
inline constexpr std::int64_t kMaxChunks = 128;

struct ColumnChunks {
  std::int64_t chunk_rows = kRowLanes, chunks = 1;
};
constexpr ColumnChunks column_chunks(std::int64_t rows, std::int64_t columns) {
  ColumnChunks c;
  if (rows < 1) return c;
  const std::int64_t by_memory = columns > 0 ? rows / columns : rows;
  const std::int64_t by_size = rows / kMinChunkRows;
  std::int64_t chunks = by_memory < by_size ? by_memory : by_size;
  chunks = clamp(chunks, 1, kMaxChunks);
  c.chunk_rows = round_up(div_up(rows, chunks), kRowLanes);
  c.chunks = div_up(rows, c.chunk_rows);
  return c;
}

// ---- embedding backward
// ---------------------------------------------------------------------------
// The radix sort of the table rows hit by the tokens sorts keys below 2^bits; rows outside the
// shard get the key `rows` (sorted last, skipped), so keys span [0, rows].
constexpr int key_bits(std::int64_t max_key) {
  int bits = 1;
  while (bits < 63 && (std::int64_t{1} << bits) <= max_key) ++bits;
  return bits;
}

}  // namespace carto::cuda::tiling
