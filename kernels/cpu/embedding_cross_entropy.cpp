// The CPU backend's embedding lookup and softmax cross-entropy, whole and vocab-parallel.
//
// Vocab-parallel (Megatron-LM): a shard holds vocab rows [offset, offset + V_local). The lookup
// of a token outside them gives 0, so the sum over shards is the full lookup. Cross-entropy over
// split logits needs the global row max (all-reduce max), the global Σ exp(logit - max) (all-reduce
// sum) and the target's logit (all-reduce sum of the one shard's value and zeros); the loss and the
// gradient then follow from those reduced rows on every shard.
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_backend.hpp"
#include "kernel_checks.hpp"
#include "vector_math.hpp"

namespace carto::cpu {

using detail::exp_approx;
using detail::last_extent;
using detail::require_numel;

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
  const float* pt = table.f32();
  float* po = out.f32();
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    CARTO_CHECK(ids.data[n] >= 0, "embedding_forward: token id ", ids.data[n], " at ", n);
    const std::int64_t row = ids.data[n] - shard.vocab_offset;
    float* on = po + n * t.width;
    if (row >= 0 && row < t.rows) {
      std::copy(pt + row * t.width, pt + (row + 1) * t.width, on);
    } else {
      std::fill(on, on + t.width, 0.0f);
    }
  }
}

void CpuBackend::embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                                    const EmbeddingShard& shard) {
  const TableGeometry t = table_geometry("embedding_backward", dtable.shape, ids, dout.numel());
  const float* pd = dout.f32();
  float* pt = dtable.f32();
  for (std::int64_t n = 0; n < ids.numel(); ++n) {
    const std::int64_t row = ids.data[n] - shard.vocab_offset;
    if (row < 0 || row >= t.rows) continue;
    for (std::int64_t j = 0; j < t.width; ++j) pt[row * t.width + j] += pd[n * t.width + j];
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

// dlogits += g · (exp(logit - lse) - [column == target]), target the row's column in this shard
// or outside [0, vocab).
CARTO_VECTOR_CLONES void cross_entropy_backward_rows(const float* pl, const float* plse,
                                                     const std::int32_t* targets,
                                                     std::int64_t vocab_offset, float g, float* pd,
                                                     std::int64_t rows, std::int64_t vocab) {
  for (std::int64_t i = 0; i < rows; ++i) {
    const float* li = pl + i * vocab;
    float* di = pd + i * vocab;
    const float lse = plse[i];
    // Every column as if it were not the target, then the target's column (when it is in this
    // shard's vocab rows) redone from its old value with the -1.
    const std::int64_t target = targets[i] - vocab_offset;
    const bool local = target >= 0 && target < vocab;
    const float before = local ? di[target] : 0.0f;
#pragma omp simd
    for (std::int64_t j = 0; j < vocab; ++j) di[j] += g * exp_approx(li[j] - lse);
    if (local) di[target] = before + g * (exp_approx(li[target] - lse) - 1.0f);
  }
}

}  // namespace

void CpuBackend::cross_entropy_row_max(ConstTensorView logits, TensorView row_max) {
  const LogitRows r = logit_rows("cross_entropy_row_max", logits.shape(), row_max.numel(), {});
  row_max_rows(logits.f32(), row_max.f32(), r.rows, r.vocab);
}

void CpuBackend::cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                                       TensorView sum_exp) {
  const LogitRows r = logit_rows("cross_entropy_sum_exp", logits.shape(), row_max.numel(), {});
  require_numel("cross_entropy_sum_exp", "sum_exp", sum_exp.numel(), r.rows);
  sum_exp_rows(logits.f32(), row_max.f32(), sum_exp.f32(), r.rows, r.vocab);
}

void CpuBackend::cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                            TensorView target_logit, const CrossEntropyArgs& args) {
  const LogitRows r =
      logit_rows("cross_entropy_target_logit", logits.shape(), targets.numel(), args);
  require_numel("cross_entropy_target_logit", "target_logit", target_logit.numel(), r.rows);
  const float* pl = logits.f32();
  float* pt = target_logit.f32();
  for (std::int64_t i = 0; i < r.rows; ++i) {
    const std::int64_t col = targets.data[i] - args.vocab_offset;
    pt[i] = col >= 0 && col < r.vocab ? pl[i * r.vocab + col] : 0.0f;
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
  const float* pm = row_max.f32();
  const float* ps = sum_exp.f32();
  const float* pt = target_logit.f32();
  float* plse = logsumexp.f32();
  const std::int64_t count = args.token_count > 0 ? args.token_count : rows;
  double total = 0.0;  // a scalar over many rows: summed in double, rounded once
  for (std::int64_t i = 0; i < rows; ++i) {
    plse[i] = pm[i] + std::log(ps[i]);
    total += static_cast<double>(plse[i]) - static_cast<double>(pt[i]);
  }
  loss.f32()[0] = static_cast<float>(total / static_cast<double>(count));
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
  max_and_sum_exp_rows(logits.f32(), row_max.f32(), sum_exp.f32(), r.rows, r.vocab);
  cross_entropy_target_logit(logits, targets, target, args);
  cross_entropy_loss(row_max, sum_exp, target, loss, logsumexp, args);
}

void CpuBackend::cross_entropy_backward(ConstTensorView logits, IndexView targets,
                                        ConstTensorView logsumexp, ConstTensorView dloss,
                                        TensorView dlogits, const CrossEntropyArgs& args) {
  const LogitRows r = logit_rows("cross_entropy_backward", logits.shape(), targets.numel(), args);
  require_numel("cross_entropy_backward", "logsumexp", logsumexp.numel(), r.rows);
  require_numel("cross_entropy_backward", "dloss", dloss.numel(), 1);
  require_numel("cross_entropy_backward", "dlogits", dlogits.numel(), logits.numel());
  const float g = dloss.f32()[0] / static_cast<float>(r.count);
  cross_entropy_backward_rows(logits.f32(), logsumexp.f32(), targets.data, args.vocab_offset, g,
                              dlogits.f32(), r.rows, r.vocab);
}

}  // namespace carto::cpu
