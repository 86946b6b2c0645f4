// carto/runtime/tracing_backend.hpp — a Backend that times every kernel of the Backend it wraps
// into a trace::Recorder (carto/runtime/trace.hpp).
//
// Design note: a decorator; every call is forwarded unchanged to the wrapped backend, then that
// backend is synchronized, and one trace::Event is recorded with the kernel's name, the bytes of
// its operands (inputs read plus outputs written, each view once) and, for GEMMs and fused
// attention, its FLOPs (2 per multiply-add; attention 4·B·a·Sq·Sk·d forward and 10·B·a·Sq·Sk·d
// backward, as op_cost.hpp counts them). Allocation goes to the wrapped backend's allocator; the
// Trainer installs its memory tracker on both. Kernels the wrapped backend runs internally (its
// bf16 staging, workspace) are part of the call that issued them.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "carto/runtime/backend.hpp"
#include "carto/runtime/trace.hpp"

namespace carto {

class TracingBackend final : public Backend {
 public:
  TracingBackend(Backend& inner, trace::Recorder& recorder) : inner_(inner), rec_(&recorder) {}

  [[nodiscard]] Backend& inner() const { return inner_; }
  [[nodiscard]] std::string_view name() const override { return inner_.name(); }
  Allocator& device_allocator() override { return inner_.device_allocator(); }
  void synchronize() override { inner_.synchronize(); }
  void copy_from_host(const void* host, TensorView dst) override {
    run("copy_from_host", dst.bytes(), 0, [&] { inner_.copy_from_host(host, dst); });
  }
  void copy_to_host(ConstTensorView src, void* host) override {
    run("copy_to_host", src.bytes(), 0, [&] { inner_.copy_to_host(src, host); });
  }

  void fill(TensorView x, float value) override {
    run("fill", x.bytes(), 0, [&] { inner_.fill(x, value); });
  }
  void fill_normal(TensorView x, float stddev, RngStream rng,
                   const ShardPlacement& placement) override {
    run("fill_normal", x.bytes(), 0, [&] { inner_.fill_normal(x, stddev, rng, placement); });
  }
  void copy_strided(ConstTensorView src, const StridedBox& from, TensorView dst,
                    const StridedBox& to, const Index& extents, CopyMode mode) override {
    std::int64_t n = 1;
    for (const std::int64_t e : extents) n *= e;
    const std::int64_t bytes =
        n * (size_bytes(src.dtype()) + size_bytes(dst.dtype) * (mode == CopyMode::assign ? 1 : 2));
    run("copy_strided", bytes, 0, [&] { inner_.copy_strided(src, from, dst, to, extents, mode); });
  }

  void gemm(ConstTensorView a, ConstTensorView b, TensorView c, const GemmArgs& args) override {
    const auto& ad = a.shape().dims();
    const std::int64_t k =
        ad.empty() ? 0 : (args.a == Transpose::no ? ad[ad.size() - 1] : ad[ad.size() - 2]).extent;
    const std::int64_t cb = c.bytes() * (args.beta == 0.0f ? 1 : 2);
    run("gemm", a.bytes() + b.bytes() + cb, 2 * c.numel() * k, [&] { inner_.gemm(a, b, c, args); });
  }

  void layernorm_forward(ConstTensorView x, ConstTensorView gamma, ConstTensorView beta,
                         TensorView y, TensorView mean, TensorView rstd,
                         const LayerNormArgs& args) override {
    run("layernorm_forward", sum(x, gamma, beta, y, mean, rstd), 0,
        [&] { inner_.layernorm_forward(x, gamma, beta, y, mean, rstd, args); });
  }
  void layernorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                          ConstTensorView mean, ConstTensorView rstd, TensorView dx,
                          TensorView dgamma, TensorView dbeta,
                          const NormGradModes& modes) override {
    run("layernorm_backward", sum(dy, x, gamma, mean, rstd, dx, dgamma, dbeta) + dx.bytes(), 0,
        [&] { inner_.layernorm_backward(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, modes); });
  }
  void layernorm_partial_sums(ConstTensorView x, TensorView sums) override {
    run("layernorm_partial_sums", sum(x, sums), 0, [&] { inner_.layernorm_partial_sums(x, sums); });
  }
  void layernorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                       ConstTensorView gamma, ConstTensorView beta, TensorView y, TensorView mean,
                       TensorView rstd, const LayerNormArgs& args) override {
    run("layernorm_apply", sum(x, sums, gamma, beta, y, mean, rstd), 0,
        [&] { inner_.layernorm_apply(x, sums, global_columns, gamma, beta, y, mean, rstd, args); });
  }
  void layernorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                       ConstTensorView mean, ConstTensorView rstd,
                                       TensorView sums) override {
    run("layernorm_backward_partial_sums", sum(dy, x, gamma, mean, rstd, sums), 0,
        [&] { inner_.layernorm_backward_partial_sums(dy, x, gamma, mean, rstd, sums); });
  }
  void layernorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                ConstTensorView mean, ConstTensorView rstd, ConstTensorView sums,
                                std::int64_t global_columns, TensorView dx, TensorView dgamma,
                                TensorView dbeta, const NormGradModes& modes) override {
    run("layernorm_backward_apply", sum(dy, x, gamma, mean, rstd, sums, dx, dgamma, dbeta), 0, [&] {
      inner_.layernorm_backward_apply(dy, x, gamma, mean, rstd, sums, global_columns, dx, dgamma,
                                      dbeta, modes);
    });
  }

  void rmsnorm_forward(ConstTensorView x, ConstTensorView gamma, TensorView y, TensorView rstd,
                       const RmsNormArgs& args) override {
    run("rmsnorm_forward", sum(x, gamma, y, rstd), 0,
        [&] { inner_.rmsnorm_forward(x, gamma, y, rstd, args); });
  }
  void rmsnorm_backward(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                        ConstTensorView rstd, TensorView dx, TensorView dgamma,
                        const NormGradModes& modes) override {
    run("rmsnorm_backward", sum(dy, x, gamma, rstd, dx, dgamma) + dx.bytes(), 0,
        [&] { inner_.rmsnorm_backward(dy, x, gamma, rstd, dx, dgamma, modes); });
  }
  void rmsnorm_partial_sums(ConstTensorView x, TensorView sums) override {
    run("rmsnorm_partial_sums", sum(x, sums), 0, [&] { inner_.rmsnorm_partial_sums(x, sums); });
  }
  void rmsnorm_apply(ConstTensorView x, ConstTensorView sums, std::int64_t global_columns,
                     ConstTensorView gamma, TensorView y, TensorView rstd,
                     const RmsNormArgs& args) override {
    run("rmsnorm_apply", sum(x, sums, gamma, y, rstd), 0,
        [&] { inner_.rmsnorm_apply(x, sums, global_columns, gamma, y, rstd, args); });
  }
  void rmsnorm_backward_partial_sums(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                                     ConstTensorView rstd, TensorView sums) override {
    run("rmsnorm_backward_partial_sums", sum(dy, x, gamma, rstd, sums), 0,
        [&] { inner_.rmsnorm_backward_partial_sums(dy, x, gamma, rstd, sums); });
  }
  void rmsnorm_backward_apply(ConstTensorView dy, ConstTensorView x, ConstTensorView gamma,
                              ConstTensorView rstd, ConstTensorView sums,
                              std::int64_t global_columns, TensorView dx, TensorView dgamma,
                              const NormGradModes& modes) override {
    run("rmsnorm_backward_apply", sum(dy, x, gamma, rstd, sums, dx, dgamma), 0, [&] {
      inner_.rmsnorm_backward_apply(dy, x, gamma, rstd, sums, global_columns, dx, dgamma, modes);
    });
  }

  void softmax_forward(ConstTensorView x, TensorView y, const SoftmaxArgs& args) override {
    run("softmax_forward", sum(x, y), 0, [&] { inner_.softmax_forward(x, y, args); });
  }
  void softmax_backward(ConstTensorView y, ConstTensorView dy, TensorView dx,
                        const SoftmaxArgs& args, CopyMode mode) override {
    run("softmax_backward", sum(y, dy, dx) + extra(dx, mode), 0,
        [&] { inner_.softmax_backward(y, dy, dx, args, mode); });
  }

  void attention_forward(ConstTensorView q, ConstTensorView k, ConstTensorView v, TensorView out,
                         TensorView logsumexp, const AttentionArgs& args) override {
    run("attention_forward", sum(q, k, v, out, logsumexp), 4 * q.numel() * keys(k),
        [&] { inner_.attention_forward(q, k, v, out, logsumexp, args); });
  }
  void attention_backward(ConstTensorView q, ConstTensorView k, ConstTensorView v,
                          ConstTensorView out, ConstTensorView logsumexp, ConstTensorView dout,
                          TensorView dq, TensorView dk, TensorView dv, const AttentionArgs& args,
                          CopyMode mode) override {
    run("attention_backward", sum(q, k, v, out, logsumexp, dout, dq, dk, dv),
        10 * q.numel() * keys(k),
        [&] { inner_.attention_backward(q, k, v, out, logsumexp, dout, dq, dk, dv, args, mode); });
  }

  void gelu_forward(ConstTensorView x, TensorView y) override {
    run("gelu_forward", sum(x, y), 0, [&] { inner_.gelu_forward(x, y); });
  }
  void gelu_backward(ConstTensorView x, ConstTensorView dy, TensorView dx, CopyMode mode) override {
    run("gelu_backward", sum(x, dy, dx) + extra(dx, mode), 0,
        [&] { inner_.gelu_backward(x, dy, dx, mode); });
  }
  void dropout_forward(ConstTensorView x, TensorView y, const DropoutArgs& args) override {
    run("dropout_forward", sum(x, y), 0, [&] { inner_.dropout_forward(x, y, args); });
  }
  void dropout_backward(ConstTensorView dy, TensorView dx, const DropoutArgs& args,
                        CopyMode mode) override {
    run("dropout_backward", sum(dy, dx) + extra(dx, mode), 0,
        [&] { inner_.dropout_backward(dy, dx, args, mode); });
  }
  void add(ConstTensorView a, ConstTensorView b, TensorView y) override {
    run("add", sum(a, b, y), 0, [&] { inner_.add(a, b, y); });
  }
  void scale(ConstTensorView x, float factor, TensorView y) override {
    run("scale", sum(x, y), 0, [&] { inner_.scale(x, factor, y); });
  }
  void add_scaled(ConstTensorView x, float factor, TensorView y) override {
    run("add_scaled", sum(x, y) + y.bytes(), 0, [&] { inner_.add_scaled(x, factor, y); });
  }
  void bias_forward(ConstTensorView x, ConstTensorView b, TensorView y) override {
    run("bias_forward", sum(x, b, y), 0, [&] { inner_.bias_forward(x, b, y); });
  }
  void silu_mul_forward(ConstTensorView gate, ConstTensorView up, TensorView y) override {
    run("silu_mul_forward", sum(gate, up, y), 0, [&] { inner_.silu_mul_forward(gate, up, y); });
  }
  void silu_mul_backward(ConstTensorView gate, ConstTensorView up, ConstTensorView dy,
                         TensorView dgate, TensorView dup, CopyMode mode) override {
    run("silu_mul_backward", sum(gate, up, dy, dgate, dup) + extra(dgate, mode) + extra(dup, mode),
        0, [&] { inner_.silu_mul_backward(gate, up, dy, dgate, dup, mode); });
  }
  void rotary_forward(ConstTensorView x, TensorView y, const RotaryArgs& args) override {
    run("rotary_forward", sum(x, y), 0, [&] { inner_.rotary_forward(x, y, args); });
  }
  void rotary_backward(ConstTensorView dy, TensorView dx, const RotaryArgs& args,
                       CopyMode mode) override {
    run("rotary_backward", sum(dy, dx) + extra(dx, mode), 0,
        [&] { inner_.rotary_backward(dy, dx, args, mode); });
  }
  void bias_backward(ConstTensorView dy, TensorView db, CopyMode mode) override {
    run("bias_backward", sum(dy, db) + extra(db, mode), 0,
        [&] { inner_.bias_backward(dy, db, mode); });
  }

  void embedding_forward(ConstTensorView table, IndexView ids, TensorView out,
                         const EmbeddingShard& shard) override {
    run("embedding_forward", 2 * out.bytes() + ids.numel() * 4, 0,
        [&] { inner_.embedding_forward(table, ids, out, shard); });
  }
  void embedding_backward(ConstTensorView dout, IndexView ids, TensorView dtable,
                          const EmbeddingShard& shard, CopyMode mode) override {
    run("embedding_backward", 3 * dout.bytes() + ids.numel() * 4, 0,
        [&] { inner_.embedding_backward(dout, ids, dtable, shard, mode); });
  }

  void cross_entropy_forward(ConstTensorView logits, IndexView targets, TensorView loss,
                             TensorView logsumexp, const CrossEntropyArgs& args) override {
    run("cross_entropy_forward", sum(logits, loss, logsumexp) + targets.numel() * 4, 0,
        [&] { inner_.cross_entropy_forward(logits, targets, loss, logsumexp, args); });
  }
  void cross_entropy_row_max(ConstTensorView logits, TensorView row_max) override {
    run("cross_entropy_row_max", sum(logits, row_max), 0,
        [&] { inner_.cross_entropy_row_max(logits, row_max); });
  }
  void cross_entropy_sum_exp(ConstTensorView logits, ConstTensorView row_max,
                             TensorView sum_exp) override {
    run("cross_entropy_sum_exp", sum(logits, row_max, sum_exp), 0,
        [&] { inner_.cross_entropy_sum_exp(logits, row_max, sum_exp); });
  }
  void cross_entropy_target_logit(ConstTensorView logits, IndexView targets,
                                  TensorView target_logit, const CrossEntropyArgs& args) override {
    run("cross_entropy_target_logit", sum(target_logit) + targets.numel() * 8, 0,
        [&] { inner_.cross_entropy_target_logit(logits, targets, target_logit, args); });
  }
  void cross_entropy_loss(ConstTensorView row_max, ConstTensorView sum_exp,
                          ConstTensorView target_logit, TensorView loss, TensorView logsumexp,
                          const CrossEntropyArgs& args) override {
    run("cross_entropy_loss", sum(row_max, sum_exp, target_logit, loss, logsumexp), 0,
        [&] { inner_.cross_entropy_loss(row_max, sum_exp, target_logit, loss, logsumexp, args); });
  }
  void cross_entropy_backward(ConstTensorView logits, IndexView targets, ConstTensorView logsumexp,
                              ConstTensorView dloss, TensorView dlogits,
                              const CrossEntropyArgs& args, CopyMode mode) override {
    run("cross_entropy_backward", sum(logits, logsumexp, dlogits) + extra(dlogits, mode), 0, [&] {
      inner_.cross_entropy_backward(logits, targets, logsumexp, dloss, dlogits, args, mode);
    });
  }

  void adamw_update(TensorView param, ConstTensorView grad, TensorView m, TensorView v,
                    const AdamWArgs& args) override {
    run("adamw_update", sum(param, grad, m, v) + sum(param, m, v), 0,
        [&] { inner_.adamw_update(param, grad, m, v, args); });
  }
  void adamw_update_all(std::span<const AdamWShard> shards, const AdamWArgs& args) override {
    std::int64_t bytes = 0;
    for (const AdamWShard& sh : shards)
      bytes += sum(sh.param, sh.grad, sh.m, sh.v) + sum(sh.param, sh.m, sh.v);
    run("adamw_update_all", bytes, 0, [&] { inner_.adamw_update_all(shards, args); });
  }

 private:
  template <class... Views>
  static std::int64_t sum(const Views&... views) {
    return (std::int64_t{0} + ... + ConstTensorView(views).bytes());
  }
  // An accumulated output is read as well as written.
  static std::int64_t extra(const TensorView& out, CopyMode mode) {
    return mode == CopyMode::accumulate ? out.bytes() : 0;
  }
  // The key length of attention's k (B, a, Sk, d) or (B, n, Sk, d).
  static std::int64_t keys(ConstTensorView k) {
    const auto& d = k.shape().dims();
    return d.size() >= 2 ? d[d.size() - 2].extent : 0;
  }
  template <class F>
  void run(std::string_view kernel, std::int64_t bytes, std::int64_t flops, F&& call) {
    trace::timed(rec_, trace::Kind::kernel, kernel, bytes, flops, {}, [&] {
      call();
      inner_.synchronize();
    });
  }

  Backend& inner_;
  trace::Recorder* rec_;
};

}  // namespace carto
