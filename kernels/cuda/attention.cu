// cuda/attention.cu — fused attention, forward and backward, flash-style (Dao et al. 2022,
// FlashAttention; the backward split of FlashAttention-2, Dao 2023), in fp32 on CUDA cores, for
// multi-head q, k, v (B, a, S, d) and grouped-query q (B, n, g, S, d) against k, v (B, n, S, d).
//
// Design note. Every kernel runs 256 threads as a 16 × 16 grid on tiles in shared memory (the
// thread -> element maps, padding and footprints are tiling.hpp's, tested on the host). The head
// dim is a template parameter D ∈ {32, 64, 128} (the actual d rounded up, tiles zero-padded), so
// each thread's accumulators are registers. No (Sq × Sk) matrix exists: scores live in registers
// and one (rows × cols) tile of shared memory at a time.
// Grouped-query attention (Ainslie et al. 2023) runs as the multi-head form with a = n·g query
// heads: query head (m, j) of batch entry b, flat bh = (b·n + m)·g + j, reads key/value head
// bh / g = b·n + m. Its probabilities are placed in the global (B, n, g, Sq, Sk)
// (HeadProbIndexer; the rank-4 form is the same with a group dim of 1), which gives the dropout
// indices; the causal positions are the offsets of the last two dims.
//  - forward_kernel: a block owns 64 query rows of one (batch, query head), keeps them in shared
//    memory and walks the keys of its key/value head in tiles of 64 (K, then V, through one
//    buffer), only up to the keys its last row sees under the causal mask. Per tile each thread
//    forms a 4 × 4 block of scores (scale · q·k, -inf where masked or past Sk), the 16 threads of a
//    row (one half warp) reduce the tile's row max and Σ exp with shuffles, and the running (max m,
//    sum l) and the output accumulator are rescaled by exp(m_old - m_new) — the online softmax. The
//    probabilities, times the dropout factor (rng::keep at the probability's global index, 1/(1-p)
//    kept, 0 dropped), go through shared memory into out += P·V. At the end out = acc / l and
//    logsumexp = m + log l, the logsumexp of the undropped softmax, as the CPU saves it.
//  - dsum_kernel: D_i = dout_i · out_i per query row (a warp per row), into the workspace: with it,
//    dS = scale · P ∘ (mask ∘ dP - D) needs no row sum over the keys (FlashAttention Alg. 4; it
//    holds with dropout, whose factors are inside out).
//  - dkdv_kernel: a block owns 64 keys of one (batch, key/value head) (K, V in shared memory) and
//    walks the g query heads of its group in order and, for each, the query tiles of 32 that can
//    see the keys (from mask.first_query), recomputing P = exp(scale · q·k - logsumexp) and
//    dP = dout·v for its 4 × 2 block, writing P ∘ mask and dS to shared memory, then
//    dv += (P ∘ mask)ᵀ dout and dk += dSᵀ q in registers; one add into dk, dv at the end. The sum
//    over a group's query heads is thus one thread's, in a fixed order: no two blocks write the
//    same dk, dv element.
//  - dq_kernel: a block owns 64 query rows (q, dout in shared memory) and walks the key tiles of 32
//    its rows see, recomputing the same P, dP and dS, and dq += dS k; one add into dq at the end.
// Splitting dq from dk/dv recomputes the scores once more but needs no atomics: every output
// element is summed by one thread in a fixed order, so results are deterministic, and a bf16
// gradient is added to in fp32 and rounded once. The masks (causal and dropout) are functions of
// global indices, so a shard of the query sequence against gathered K, V (placement offsets), a
// head shard and a shard of the query heads of each group compute what one device computes for
// the same elements.
// Loads widen fp32/bf16 to fp32, stores round to nearest even (launch.cuh); logsumexp is fp32.
// Results agree with the CPU backend to fp32 rounding (other summation orders), masks bit for bit.
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "cuda/attention.cuh"
#include "cuda/reduce.cuh"
#include "cuda/reduction_checks.hpp"
#include "cuda/tiling.hpp"

namespace carto::cuda {

namespace {

// Row kernels run up to 1024 threads a block (tiling::row_launch): registers are capped to fit.
constexpr int kRowThreads = static_cast<int>(tiling::kMaxBlockThreads);

using tiling::kTileSide;
using tiling::kTileThreads;
using tiling::tile_col;
using tiling::tile_row;

// The global index of probability (b, h, i, j), h = m·g + j the local query head j of key/value
// head m (g = 1 for multi-head attention): Σ (offset + local) · stride over the global
// (B, n, g, Sq, Sk), with a group dim of stride 0 for the rank-4 form. head_base is the part of
// one (batch, query head), computed once per block.
struct HeadProbIndexer {
  std::int64_t stride[5] = {0, 0, 0, 0, 1};
  std::int64_t offset[5] = {0, 0, 0, 0, 0};
  std::int64_t group = 1;

  [[nodiscard]] __device__ __forceinline__ std::int64_t head_base(std::int64_t b,
                                                                  std::int64_t h) const {
    return (offset[0] + b) * stride[0] + (offset[1] + h / group) * stride[1] +
           (offset[2] + h % group) * stride[2];
  }
  [[nodiscard]] __device__ __forceinline__ std::int64_t index(std::int64_t base, std::int64_t i,
                                                              std::int64_t j) const {
    return base + (offset[3] + i) * stride[3] + (offset[4] + j) * stride[4];
  }
};

struct AttentionParams {
  Elements q, k, v, out, dout, dq, dk, dv;
  float* logsumexp = nullptr;        // forward: written
  const float* saved_lse = nullptr;  // backward: the forward's logsumexp
  float* dsum = nullptr;             // backward: D = rowsum(dout ∘ out) (B, a, Sq), workspace
  // heads: query heads per batch entry (n·g); group: query heads per key/value head (g).
  std::int64_t heads = 0, group = 1, queries = 0, keys = 0, dim = 0;
  float scale = 1.0f, dropout = 0.0f, keep_scale = 1.0f;
  RngStream rng{};
  tiling::CausalMask mask{};
  HeadProbIndexer where{};
};

// ---- device helpers
// ------------------------------------------------------------------------------

// The dropout factor of probability (i, j) of the (batch, query head) whose index base is `base`
// (HeadProbIndexer::head_base): 1/(1-p) kept, 0 dropped, 1 without dropout.
__device__ __forceinline__ float dropout_factor(const AttentionParams& p, std::int64_t base,
                                                std::int64_t i, std::int64_t j) {
  if (p.dropout <= 0.0f) return 1.0f;
  return rng::keep(p.rng, p.where.index(base, i, j), p.dropout) ? p.keep_scale : 0.0f;
}

// Rows [0, ROWS) × head-dim columns [0, D) of a (rows, d) slab starting at element `first`, into
// shared memory with row stride D + 1; zero past `valid_rows` rows and past d columns.
template <int D, int ROWS>
__device__ __forceinline__ void load_rows(Elements src, std::int64_t first, std::int64_t valid_rows,
                                          std::int64_t d, float* dst) {
  for (int idx = static_cast<int>(threadIdx.x); idx < ROWS * D; idx += kTileThreads) {
    const tiling::TileElement te = tiling::tile_element(idx, D);
    float value = 0.0f;
    if (te.row < valid_rows && te.col < d) value = load(src, first + te.row * d + te.col);
    dst[te.row * (D + 1) + te.col] = value;
  }
}

// acc[r][c] = Σ_e a[tile_row(ty, r)][e] · b[tile_col(tx, c)][e] over the padded head dim.
template <int TR, int TC, int D>
__device__ __forceinline__ void dot_tile(const float* a, const float* b, int ty, int tx,
                                         float (&acc)[TR][TC]) {
  constexpr int kStride = D + 1;
#pragma unroll
  for (int r = 0; r < TR; ++r) {
#pragma unroll
    for (int c = 0; c < TC; ++c) acc[r][c] = 0.0f;
  }
#pragma unroll 8
  for (int e = 0; e < D; ++e) {
    float av[TR], bv[TC];
#pragma unroll
    for (int r = 0; r < TR; ++r) av[r] = a[tile_row(ty, r) * kStride + e];
#pragma unroll
    for (int c = 0; c < TC; ++c) bv[c] = b[tile_col(tx, c) * kStride + e];
#pragma unroll
    for (int r = 0; r < TR; ++r) {
#pragma unroll
      for (int c = 0; c < TC; ++c) acc[r][c] += av[r] * bv[c];
    }
  }
}

// out[r][e] += Σ_j s[tile_row(ty, r)][j] · m[j][tile_col(tx, e)], j over the COLS of a score tile.
template <int TR, int TD, int COLS, int D, int SS>
__device__ __forceinline__ void accumulate_product(const float* s, const float* m, int ty, int tx,
                                                   float (&out)[TR][TD]) {
  constexpr int kStride = D + 1;
#pragma unroll 4
  for (int j = 0; j < COLS; ++j) {
    float sv[TR];
#pragma unroll
    for (int r = 0; r < TR; ++r) sv[r] = s[tile_row(ty, r) * SS + j];
#pragma unroll
    for (int e = 0; e < TD; ++e) {
      const float mv = m[j * kStride + tile_col(tx, e)];
#pragma unroll
      for (int r = 0; r < TR; ++r) out[r][e] += sv[r] * mv;
    }
  }
}

// grad[(row0 + tile_row) · d + tile_col] += acc for the rows below `rows` and columns below d.
template <int TR, int TD>
__device__ __forceinline__ void add_rows(Elements grad, std::int64_t first_row, std::int64_t row0,
                                         std::int64_t rows, std::int64_t d, int ty, int tx,
                                         const float (&acc)[TR][TD]) {
#pragma unroll
  for (int r = 0; r < TR; ++r) {
    const std::int64_t row = row0 + tile_row(ty, r);
    if (row >= rows) continue;
#pragma unroll
    for (int e = 0; e < TD; ++e) {
      const int col = tile_col(tx, e);
      if (col >= d) continue;
      const std::int64_t i = (first_row + row) * d + col;
      store(grad, i, load(grad, i) + acc[r][e]);
    }
  }
}

// ---- kernels
// -------------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kTileThreads) forward_kernel(AttentionParams p) {
  constexpr tiling::Tile kTile = tiling::forward_tile(D);
  constexpr int TR = kTile.thread_rows(), TC = kTile.thread_cols(), TD = kTile.thread_dims();
  constexpr int SS = kTile.score_stride();
  constexpr tiling::ForwardSmem kSmem = tiling::forward_smem(kTile);
  extern __shared__ float smem[];
  float* sq = smem + kSmem.q;    // (64, D + 1) query rows
  float* skv = smem + kSmem.kv;  // (64, D + 1) a key tile of K, then of V
  float* sp = smem + kSmem.p;    // (64, 80) dropped-out probabilities
  const int ty = static_cast<int>(threadIdx.x) / kTileSide;
  const int tx = static_cast<int>(threadIdx.x) % kTileSide;
  const std::int64_t bh = blockIdx.x;
  const std::int64_t base = p.where.head_base(bh / p.heads, bh % p.heads);
  const std::int64_t q0 = std::int64_t{blockIdx.y} * kTile.rows;
  const std::int64_t kv_first = (bh / p.group) * p.keys;  // its key/value head's first key row

  load_rows<D, kTile.rows>(p.q, (bh * p.queries + q0) * p.dim, p.queries - q0, p.dim, sq);
  float m[TR], l[TR], acc[TR][TD];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int e = 0; e < TD; ++e) acc[r][e] = 0.0f;
  }
  const std::int64_t end = tiling::key_end(p.mask, q0, kTile.rows, p.queries, p.keys);
  for (std::int64_t k0 = 0; k0 < end; k0 += kTile.cols) {
    __syncthreads();  // the previous tile's P·V is done with skv and sp
    load_rows<D, kTile.cols>(p.k, (kv_first + k0) * p.dim, p.keys - k0, p.dim, skv);
    __syncthreads();
    float s[TR][TC];
    dot_tile<TR, TC, D>(sq, skv, ty, tx, s);
#pragma unroll
    for (int r = 0; r < TR; ++r) {
      const std::int64_t query = q0 + tile_row(ty, r);
      float tile_max = -INFINITY;
#pragma unroll
      for (int c = 0; c < TC; ++c) {
        const std::int64_t key = k0 + tile_col(tx, c);
        const bool visible = key < p.keys && p.mask.sees(query, key);
        s[r][c] = visible ? p.scale * s[r][c] : -INFINITY;
        tile_max = fmaxf(tile_max, s[r][c]);
      }
      tile_max = warp_reduce(tile_max, MaxOp{}, kTileSide);
      const float m_new = fmaxf(m[r], tile_max);
      const float alpha = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
      float row_sum = 0.0f;
#pragma unroll
      for (int c = 0; c < TC; ++c) {
        const float prob = s[r][c] == -INFINITY ? 0.0f : expf(s[r][c] - m_new);
        row_sum += prob;
        const std::int64_t key = k0 + tile_col(tx, c);
        const bool real = prob > 0.0f && query < p.queries;
        sp[tile_row(ty, r) * SS + tile_col(tx, c)] =
            real ? prob * dropout_factor(p, base, query, key) : prob;
      }
      row_sum = warp_reduce(row_sum, SumOp{}, kTileSide);
      l[r] = l[r] * alpha + row_sum;
      m[r] = m_new;
#pragma unroll
      for (int e = 0; e < TD; ++e) acc[r][e] *= alpha;
    }
    __syncthreads();  // every score of the tile is done with K; sp is written
    load_rows<D, kTile.cols>(p.v, (kv_first + k0) * p.dim, p.keys - k0, p.dim, skv);
    __syncthreads();
    accumulate_product<TR, TD, kTile.cols, D, SS>(sp, skv, ty, tx, acc);
  }
#pragma unroll
  for (int r = 0; r < TR; ++r) {
    const std::int64_t query = q0 + tile_row(ty, r);
    if (query >= p.queries) continue;
    const std::int64_t row = bh * p.queries + query;
    const float inv = 1.0f / l[r];
#pragma unroll
    for (int e = 0; e < TD; ++e) {
      const int col = tile_col(tx, e);
      if (col < p.dim) store(p.out, row * p.dim + col, acc[r][e] * inv);
    }
    if (tx == 0) p.logsumexp[row] = m[r] + logf(l[r]);
  }
}

// dsum[i] = Σ_e dout[i, e] · out[i, e] over the (B·a·Sq) query rows, a warp per row.
__global__ void __launch_bounds__(kRowThreads)
    dsum_kernel(Elements dout, Elements out, float* dsum, std::int64_t rows, std::int64_t d,
                tiling::RowLaunch launch) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    float t = 0.0f;
    for (std::int64_t e = g.lane; e < d; e += width)
      t += load(dout, r * d + e) * load(out, r * d + e);
    t = group_reduce(t, SumOp{}, scratch, launch.whole_block());
    if (g.lane == 0) dsum[r] = t;
  }
}

template <int D>
__global__ void __launch_bounds__(kTileThreads) dkdv_kernel(AttentionParams p) {
  constexpr tiling::Tile kTile = tiling::backward_tile(D);  // rows: keys, cols: queries
  constexpr int TR = kTile.thread_rows(), TC = kTile.thread_cols(), TD = kTile.thread_dims();
  constexpr int SS = kTile.score_stride();
  constexpr tiling::BackwardSmem kSmem = tiling::backward_smem(kTile);
  extern __shared__ float smem[];
  float* sk = smem + kSmem.own_a;       // (64, D + 1) the block's keys
  float* sv = smem + kSmem.own_b;       // (64, D + 1) their values
  float* sq = smem + kSmem.tile_a;      // (32, D + 1) a query tile
  float* sdo = smem + kSmem.tile_b;     // (32, D + 1) its output gradients
  float* spt = smem + kSmem.scores_a;   // (64, 48) (P ∘ mask)ᵀ
  float* sdst = smem + kSmem.scores_b;  // (64, 48) dSᵀ
  float* slse = smem + kSmem.lse;       // (32) the tile's logsumexp
  float* sdsum = smem + kSmem.dsum;     // (32) the tile's D
  const int ty = static_cast<int>(threadIdx.x) / kTileSide;
  const int tx = static_cast<int>(threadIdx.x) % kTileSide;
  const std::int64_t bkv = blockIdx.x;  // (batch, key/value head)
  const std::int64_t k0 = std::int64_t{blockIdx.y} * kTile.rows;
  const std::int64_t kv_first = bkv * p.keys;
  const std::int64_t first_query = p.mask.first_query(k0, p.queries);
  if (first_query >= p.queries) return;  // no query sees these keys: nothing to add (uniform)

  load_rows<D, kTile.rows>(p.k, (kv_first + k0) * p.dim, p.keys - k0, p.dim, sk);
  load_rows<D, kTile.rows>(p.v, (kv_first + k0) * p.dim, p.keys - k0, p.dim, sv);
  float dk[TR][TD], dv[TR][TD];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
#pragma unroll
    for (int e = 0; e < TD; ++e) dk[r][e] = dv[r][e] = 0.0f;
  }
  // The group's query heads in order, then their query tiles: every one adds into the same keys.
  for (std::int64_t bh = bkv * p.group; bh < (bkv + 1) * p.group; ++bh) {
    const std::int64_t q_first = bh * p.queries;
    const std::int64_t base = p.where.head_base(bh / p.heads, bh % p.heads);
    for (std::int64_t q0 = first_query; q0 < p.queries; q0 += kTile.cols) {
      __syncthreads();  // the previous tile's products are done with sq, sdo, spt, sdst
      load_rows<D, kTile.cols>(p.q, (q_first + q0) * p.dim, p.queries - q0, p.dim, sq);
      load_rows<D, kTile.cols>(p.dout, (q_first + q0) * p.dim, p.queries - q0, p.dim, sdo);
      if (threadIdx.x < kTile.cols) {
        const std::int64_t query = q0 + threadIdx.x;
        slse[threadIdx.x] = query < p.queries ? p.saved_lse[q_first + query] : 0.0f;
        sdsum[threadIdx.x] = query < p.queries ? p.dsum[q_first + query] : 0.0f;
      }
      __syncthreads();
      float st[TR][TC], dpt[TR][TC];
      dot_tile<TR, TC, D>(sk, sq, ty, tx, st);
      dot_tile<TR, TC, D>(sv, sdo, ty, tx, dpt);
#pragma unroll
      for (int r = 0; r < TR; ++r) {
        const std::int64_t key = k0 + tile_row(ty, r);
#pragma unroll
        for (int c = 0; c < TC; ++c) {
          const int qc = tile_col(tx, c);
          const std::int64_t query = q0 + qc;
          const bool visible = key < p.keys && query < p.queries && p.mask.sees(query, key);
          const float prob = visible ? expf(p.scale * st[r][c] - slse[qc]) : 0.0f;
          const float factor = visible ? dropout_factor(p, base, query, key) : 0.0f;
          spt[tile_row(ty, r) * SS + qc] = prob * factor;
          sdst[tile_row(ty, r) * SS + qc] = p.scale * prob * (factor * dpt[r][c] - sdsum[qc]);
        }
      }
      __syncthreads();
      accumulate_product<TR, TD, kTile.cols, D, SS>(spt, sdo, ty, tx, dv);
      accumulate_product<TR, TD, kTile.cols, D, SS>(sdst, sq, ty, tx, dk);
    }
  }
  add_rows<TR, TD>(p.dk, kv_first, k0, p.keys, p.dim, ty, tx, dk);
  add_rows<TR, TD>(p.dv, kv_first, k0, p.keys, p.dim, ty, tx, dv);
}

template <int D>
__global__ void __launch_bounds__(kTileThreads) dq_kernel(AttentionParams p) {
  constexpr tiling::Tile kTile = tiling::backward_tile(D);  // rows: queries, cols: keys
  constexpr int TR = kTile.thread_rows(), TC = kTile.thread_cols(), TD = kTile.thread_dims();
  constexpr int SS = kTile.score_stride();
  constexpr tiling::BackwardSmem kSmem = tiling::backward_smem(kTile);
  extern __shared__ float smem[];
  float* sq = smem + kSmem.own_a;      // (64, D + 1) the block's query rows
  float* sdo = smem + kSmem.own_b;     // (64, D + 1) their output gradients
  float* sk = smem + kSmem.tile_a;     // (32, D + 1) a key tile
  float* sv = smem + kSmem.tile_b;     // (32, D + 1) its values
  float* sds = smem + kSmem.scores_a;  // (64, 48) dS
  float* slse = smem + kSmem.lse;      // (64) the rows' logsumexp
  float* sdsum = smem + kSmem.dsum;    // (64) the rows' D
  const int ty = static_cast<int>(threadIdx.x) / kTileSide;
  const int tx = static_cast<int>(threadIdx.x) % kTileSide;
  const std::int64_t bh = blockIdx.x;
  const std::int64_t base = p.where.head_base(bh / p.heads, bh % p.heads);
  const std::int64_t q0 = std::int64_t{blockIdx.y} * kTile.rows;
  const std::int64_t kv_first = (bh / p.group) * p.keys, q_first = bh * p.queries;

  load_rows<D, kTile.rows>(p.q, (q_first + q0) * p.dim, p.queries - q0, p.dim, sq);
  load_rows<D, kTile.rows>(p.dout, (q_first + q0) * p.dim, p.queries - q0, p.dim, sdo);
  if (threadIdx.x < kTile.rows) {
    const std::int64_t query = q0 + threadIdx.x;
    slse[threadIdx.x] = query < p.queries ? p.saved_lse[q_first + query] : 0.0f;
    sdsum[threadIdx.x] = query < p.queries ? p.dsum[q_first + query] : 0.0f;
  }
  float dq[TR][TD];
#pragma unroll
  for (int r = 0; r < TR; ++r) {
#pragma unroll
    for (int e = 0; e < TD; ++e) dq[r][e] = 0.0f;
  }
  const std::int64_t end = tiling::key_end(p.mask, q0, kTile.rows, p.queries, p.keys);
  for (std::int64_t k0 = 0; k0 < end; k0 += kTile.cols) {
    __syncthreads();  // the previous tile's product is done with sk and sds
    load_rows<D, kTile.cols>(p.k, (kv_first + k0) * p.dim, p.keys - k0, p.dim, sk);
    load_rows<D, kTile.cols>(p.v, (kv_first + k0) * p.dim, p.keys - k0, p.dim, sv);
    __syncthreads();
    float s[TR][TC], dp[TR][TC];
    dot_tile<TR, TC, D>(sq, sk, ty, tx, s);
    dot_tile<TR, TC, D>(sdo, sv, ty, tx, dp);
#pragma unroll
    for (int r = 0; r < TR; ++r) {
      const int qr = tile_row(ty, r);
      const std::int64_t query = q0 + qr;
#pragma unroll
      for (int c = 0; c < TC; ++c) {
        const std::int64_t key = k0 + tile_col(tx, c);
        const bool visible = key < p.keys && query < p.queries && p.mask.sees(query, key);
        const float prob = visible ? expf(p.scale * s[r][c] - slse[qr]) : 0.0f;
        const float factor = visible ? dropout_factor(p, base, query, key) : 0.0f;
        sds[qr * SS + tile_col(tx, c)] = p.scale * prob * (factor * dp[r][c] - sdsum[qr]);
      }
    }
    __syncthreads();
    accumulate_product<TR, TD, kTile.cols, D, SS>(sds, sk, ty, tx, dq);
  }
  add_rows<TR, TD>(p.dq, q_first, q0, p.queries, p.dim, ty, tx, dq);
}

// ---- host side
// -----------------------------------------------------------------------------------

struct AttentionGeometry {
  std::int64_t batch = 0, heads = 0, queries = 0, keys = 0, dim = 0;
  std::int64_t group = 1;  // query heads per key/value head (1: multi-head attention)
  Index probs{};           // local probability extents (B, a, Sq, Sk) or (B, n, g, Sq, Sk)
};

// q (B, a, Sq, d) with k, v (B, a, Sk, d), or grouped q (B, n, g, Sq, d) with k, v (B, n, Sk, d).
AttentionGeometry attention_geometry(std::string_view call, const TensorShape& q,
                                     const TensorShape& k, const TensorShape& v) {
  checks::require_same_shape(call, k, v);
  const bool grouped = q.rank() == 5;
  const std::size_t qs = grouped ? 3 : 2;  // q's sequence dim
  CARTO_CHECK(
      (q.rank() == 4 || grouped) && k.rank() == 4 && q.dims()[0].extent == k.dims()[0].extent &&
          q.dims()[1].extent == k.dims()[1].extent && q.dims()[qs + 1].extent == k.dims()[3].extent,
      call,
      ": q (B, heads, Sq, d) or grouped (B, n, g, Sq, d) and k, v (B, heads or n, Sk, d) do not "
      "match: q ",
      q, ", k ", k);
  AttentionGeometry g{.batch = q.dims()[0].extent,
                      .heads = q.dims()[1].extent * (grouped ? q.dims()[2].extent : 1),
                      .queries = q.dims()[qs].extent,
                      .keys = k.dims()[2].extent,
                      .dim = q.dims()[qs + 1].extent,
                      .group = grouped ? q.dims()[2].extent : 1};
  if (grouped) {
    g.probs = {g.batch, q.dims()[1].extent, g.group, g.queries, g.keys};
  } else {
    g.probs = {g.batch, g.heads, g.queries, g.keys};
  }
  return g;
}

// The parameters every kernel shares: shapes, mask and dropout from args and the placement (of the
// rank-4 or rank-5 probabilities; the rank-4 form is indexed as rank 5 with a group dim of 1).
AttentionParams attention_params(std::string_view call, const AttentionGeometry& g,
                                 const AttentionArgs& args) {
  CARTO_CHECK(args.dropout >= 0.0f && args.dropout < 1.0f, call,
              ": dropout must be in [0, 1); got ", args.dropout);
  CARTO_CHECK(tiling::head_dim_class(g.dim) != 0, call, ": head dim ", g.dim,
              " is not supported; the CUDA kernels take head dims 1 to ", tiling::kMaxHeadDim);
  const GlobalIndexer where(args.placement, g.probs);  // validates the placement
  const bool grouped = g.probs.size() == 5;
  // (batch, kv head, group, query, key) strides and offsets; no group dim: stride 0, offset 0.
  const auto at = [&](const Index& v, int d) -> std::int64_t {
    if (grouped) return v[static_cast<std::size_t>(d)];
    return d < 2 ? v[static_cast<std::size_t>(d)] : d == 2 ? 0 : v[static_cast<std::size_t>(d - 1)];
  };
  AttentionParams p;
  p.heads = g.heads;
  p.group = g.group;
  p.queries = g.queries;
  p.keys = g.keys;
  p.dim = g.dim;
  p.scale = args.scale;
  p.dropout = args.dropout;
  p.keep_scale = 1.0f / (1.0f - args.dropout);
  p.rng = args.rng;
  const std::size_t sq = g.probs.size() - 2;  // the query dim of the probabilities
  p.mask = {.causal = args.masking == Masking::causal,
            .query_offset = where.offset[sq],
            .key_offset = where.offset[sq + 1]};
  for (int d = 0; d < 5; ++d) {
    p.where.stride[d] = at(where.stride, d);
    p.where.offset[d] = at(where.offset, d);
  }
  p.where.group = g.group;
  return p;
}

// Raises the kernel's dynamic shared-memory limit to `floats` floats, or throws when the device
// has less to give.
template <class Kernel>
void prepare_shared_memory(std::string_view call, Kernel* kernel, int floats, int dim_class) {
  const int bytes = floats * static_cast<int>(sizeof(float));
  int device = 0, optin = 0;
  CARTO_CUDA_CHECK(cudaGetDevice(&device));
  CARTO_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  CARTO_CHECK(bytes <= optin, call, ": head dims up to ", dim_class, " need ", bytes,
              " bytes of shared memory per block; this device allows ", optin);
  CARTO_CUDA_CHECK(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
}

// The grid of a kernel whose blocks own `rows` rows of `extent` per one of `pairs` (batch, head)
// pairs (query heads, or key/value heads for dk, dv).
dim3 tile_grid(std::string_view call, std::int64_t pairs, std::int64_t extent, int rows) {
  const std::int64_t tiles = tiling::div_up(extent, rows);
  CARTO_CHECK(tiles <= 65535 && pairs <= 0x7fffffff, call, ": ", pairs, " (batch, head) pairs and ",
              tiles, " tiles of ", rows, " rows exceed the grid (2^31 - 1 by 65535)");
  return {static_cast<unsigned>(pairs), static_cast<unsigned>(tiles), 1};
}

template <int D>
void launch_forward(const Launch& launch, const AttentionParams& p, const AttentionGeometry& g) {
  constexpr tiling::Tile kTile = tiling::forward_tile(D);
  constexpr int kFloats = tiling::forward_smem(kTile).total;
  prepare_shared_memory("attention_forward", forward_kernel<D>, kFloats, D);
  forward_kernel<D><<<tile_grid("attention_forward", g.batch * g.heads, g.queries, kTile.rows),
                      kTileThreads, kFloats * sizeof(float), launch.stream>>>(p);
  CARTO_CUDA_CHECK_LAUNCH();
}

template <int D>
void launch_backward(const Launch& launch, const AttentionParams& p, const AttentionGeometry& g) {
  constexpr tiling::Tile kTile = tiling::backward_tile(D);
  constexpr int kFloats = tiling::backward_smem(kTile).total;
  prepare_shared_memory("attention_backward", dkdv_kernel<D>, kFloats, D);
  prepare_shared_memory("attention_backward", dq_kernel<D>, kFloats, D);
  dkdv_kernel<D>
      <<<tile_grid("attention_backward", g.batch * (g.heads / g.group), g.keys, kTile.rows),
         kTileThreads, kFloats * sizeof(float), launch.stream>>>(p);
  CARTO_CUDA_CHECK_LAUNCH();
  dq_kernel<D><<<tile_grid("attention_backward", g.batch * g.heads, g.queries, kTile.rows),
                 kTileThreads, kFloats * sizeof(float), launch.stream>>>(p);
  CARTO_CUDA_CHECK_LAUNCH();
}

}  // namespace

void attention_forward(const Launch& launch, ConstTensorView q, ConstTensorView k,
                       ConstTensorView v, TensorView out, TensorView logsumexp,
                       const AttentionArgs& args) {
  constexpr std::string_view kCall = "attention_forward";
  const AttentionGeometry g = attention_geometry(kCall, q.shape(), k.shape(), v.shape());
  checks::require_same_shape(kCall, q.shape(), out.shape);
  checks::require_numel(kCall, "logsumexp", logsumexp.numel(), g.batch * g.heads * g.queries);
  AttentionParams p = attention_params(kCall, g, args);
  p.q = checks::elements(kCall, "q", q);
  p.k = checks::elements(kCall, "k", k);
  p.v = checks::elements(kCall, "v", v);
  p.out = checks::elements(kCall, "out", out);
  p.logsumexp = checks::stats(kCall, "logsumexp", logsumexp);
  if (g.batch * g.heads * g.queries == 0) return;
  // Every row sees a prefix of keys that grows with the row: the first row decides.
  CARTO_CHECK(p.mask.visible(0, g.keys) > 0, kCall, ": query row 0 sees no key");
  switch (tiling::head_dim_class(g.dim)) {
    case 32: launch_forward<32>(launch, p, g); break;
    case 64: launch_forward<64>(launch, p, g); break;
    default: launch_forward<128>(launch, p, g); break;
  }
}

void attention_backward(const Launch& launch, ConstTensorView q, ConstTensorView k,
                        ConstTensorView v, ConstTensorView out, ConstTensorView logsumexp,
                        ConstTensorView dout, TensorView dq, TensorView dk, TensorView dv,
                        const AttentionArgs& args) {
  constexpr std::string_view kCall = "attention_backward";
  const AttentionGeometry g = attention_geometry(kCall, q.shape(), k.shape(), v.shape());
  for (const TensorShape* s :
       std::initializer_list<const TensorShape*>{&out.shape(), &dout.shape(), &dq.shape}) {
    checks::require_same_shape(kCall, q.shape(), *s);
  }
  checks::require_same_shape(kCall, k.shape(), dk.shape);
  checks::require_same_shape(kCall, k.shape(), dv.shape);
  checks::require_numel(kCall, "logsumexp", logsumexp.numel(), g.batch * g.heads * g.queries);
  AttentionParams p = attention_params(kCall, g, args);
  p.q = checks::elements(kCall, "q", q);
  p.k = checks::elements(kCall, "k", k);
  p.v = checks::elements(kCall, "v", v);
  p.out = checks::elements(kCall, "out", out);
  p.dout = checks::elements(kCall, "dout", dout);
  p.dq = checks::elements(kCall, "dq", dq);
  p.dk = checks::elements(kCall, "dk", dk);
  p.dv = checks::elements(kCall, "dv", dv);
  p.saved_lse = checks::stats(kCall, "logsumexp", logsumexp);
  const std::int64_t rows = g.batch * g.heads * g.queries;
  if (rows == 0 || g.keys == 0) return;

  const Buffer work(*launch.workspace, static_cast<std::size_t>(rows) * sizeof(float),
                    MemoryCategory::temporaries);
  p.dsum = static_cast<float*>(work.data());
  const tiling::RowLaunch l = tiling::row_launch(rows, g.dim);
  dsum_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(p.dout, p.out, p.dsum, rows, g.dim, l);
  CARTO_CUDA_CHECK_LAUNCH();
  switch (tiling::head_dim_class(g.dim)) {
    case 32: launch_backward<32>(launch, p, g); break;
    case 64: launch_backward<64>(launch, p, g); break;
    default: launch_backward<128>(launch, p, g); break;
  }
}

}  // namespace carto::cuda
