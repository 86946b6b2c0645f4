// The CPU backend's embedding lookup and softmax cross-entropy, whole and vocab-parallel.
//
// Vocab-parallel (Megatron-LM): a shard holds vocab rows [offset, offset + V_local). The lookup
// of a token outside them gives 0, so the sum over shards is the full lookup. Cross-entropy over
// split logits needs the global row max (all-reduce max), the global Σ exp(logit - max) (all-reduce
// sum) and the target's logit (all-reduce sum of the one shard's value and zeros); the loss and the
// gradient then follow from those reduced rows on every shard.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>

#include "cpu_backend.hpp"
#include "elements.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::exp_approx;
using detail::fp32_of;
using detail::last_extent;
using detail::Load;
using detail::require_numel;
using detail::rows_per_block;
using detail::Staging;

// ---- embedding
// -----------------------------------------------------------------------------------

namespace {
struct TableGeometry {
  std::int64_t rows = 0, width = 0;
};
TableGeometry table_geometry(std::string_view call, const TensorShape& table, const IndexView& ids,
                             std::int64_t out_numel) {
  CARTO_CHECK(table.rank() == 2, call, ": the table is (V, H); got ", table);
  const TableGeometry t{.rows = table.dims()[0].extent, .width = table.dims()[1].extent};
  require_numel(call, "the output", out_numel, ids.numel() * t.width);
  return t;
}
}  // namespace

void CpuBackend::embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                                   const EmbeddingShard& shard) {
  const TableGeometry t = table_geometry("embedding_forward", table.shape(), ids, out.numel());
  const std::int64_t w = t.width;
  // A copy: the same dtype moves rows as they are; fp32 <-> bf16 converts through a slot.
  const bool same = table.dtype() == out.dtype;
  detail::require_storable("embedding_forward", "table", table.dtype());
  detail::require_storable("embedding_forward", "out", out.dtype);
  const Staging st(*this, "embedding_forward",
                   {{"table", same ? DType::fp32 : table.dtype(), w},
                    {"out", same ? DType::fp32 : out.dtype, w}});
  const auto elem = static_cast<std::size_t>(size_bytes(out.dtype));
  const auto* pt = static_cast<const std::byte*>(table.data());
  auto* po = static_cast<std::byte*>(out.data);
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    CARTO_CHECK(ids.data[n] >= 0, "embedding_forward: token id ", ids.data[n], " at ", n);
    const std::int64_t row = ids.data[n] - shard.vocab_offset;
    const bool local = row >= 0 && row < t.rows;
    if (same) {
      std::byte* on = po + static_cast<std::size_t>(n * w) * elem;
      if (local) {
        std::memcpy(on, pt + static_cast<std::size_t>(row * w) * elem,
                    static_cast<std::size_t>(w) * elem);
      } else {
        std::memset(on, 0, static_cast<std::size_t>(w) * elem);  // +0 in fp32 and bf16
      }
      continue;
    }
    float* on = st.write(1, out, n * w, w, Load::no);
    if (local) {
      const float* tr = st.read(0, table, row * w, w);
      std::copy(tr, tr + w, on);
    } else {
      std::fill(on, on + w, 0.0f);
    }
    st.commit(1, out, n * w, w);
  }
}

namespace {
// dtable[row] += dout[n] over the tokens n of the shard's rows, in order of n.
void scatter_add_fp32(const Staging& st, ConstTensorView dout, const IndexView& ids, float* pt,
                      std::int64_t rows, std::int64_t width, std::int64_t vocab_offset) {
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    const std::int64_t row = ids.data[n] - vocab_offset;
    if (row < 0 || row >= rows) continue;
    const float* pd = st.read(0, dout, n * width, width);
    float* tr = pt + row * width;
    for (std::int64_t j = 0; j < width; ++j) tr[j] += pd[j];
  }
}
}  // namespace

void CpuBackend::embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                                    const EmbeddingShard& shard, CopyMode mode) {
  const TableGeometry t = table_geometry("embedding_backward", dtable.shape, ids, dout.numel());
  if (mode == CopyMode::assign) fill(dtable, 0.0f);  // the rows no token hits are 0
  const std::int64_t w = t.width;
  const Staging st(*this, "embedding_backward",
                   {{"dout", dout.dtype(), w}, {"dtable", dtable.dtype, w}});
  if (dtable.dtype == DType::fp32) {
    scatter_add_fp32(st, dout, ids, dtable.f32(), t.rows, w, shard.vocab_offset);
    return;
  }
  // The positions of the shard's tokens, ordered by (row, position): each table row is widened
  // once, gets its tokens' rows added in fp32 in position order, and is rounded once.
  const Buffer order_buffer(allocator(),
                            static_cast<std::size_t>(ids.numel()) * sizeof(std::int64_t),
                            MemoryCategory::temporaries);
  auto* order = static_cast<std::int64_t*>(order_buffer.data());
  std::int64_t count = 0;
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    const std::int64_t row = ids.data[n] - shard.vocab_offset;
    if (row >= 0 && row < t.rows) order[count++] = n;
  }
  std::sort(order, order + count, [&](std::int64_t a, std::int64_t b) {
    return ids.data[a] != ids.data[b] ? ids.data[a] < ids.data[b] : a < b;
  });
  for (std::int64_t i = 0; i < count;) {
    const std::int64_t row = ids.data[order[i]] - shard.vocab_offset;
    float* acc = st.write(1, dtable, row * w, w, Load::yes);
    for (; i < count && ids.data[order[i]] - shard.vocab_offset == row; ++i) {
      const float* pd = st.read(0, dout, order[i] * w, w);
      for (std::int64_t j = 0; j < w; ++j) acc[j] += pd[j];
    }
    st.commit(1, dtable, row * w, w);
  }
}

// ---- cross-entropy
// -------------------------------------------------------------------------------

namespace {
struct LogitRows {
  std::int64_t rows = 0, vocab = 0, count = 0;
};
LogitRows logit_rows(std::string_view call, const TensorShape& logits, std::int64_t targets,
                     const CrossEntropyArgs& args) {
  LogitRows r;
  r.vocab = last_extent(call, logits);
  r.rows = logits.numel() / r.vocab;
  require_numel(call, "targets", targets, r.rows);
  r.count = args.token_count > 0 ? args.token_count : r.rows;
  return r;
}

// The loops over logits (rows, vocab): a row's max, and its Σ exp(logit - max).
CARTO_VECTOR_INLINE float row_max_of(const float* li, std::int64_t vocab) {
  return detail::max_lanes(vocab, [&](std::int64_t j) { return li[j]; });
}
CARTO_VECTOR_INLINE float sum_exp_of(const float* li, float max, std::int64_t vocab) {
  return detail::sum_lanes<float>(vocab, [&](std::int64_t j) { return exp_approx(li[j] - max); });
}

CARTO_VECTOR_CLONES void row_max_rows(const float* pl, float* pm, std::int64_t rows,
                                      std::int64_t vocab) {
  for (std::int64_t i = 0; i < rows; ++i) pm[i] = row_max_of(pl + i * vocab, vocab);
}

CARTO_VECTOR_CLONES void sum_exp_rows(const float* pl, const float* pm, float* ps,
                                      std::int64_t rows, std::int64_t vocab) {
  for (std::int64_t i = 0; i < rows; ++i) ps[i] = sum_exp_of(pl + i * vocab, pm[i], vocab);
}

// Both, a row at a time: the row is read from memory once and then from cache (whole rows, where
// no all-reduce of the max comes between). The same values as the two loops.
CARTO_VECTOR_CLONES void max_and_sum_exp_rows(const float* pl, float* pm, float* ps,
                                              std::int64_t rows, std::int64_t vocab) {
  for (std::int64_t i = 0; i < rows; ++i) {
    pm[i] = row_max_of(pl + i * vocab, vocab);
    ps[i] = sum_exp_of(pl + i * vocab, pm[i], vocab);
  }
}

// dlogits (=, +=) g · (exp(logit - lse) - [column == target]), target the row's column in this
// shard or outside [0, vocab).
CARTO_VECTOR_CLONES void cross_entropy_backward_rows(const float* pl, const float* plse,
                                                     const std::int32_t* targets,
                                                     std::int64_t vocab_offset, float g, float* pd,
                                                     std::int64_t rows, std::int64_t vocab,
                                                     bool accumulate) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* li = pl + i * vocab;
    float* di = pd + i * vocab;
    const float lse = plse[i];
    // Every column as if it were not the target, then the target's column (when it is in this
    // shard's vocab rows) redone from its old value with the -1.
    const std::int64_t target = targets[i] - vocab_offset;
    const bool local = target >= 0 && target < vocab;
    const float before = local && accumulate ? di[target] : 0.0f;
    if (accumulate) {
#pragma omp simd
      for (std::int64_t j = 0; j < vocab; ++j) di[j] += g * exp_approx(li[j] - lse);
    } else {
#pragma omp simd
      for (std::int64_t j = 0; j < vocab; ++j) di[j] = g * exp_approx(li[j] - lse);
    }
    if (local) di[target] = before + g * (exp_approx(li[target] - lse) - 1.0f);
  }
}

}  // namespace

void CpuBackend::cross_entropy_row_max(ConstTensorView logits, TensorView row_max) {
  const LogitRows r = logit_rows("cross_entropy_row_max", logits.shape(), row_max.numel(), {});
  float* pm = fp32_of("cross_entropy_row_max", "row_max", row_max);
  const std::int64_t v = r.vocab, step = rows_per_block(v, r.rows);
  const Staging st(*this, "cross_entropy_row_max", {{"logits", logits.dtype(), step * v}});
  st.for_blocks_parallel(r.rows, step, detail::row_grain(v), [&](std::int64_t r0, std::int64_t nr) {
    row_max_rows(st.read(0, logits, r0 * v, nr * v), pm + r0, nr, v);
  });
}

void CpuBackend::cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                                       TensorView sum_exp) {
  constexpr std::string_view call = "cross_entropy_sum_exp";
  const LogitRows r = logit_rows(call, logits.shape(), row_max.numel(), {});
  require_numel(call, "sum_exp", sum_exp.numel(), r.rows);
  const float* pm = fp32_of(call, "row_max", row_max);
  float* ps = fp32_of(call, "sum_exp", sum_exp);
  const std::int64_t v = r.vocab, step = rows_per_block(v, r.rows);
  const Staging st(*this, call, {{"logits", logits.dtype(), step * v}});
  st.for_blocks_parallel(r.rows, step, detail::row_grain(v), [&](std::int64_t r0, std::int64_t nr) {
    sum_exp_rows(st.read(0, logits, r0 * v, nr * v), pm + r0, ps + r0, nr, v);
  });
}

void CpuBackend::cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                            TensorView target_logit, const CrossEntropyArgs& args) {
  constexpr std::string_view call = "cross_entropy_target_logit";
  const LogitRows r = logit_rows(call, logits.shape(), targets.numel(), args);
  require_numel(call, "target_logit", target_logit.numel(), r.rows);
  detail::require_storable(call, "logits", logits.dtype());
  float* pt = fp32_of(call, "target_logit", target_logit);
  for (std::int64_t i = 0; i < r.rows; ++i) {
    const std::int64_t col = targets.data[i] - args.vocab_offset;
    pt[i] = col >= 0 && col < r.vocab ? detail::load(logits, i * r.vocab + col) : 0.0f;
  }
}

void CpuBackend::cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                                    ConstTensorView target_logit, TensorView loss,
                                    TensorView logsumexp, const CrossEntropyArgs& args) {
  const std::int64_t rows = row_max.numel();
  require_numel("cross_entropy_loss", "sum_exp", sum_exp.numel(), rows);
  require_numel("cross_entropy_loss", "target_logit", target_logit.numel(), rows);
  require_numel("cross_entropy_loss", "logsumexp", logsumexp.numel(), rows);
  require_numel("cross_entropy_loss", "loss", loss.numel(), 1);
  constexpr std::string_view call = "cross_entropy_loss";
  const float* pm = fp32_of(call, "row_max", row_max);
  const float* ps = fp32_of(call, "sum_exp", sum_exp);
  const float* pt = fp32_of(call, "target_logit", target_logit);
  float* plse = fp32_of(call, "logsumexp", logsumexp);
  float* pl = fp32_of(call, "loss", loss);
  const std::int64_t count = args.token_count > 0 ? args.token_count : rows;
  double total = 0.0;  // a scalar over many rows: summed in double, rounded once
  for (std::int64_t i = 0; i < rows; ++i) {
    plse[i] = pm[i] + std::log(ps[i]);
    total += static_cast<double>(plse[i]) - static_cast<double>(pt[i]);
  }
  pl[0] = static_cast<float>(total / static_cast<double>(count));
}

void CpuBackend::cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                                       TensorView logsumexp, const CrossEntropyArgs& args) {
  const LogitRows r = logit_rows("cross_entropy_forward", logits.shape(), targets.numel(), args);
  CARTO_CHECK(args.vocab_offset == 0, "cross_entropy_forward takes whole rows (vocab_offset 0); ",
              "for vocab shards use the row_max / sum_exp / target_logit / loss pieces");
  for (std::int64_t i = 0; i < r.rows; ++i) {
    CARTO_CHECK(targets.data[i] >= 0 && targets.data[i] < r.vocab, "cross_entropy_forward: target ",
                targets.data[i], " at row ", i, " is outside the vocab [0, ", r.vocab, ")");
  }
  const TensorShape row_shape{{"rows", r.rows}};
  const Buffer work = allocate({{"rows", 3 * r.rows}}, DType::fp32, MemoryCategory::temporaries);
  const TensorView row_max{.data = work.data(), .shape = row_shape};
  const TensorView sum_exp{.data = static_cast<float*>(work.data()) + r.rows, .shape = row_shape};
  const TensorView target{.data = static_cast<float*>(work.data()) + 2 * r.rows,
                          .shape = row_shape};
  fp32_of("cross_entropy_forward", "loss", loss);
  fp32_of("cross_entropy_forward", "logsumexp", logsumexp);
  const std::int64_t v = r.vocab, step = rows_per_block(v, r.rows);
  const Staging st(*this, "cross_entropy_forward", {{"logits", logits.dtype(), step * v}});
  st.for_blocks_parallel(r.rows, step, detail::row_grain(v), [&](std::int64_t r0, std::int64_t nr) {
    max_and_sum_exp_rows(st.read(0, logits, r0 * v, nr * v), row_max.f32() + r0, sum_exp.f32() + r0,
                         nr, v);
  });
  cross_entropy_target_logit(logits, targets, target, args);
  cross_entropy_loss(row_max, sum_exp, target, loss, logsumexp, args);
}

void CpuBackend::cross_entropy_backward(ConstTensorView logits, IndexView targets,
                                        ConstTensorView logsumexp, ConstTensorView dloss,
                                        TensorView dlogits, const CrossEntropyArgs& args,
                                        CopyMode mode) {
  const LogitRows r = logit_rows("cross_entropy_backward", logits.shape(), targets.numel(), args);
  require_numel("cross_entropy_backward", "logsumexp", logsumexp.numel(), r.rows);
  require_numel("cross_entropy_backward", "dloss", dloss.numel(), 1);
  require_numel("cross_entropy_backward", "dlogits", dlogits.numel(), logits.numel());
  constexpr std::string_view call = "cross_entropy_backward";
  const float* plse = fp32_of(call, "logsumexp", logsumexp);
  detail::require_storable(call, "dloss", dloss.dtype());
  const float g = detail::load(dloss, 0) / static_cast<float>(r.count);
  const std::int64_t v = r.vocab, step = rows_per_block(v, r.rows);
  const Staging st(*this, call,
                   {{"logits", logits.dtype(), step * v}, {"dlogits", dlogits.dtype, step * v}});
  const bool acc = mode == CopyMode::accumulate;
  st.for_blocks_parallel(r.rows, step, detail::row_grain(v), [&](std::int64_t r0, std::int64_t nr) {
    const std::int64_t at = r0 * v, n = nr * v;
    cross_entropy_backward_rows(
        st.read(0, logits, at, n), plse + r0, targets.data + r0, args.vocab_offset, g,
        st.write(1, dlogits, at, n, acc ? Load::yes : Load::no), nr, v, acc);
    st.commit(1, dlogits, at, n);
  });
}

}  // namespace carto::cpu
