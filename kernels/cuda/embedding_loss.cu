// cuda/embedding_loss.cu — vocab-parallel embedding lookup and softmax cross-entropy, whole rows
// and in the pieces the executor all-reduces between (max, then the two sums).
//
// Design note. Kernels and their decomposition:
//  - lookup_kernel: a grid-stride loop over the N·H output elements (consecutive threads,
//  consecutive
//    columns of one token: coalesced); out = table[id - vocab_offset] inside the shard, else 0, so
//    the sum over vocab shards is the full lookup.
//  - embedding backward, deterministic and without float atomics: shard_keys_kernel gives each
//  token
//    its local table row (or the sentinel V_local outside the shard), a stable CUB radix sort of
//    (row, position) pairs groups the tokens of one row in position order, and scatter_rows_kernel
//    gives each run of equal rows to one block: per column it widens the table row once, adds the
//    tokens' gradients in fp32 in position order and rounds once. That is the CPU backend's order,
//    so fp32 and bf16 tables get the CPU's bits. Workspace: four int32 arrays of N and CUB's
//    temporary storage.
//  - row_max_kernel, sum_exp_kernel, max_sum_exp_kernel: one thread group per row
//    (tiling::row_launch; vocab rows are long, so usually the whole block) reducing a max, a
//    Σ exp(logit - max) or, for the whole-row forward, both in one read of the logits with the
//    online (max, sum) pair (Milakov & Gimelshein 2018).
//  - target_logit_kernel: one thread per row.
//  - loss_kernel: one block; each thread forms logsumexp = max + log(sum_exp) for a stride of rows
//    and sums logsumexp - target in double, a fixed-order block reduction, one rounding:
//    loss = Σ / count, deterministic.
//  - backward_kernel: one group per row, dlogits += dloss/count · (exp(logit - lse) - [target]);
//    dloss is read on the device (it is a device tensor), so the call stays asynchronous.
// Token ids and targets are in device memory: checking them would cost a copy to the host and a
// synchronization per call, so they are not checked. An id outside the shard (negative ones
// included) looks up zeros and adds nothing; a target outside [0, V) gives a target logit of 0 (the
// CPU backend throws on negative ids and out-of-vocab targets of whole rows).
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <string_view>

#include "cuda/embedding_loss.cuh"
#include "cuda/reduce.cuh"
#include "cuda/reduction_checks.hpp"
#include "cuda/tiling.hpp"

namespace carto::cuda {

namespace {

// Row kernels run up to 1024 threads a block (tiling::row_launch): registers are capped to fit.
constexpr int kRowThreads = static_cast<int>(tiling::kMaxBlockThreads);

using tiling::RowLaunch;

// ---- embedding kernels
// ----------------------------------------------------------------------------

__global__ void lookup_kernel(Elements table, const std::int32_t* ids, Elements out,
                              std::int64_t tokens, std::int64_t rows, std::int64_t width,
                              std::int64_t vocab_offset) {
  const std::int64_t total = tokens * width;
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < total;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t n = i / width, j = i % width;
    const std::int64_t row = ids[n] - vocab_offset;
    store(out, i, row >= 0 && row < rows ? load(table, row * width + j) : 0.0f);
  }
}

// keys[n] = the token's local table row, or `rows` outside the shard; positions[n] = n.
__global__ void shard_keys_kernel(const std::int32_t* ids, std::int64_t tokens, std::int64_t rows,
                                  std::int64_t vocab_offset, std::uint32_t* keys,
                                  std::int32_t* positions) {
  for (std::int64_t n = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; n < tokens;
       n += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t row = ids[n] - vocab_offset;
    keys[n] = static_cast<std::uint32_t>(row >= 0 && row < rows ? row : rows);
    positions[n] = static_cast<std::int32_t>(n);
  }
}

// For each run of equal keys (sorted), one block adds the run's dout rows to the table row.
__global__ void scatter_rows_kernel(const std::uint32_t* keys, const std::int32_t* positions,
                                    std::int64_t tokens, std::int64_t rows, Elements dout,
                                    Elements dtable, std::int64_t width) {
  for (std::int64_t i = blockIdx.x; i < tokens; i += gridDim.x) {
    const std::uint32_t key = keys[i];
    if (key >= rows || (i > 0 && keys[i - 1] == key)) continue;  // not the start of a shard row
    std::int64_t end = i + 1;
    while (end < tokens && keys[end] == key) ++end;
    const std::int64_t row = key;
    for (std::int64_t j = threadIdx.x; j < width; j += blockDim.x) {
      float acc = load(dtable, row * width + j);
      for (std::int64_t t = i; t < end; ++t) acc += load(dout, positions[t] * width + j);
      store(dtable, row * width + j, acc);
    }
  }
}

// ---- cross-entropy kernels
// ------------------------------------------------------------------------

__global__ void __launch_bounds__(kRowThreads)
    row_max_kernel(Elements logits, float* row_max, std::int64_t rows, std::int64_t vocab,
                   RowLaunch launch) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    float m = -INFINITY;
    for (std::int64_t j = g.lane; j < vocab; j += width) m = fmaxf(m, load(logits, r * vocab + j));
    m = group_reduce(m, MaxOp{}, scratch, launch.whole_block());
    if (g.lane == 0) row_max[r] = m;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    sum_exp_kernel(Elements logits, const float* row_max, float* sum_exp, std::int64_t rows,
                   std::int64_t vocab, RowLaunch launch) {
  __shared__ float scratch[32];
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const float m = row_max[r];
    float s = 0.0f;
    for (std::int64_t j = g.lane; j < vocab; j += width) s += expf(load(logits, r * vocab + j) - m);
    s = group_reduce(s, SumOp{}, scratch, launch.whole_block());
    if (g.lane == 0) sum_exp[r] = s;
  }
}

__global__ void __launch_bounds__(kRowThreads)
    max_sum_exp_kernel(Elements logits, float* row_max, float* sum_exp, std::int64_t rows,
                       std::int64_t vocab, RowLaunch launch) {
  __shared__ MaxSum scratch[32];
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    MaxSum t = empty_max_sum();
    for (std::int64_t j = g.lane; j < vocab; j += width) t = push(t, load(logits, r * vocab + j));
    t = group_reduce(t, MergeOp{}, scratch, launch.whole_block());
    if (g.lane == 0) {
      row_max[r] = t.max;
      sum_exp[r] = t.sum;
    }
  }
}

__global__ void target_logit_kernel(Elements logits, const std::int32_t* targets, float* target,
                                    std::int64_t rows, std::int64_t vocab,
                                    std::int64_t vocab_offset) {
  for (std::int64_t i = std::int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows;
       i += std::int64_t{gridDim.x} * blockDim.x) {
    const std::int64_t col = targets[i] - vocab_offset;
    target[i] = col >= 0 && col < vocab ? load(logits, i * vocab + col) : 0.0f;
  }
}

constexpr unsigned kLossThreads = 1024;

// One block: logsumexp = max + log(sum_exp) per row, loss = Σ (logsumexp - target) / count.
__global__ void __launch_bounds__(kRowThreads)
    loss_kernel(const float* row_max, const float* sum_exp, const float* target, float* loss,
                float* logsumexp, std::int64_t rows, double count) {
  __shared__ double scratch[32];
  double total = 0.0;
  for (std::int64_t i = threadIdx.x; i < rows; i += blockDim.x) {
    const float lse = row_max[i] + logf(sum_exp[i]);
    logsumexp[i] = lse;
    total += static_cast<double>(lse) - static_cast<double>(target[i]);
  }
  total = block_reduce(total, SumOp{}, scratch);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(total / count);
}

__global__ void __launch_bounds__(kRowThreads)
    backward_kernel(Elements logits, const std::int32_t* targets, const float* logsumexp,
                    Elements dloss, Elements dlogits, std::int64_t rows, std::int64_t vocab,
                    std::int64_t vocab_offset, float count, RowLaunch launch) {
  const tiling::RowGroup g = tiling::row_group(launch, blockIdx.x, threadIdx.x);
  const std::int64_t width = launch.group_width();
  const float scale = load(dloss, 0) / count;
  for (std::int64_t r = g.first_row; r < rows; r += g.row_step) {
    const float lse = logsumexp[r];
    const std::int64_t target = targets[r] - vocab_offset;
    for (std::int64_t j = g.lane; j < vocab; j += width) {
      const std::int64_t i = r * vocab + j;
      const float grad = scale * (expf(load(logits, i) - lse) - (j == target ? 1.0f : 0.0f));
      store(dlogits, i, load(dlogits, i) + grad);
    }
  }
}

// ---- host side
// -----------------------------------------------------------------------------------

struct TableGeometry {
  std::int64_t rows = 0, width = 0;
};
TableGeometry table_geometry(std::string_view call, const TensorShape& table, const IndexView& ids,
                             std::int64_t out_numel) {
  CARTO_CHECK(table.rank() == 2, call, ": the table is (V, H); got ", table);
  const TableGeometry t{.rows = table.dims()[0].extent, .width = table.dims()[1].extent};
  checks::require_numel(call, "the output", out_numel, ids.numel() * t.width);
  return t;
}

struct LogitRows {
  std::int64_t rows = 0, vocab = 0, count = 0;
};
// logits (rows..., V) against a per-row view `what` of `per_row` elements.
LogitRows logit_rows(std::string_view call, const TensorShape& logits, std::string_view what,
                     std::int64_t per_row, const CrossEntropyArgs& args) {
  LogitRows r;
  r.vocab = checks::last_extent(call, logits);
  CARTO_CHECK(r.vocab > 0, call, ": the vocab dim of ", logits, " is empty");
  r.rows = logits.numel() / r.vocab;
  checks::require_numel(call, what, per_row, r.rows);
  r.count = args.token_count > 0 ? args.token_count : r.rows;
  return r;
}

// A byte offset rounded up to 256 (CUB's and the caching allocator's alignment).
constexpr std::size_t aligned(std::size_t bytes) { return (bytes + 255) / 256 * 256; }

}  // namespace

void embedding_forward(const Launch& launch, ConstTensorView table, IndexView ids, TensorView out,
                       const EmbeddingShard& shard) {
  constexpr std::string_view kCall = "embedding_forward";
  const TableGeometry t = table_geometry(kCall, table.shape(), ids, out.numel());
  const Elements et = checks::elements(kCall, "table", table);
  const Elements eo = checks::elements(kCall, "out", out);
  if (out.numel() == 0) return;
  const Grid1d g = grid_1d(out.numel());
  lookup_kernel<<<g.blocks, g.threads, 0, launch.stream>>>(et, ids.data, eo, ids.numel(), t.rows,
                                                           t.width, shard.vocab_offset);
  CARTO_CUDA_CHECK_LAUNCH();
}

void embedding_backward(const Launch& launch, ConstTensorView dout, IndexView ids,
                        TensorView dtable, const EmbeddingShard& shard) {
  constexpr std::string_view kCall = "embedding_backward";
  const TableGeometry t = table_geometry(kCall, dtable.shape, ids, dout.numel());
  const Elements ed = checks::elements(kCall, "dout", dout);
  const Elements et = checks::elements(kCall, "dtable", dtable);
  const std::int64_t n = ids.numel();
  if (n == 0 || t.width == 0 || t.rows == 0) return;
  CARTO_CHECK(n <= INT_MAX && t.rows < UINT_MAX, kCall, ": ", n, " tokens and ", t.rows,
              " table rows; the sort takes at most 2^31 - 1 tokens and 2^32 - 2 rows");
  const auto items = static_cast<int>(n);
  const int end_bit = tiling::key_bits(t.rows);
  std::size_t sort_bytes = 0;
  CARTO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, sort_bytes, static_cast<const std::uint32_t*>(nullptr),
      static_cast<std::uint32_t*>(nullptr), static_cast<const std::int32_t*>(nullptr),
      static_cast<std::int32_t*>(nullptr), items, 0, end_bit, launch.stream));
  const std::size_t array = aligned(static_cast<std::size_t>(n) * 4);
  const Buffer work(*launch.workspace, 4 * array + sort_bytes, MemoryCategory::temporaries);
  auto* base = static_cast<std::byte*>(work.data());
  auto* keys_in = reinterpret_cast<std::uint32_t*>(base);
  auto* keys_out = reinterpret_cast<std::uint32_t*>(base + array);
  auto* pos_in = reinterpret_cast<std::int32_t*>(base + 2 * array);
  auto* pos_out = reinterpret_cast<std::int32_t*>(base + 3 * array);
  void* sort_temp = base + 4 * array;

  const Grid1d g = grid_1d(n);
  shard_keys_kernel<<<g.blocks, g.threads, 0, launch.stream>>>(ids.data, n, t.rows,
                                                               shard.vocab_offset, keys_in, pos_in);
  CARTO_CUDA_CHECK_LAUNCH();
  CARTO_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(sort_temp, sort_bytes, keys_in, keys_out, pos_in,
                                                   pos_out, items, 0, end_bit, launch.stream));
  const auto threads =
      static_cast<unsigned>(tiling::clamp(tiling::round_up(t.width, tiling::kWarp), 32, 256));
  const auto blocks = static_cast<unsigned>(tiling::clamp(n, 1, 65535));
  scatter_rows_kernel<<<blocks, threads, 0, launch.stream>>>(keys_out, pos_out, n, t.rows, ed, et,
                                                             t.width);
  CARTO_CUDA_CHECK_LAUNCH();
}

void cross_entropy_row_max(const Launch& launch, ConstTensorView logits, TensorView row_max) {
  constexpr std::string_view kCall = "cross_entropy_row_max";
  const LogitRows r = logit_rows(kCall, logits.shape(), "row_max", row_max.numel(), {});
  const Elements el = checks::elements(kCall, "logits", logits);
  float* pm = checks::stats(kCall, "row_max", row_max);
  if (r.rows == 0) return;
  const RowLaunch l = tiling::row_launch(r.rows, r.vocab);
  row_max_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(el, pm, r.rows, r.vocab, l);
  CARTO_CUDA_CHECK_LAUNCH();
}

void cross_entropy_sum_exp(const Launch& launch, ConstTensorView logits, ConstTensorView row_max,
                           TensorView sum_exp) {
  constexpr std::string_view kCall = "cross_entropy_sum_exp";
  const LogitRows r = logit_rows(kCall, logits.shape(), "row_max", row_max.numel(), {});
  checks::require_numel(kCall, "sum_exp", sum_exp.numel(), r.rows);
  const Elements el = checks::elements(kCall, "logits", logits);
  const float* pm = checks::stats(kCall, "row_max", row_max);
  float* ps = checks::stats(kCall, "sum_exp", sum_exp);
  if (r.rows == 0) return;
  const RowLaunch l = tiling::row_launch(r.rows, r.vocab);
  sum_exp_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(el, pm, ps, r.rows, r.vocab, l);
  CARTO_CUDA_CHECK_LAUNCH();
}

void cross_entropy_target_logit(const Launch& launch, ConstTensorView logits, IndexView targets,
                                TensorView target_logit, const CrossEntropyArgs& args) {
  constexpr std::string_view kCall = "cross_entropy_target_logit";
  const LogitRows r = logit_rows(kCall, logits.shape(), "targets", targets.numel(), args);
  checks::require_numel(kCall, "target_logit", target_logit.numel(), r.rows);
  const Elements el = checks::elements(kCall, "logits", logits);
  float* pt = checks::stats(kCall, "target_logit", target_logit);
  if (r.rows == 0) return;
  const Grid1d g = grid_1d(r.rows);
  target_logit_kernel<<<g.blocks, g.threads, 0, launch.stream>>>(el, targets.data, pt, r.rows,
                                                                 r.vocab, args.vocab_offset);
  CARTO_CUDA_CHECK_LAUNCH();
}

void cross_entropy_loss(const Launch& launch, ConstTensorView row_max, ConstTensorView sum_exp,
                        ConstTensorView target_logit, TensorView loss, TensorView logsumexp,
                        const CrossEntropyArgs& args) {
  constexpr std::string_view kCall = "cross_entropy_loss";
  const std::int64_t rows = row_max.numel();
  checks::require_numel(kCall, "sum_exp", sum_exp.numel(), rows);
  checks::require_numel(kCall, "target_logit", target_logit.numel(), rows);
  checks::require_numel(kCall, "logsumexp", logsumexp.numel(), rows);
  checks::require_numel(kCall, "loss", loss.numel(), 1);
  const std::int64_t count = args.token_count > 0 ? args.token_count : rows;
  loss_kernel<<<1, kLossThreads, 0, launch.stream>>>(
      checks::stats(kCall, "row_max", row_max), checks::stats(kCall, "sum_exp", sum_exp),
      checks::stats(kCall, "target_logit", target_logit), checks::stats(kCall, "loss", loss),
      checks::stats(kCall, "logsumexp", logsumexp), rows, static_cast<double>(count));
  CARTO_CUDA_CHECK_LAUNCH();
}

void cross_entropy_forward(const Launch& launch, ConstTensorView logits, IndexView targets,
                           TensorView loss, TensorView logsumexp, const CrossEntropyArgs& args) {
  constexpr std::string_view kCall = "cross_entropy_forward";
  const LogitRows r = logit_rows(kCall, logits.shape(), "targets", targets.numel(), args);
  CARTO_CHECK(args.vocab_offset == 0, kCall, " takes whole rows (vocab_offset 0); ",
              "for vocab shards use the row_max / sum_exp / target_logit / loss pieces");
  checks::require_numel(kCall, "logsumexp", logsumexp.numel(), r.rows);
  checks::require_numel(kCall, "loss", loss.numel(), 1);
  const Elements el = checks::elements(kCall, "logits", logits);
  checks::stats(kCall, "loss", loss);
  checks::stats(kCall, "logsumexp", logsumexp);
  const TensorShape row_shape{{"rows", r.rows}};
  const Buffer work(*launch.workspace, static_cast<std::size_t>(3 * r.rows) * sizeof(float),
                    MemoryCategory::temporaries);
  float* pm = static_cast<float*>(work.data());
  const TensorView row_max{.data = pm, .shape = row_shape};
  const TensorView sum_exp{.data = pm + r.rows, .shape = row_shape};
  const TensorView target{.data = pm + 2 * r.rows, .shape = row_shape};
  if (r.rows > 0) {
    const RowLaunch l = tiling::row_launch(r.rows, r.vocab);
    max_sum_exp_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(el, pm, pm + r.rows, r.rows,
                                                                  r.vocab, l);
    CARTO_CUDA_CHECK_LAUNCH();
    cross_entropy_target_logit(launch, logits, targets, target, args);
  }
  cross_entropy_loss(launch, row_max, sum_exp, target, loss, logsumexp, args);
}

void cross_entropy_backward(const Launch& launch, ConstTensorView logits, IndexView targets,
                            ConstTensorView logsumexp, ConstTensorView dloss, TensorView dlogits,
                            const CrossEntropyArgs& args) {
  constexpr std::string_view kCall = "cross_entropy_backward";
  const LogitRows r = logit_rows(kCall, logits.shape(), "targets", targets.numel(), args);
  checks::require_numel(kCall, "logsumexp", logsumexp.numel(), r.rows);
  checks::require_numel(kCall, "dloss", dloss.numel(), 1);
  checks::require_numel(kCall, "dlogits", dlogits.numel(), logits.numel());
  const Elements el = checks::elements(kCall, "logits", logits);
  const Elements eg = checks::elements(kCall, "dloss", dloss);
  const Elements ed = checks::elements(kCall, "dlogits", dlogits);
  const float* plse = checks::stats(kCall, "logsumexp", logsumexp);
  if (r.rows == 0) return;
  const RowLaunch l = tiling::row_launch(r.rows, r.vocab);
  backward_kernel<<<l.blocks, l.threads, 0, launch.stream>>>(el, targets.data, plse, eg, ed, r.rows,
                                                             r.vocab, args.vocab_offset,
                                                             static_cast<float>(r.count), l);
  CARTO_CUDA_CHECK_LAUNCH();
}

}  // namespace carto::cuda
