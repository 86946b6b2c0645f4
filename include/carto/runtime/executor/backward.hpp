// carto/runtime/executor/backward.hpp — the backward pass: seeding, recomputation of checkpointed
// groups, each op's backward and the routing of its input gradients.
//
// Design note (DESIGN.md §7; executor.hpp lists the rules). backward() seeds d(step loss)/d(result)
// = 1/m for a scalar loss, or G/m for a non-scalar result (G the normal seed gradient), then runs
// the ops in reverse; reaching a checkpointed group, it first runs the group's forward again from
// its kept inputs (recompute), which saves what the group's backward reads. run_backward writes
// each input gradient in Strategy::gradients' spec (maybe Partial) into a zeroed buffer, re-reading
// its inputs through reread (inputs.hpp); route_gradient hands a parameter's gradient to
// accumulate_parameter_gradient (parameters.hpp) and moves an activation's gradient to the spec
// its producer needs (the stored spec without Partial), adding it into grad_. No gradient buffer
// is zero-filled and no gradient is copied where it can be shared or added in place:
//  - each kernel assigns its first contribution (backend.hpp's CopyMode); below ZeRO 2 a
//    parameter's gradient is written by the kernel straight into where it accumulates (Param::grad
//    for the direct uses, the use's accumulator otherwise), assigned on the use's first micro-batch
//    and added after, so it needs neither a temporary nor a copy;
//  - an identity gradient (an add's two inputs, a bias's input) is dY's own buffer, handed on
//    (hands_gradient_on): the residual stream's gradient is one buffer through a block's backward;
//  - an input whose gradient a later consumer already made, kept in the spec this op writes it in
//    and held by nothing else, is added into in place (accumulates_in_place); a shared one is
//    copied before it is added into (route_gradient);
//  - part views (Q, K, V of the fused QKV; gate, up) each write their own slot of the fused
//    gradient, which the first to run allocates unfilled (writes_part_slot; complete_parts zeroes
//    a slot no part wrote); in another spec a part adds into a zero-filled buffer
//    (adds_part_in_place);
//  - a silu_mul reads gate and up out of the fused projection a chunk at a time
//    (silu_mul_chunks).
// After an op's backward its saved tensors and its output's gradient are dropped. A gradient has
// its tensor's dtype (dtype_of: the compute dtype, a loss's fp32); the layernorm backward sums are
// fp32.
#pragma once

#include "carto/runtime/executor/forward.hpp"
#include "carto/runtime/executor/inputs.hpp"
#include "carto/runtime/executor/parameters.hpp"

namespace carto {

inline void Executor::backward() {
  const trace::OpScope trace_phase(-1, trace::Phase::backward);
  // Seed: d(step loss)/d(result) = 1/m (a scalar loss), or G/m (a non-scalar result).
  const TensorId r = g_.result();
  const ShardingSpec seed_spec = without_partial(stored_[r.index()]);
  const TensorShape local = local_of(r, seed_spec);
  auto seed = allocate(local, dtype_of(r), MemoryCategory::temporaries);
  const float inv_m = 1.0f / static_cast<float>(micro_count_);
  if (g_.tensor(r).shape.numel() == 1) {
    be_.fill(view_of(r, *seed, local), inv_m);
  } else {
    be_.fill_normal(view_of(r, *seed, local), inv_m, seed_stream(),
                    placement(g_.tensor(r).shape, seed_spec));
  }
  grad_[r.index()] = seed;
  act_[r.index()].reset();
  recomputed_.assign(g_.groups().size(), false);
  std::fill(parts_written_.begin(), parts_written_.end(), 0U);
  for (std::size_t k = g_.num_ops(); k-- > 0;) {
    const Op& op = g_.ops()[k];
    if (checkpointed(op.group) && !recomputed_[static_cast<std::size_t>(op.group)]) {
      recompute(op.group);
    }
    run_backward(k);
    saved_[k] = Saved{};
    grad_[op.output.index()].reset();
  }
  for (auto& a : act_) a.reset();
  for (auto& gr : grad_) gr.reset();
}

inline void Executor::recompute(std::int32_t group) {
  recomputed_[static_cast<std::size_t>(group)] = true;
  const OpGroup& grp = g_.groups()[static_cast<std::size_t>(group)];
  for (auto& [t, b] : ckpt_inputs_[static_cast<std::size_t>(group)]) act_[t.index()] = b;
  // Consumers inside the group only.
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
    for (TensorId t : g_.ops()[static_cast<std::size_t>(k)].inputs) remaining_[t.index()] = 0;
    remaining_[g_.ops()[static_cast<std::size_t>(k)].output.index()] = 0;
  }
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
    for (TensorId t : g_.ops()[static_cast<std::size_t>(k)].inputs) ++remaining_[t.index()];
  }
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k)
    run_forward(static_cast<std::size_t>(k), true);
  ckpt_inputs_[static_cast<std::size_t>(group)].clear();
  for (std::int32_t k = grp.first_op; k < grp.end_op; ++k) {
    for (TensorId t : g_.ops()[static_cast<std::size_t>(k)].inputs) act_[t.index()].reset();
  }
}

// Whether op k is a view of one part of its input (split_heads or split_groups of a fused
// projection) whose input gradient exists already, stored as this op's gradient spec (no Partial,
// no move): its backward then adds its part in place, where another part's backward allocated it.
inline bool Executor::adds_part_in_place(std::size_t k) const {
  const Op& op = g_.ops()[k];
  if (op.kind != OpKind::view ||
      (op.view != ViewKind::split_heads && op.view != ViewKind::split_groups))
    return false;
  const TensorId t = op.inputs[0];
  if (g_.tensor(t).shape.numel() == g_.tensor(op.output).shape.numel()) return false;
  const ShardingSpec& have = st_[k].gradients[0];
  return grad_[t.index()] != nullptr && !have.is_partial() &&
         have == without_partial(stored_[t.index()]);
}

// Whether op k is a part view whose fused input has only part views as consumers, each taking its
// gradient in the spec the fused gradient is kept in (no Partial, no move; Executor::layout): each
// part then writes its own slot of the fused gradient (assigned), which the first part to run
// allocated without a fill; complete_parts zeroes a slot that no part wrote before it is read.
inline bool Executor::writes_part_slot(std::size_t k) const {
  return part_bit_[k] != 0 && parts_all_[g_.ops()[k].inputs[0].index()] != 0;
}

// Zeroes the slots of t's gradient that no part view wrote (a part whose output reaches no loss,
// or before another contribution is added to the whole buffer); then every slot is valid.
inline void Executor::complete_parts(TensorId t) {
  const std::uint32_t missing = parts_all_[t.index()] & ~parts_written_[t.index()];
  parts_written_[t.index()] = parts_all_[t.index()];
  if (missing == 0 || grad_[t.index()] == nullptr) return;
  const TensorView dt = view_of(t, *grad_[t.index()], local_of(t, without_partial(stored_[t.index()])));
  for (std::size_t c = 0; c < g_.num_ops(); ++c) {
    const Op& op = g_.ops()[c];
    if ((part_bit_[c] & missing) == 0 || op.inputs[0] != t) continue;
    const TensorShape slot = local_of(op.output, without_partial(st_[c].sharding.output));
    Buffer zeros = buffer(slot, dtype_of(t), MemoryCategory::temporaries);
    be_.fill(zeros.view(slot, dtype_of(t)), 0.0f);
    view_copy(op, zeros.view(slot, dtype_of(t)), dt, CopyMode::assign, true);
  }
}

// Whether op k's backward hands its output gradient on as input i's gradient, with no copy: an
// identity gradient (add; bias's input) of the same local shape and dtype. The buffer is then
// shared until one of its holders is added into (route_gradient copies first).
inline bool Executor::hands_gradient_on(std::size_t k, std::size_t i) const {
  const Op& op = g_.ops()[k];
  if (op.kind != OpKind::add && !(op.kind == OpKind::bias && i == 0)) return false;
  const TensorId t = op.inputs[i];
  const TensorInfo& info = g_.tensor(t);
  if (info.kind != TensorKind::activation || !info.producer.valid()) return false;
  if (dtype_of(t) != dtype_of(op.output)) return false;
  const Strategy& s = st_[k];
  const TensorShape in = local_of(t, without_partial(s.gradients[i]));
  const TensorShape out = local_of(op.output, without_partial(s.sharding.output));
  if (in.rank() != out.rank()) return false;
  for (std::size_t d = 0; d < in.rank(); ++d) {
    if (in.dims()[d].extent != out.dims()[d].extent) return false;
  }
  return true;
}

// Whether op k's backward adds input i's gradient straight into the gradient a later consumer
// made: that buffer is held by nothing else, the op writes the gradient in the spec it is kept in
// (no Partial, no move), and the op's kernel can accumulate (fused attention and silu_mul write
// their input gradients whole; a part view has its own rule).
inline bool Executor::accumulates_in_place(std::size_t k, std::size_t i) const {
  const Op& op = g_.ops()[k];
  if (op.kind == OpKind::fused_attention || op.kind == OpKind::silu_mul || part_bit_[k] != 0)
    return false;
  const TensorId t = op.inputs[i];
  const TensorInfo& info = g_.tensor(t);
  if (info.kind != TensorKind::activation || !info.producer.valid()) return false;
  const std::shared_ptr<Buffer>& held = grad_[t.index()];
  const ShardingSpec& have = st_[k].gradients[i];
  return held != nullptr && held.use_count() == 1 && parts_written_[t.index()] == 0 &&
         !have.is_partial() && have == without_partial(stored_[t.index()]);
}

// Adds an input gradient (in the strategy's gradient spec) where it belongs. A gradient buffer
// may be shared (hands_gradient_on): one is added into only when nothing else holds it; else the
// sum goes into the one that is not shared, or into a new buffer.
inline void Executor::route_gradient(std::size_t k, std::size_t i, std::shared_ptr<Buffer> grad) {
  const Op& op = g_.ops()[k];
  const TensorId t = op.inputs[i];
  const TensorInfo& info = g_.tensor(t);
  const ShardingSpec& have = st_[k].gradients[i];
  if (info.kind == TensorKind::parameter) {
    accumulate_parameter_gradient(k, i, std::move(grad));
    return;
  }
  if (info.kind != TensorKind::activation || !info.producer.valid()) return;  // no gradient
  const ShardingSpec need = without_partial(stored_[t.index()]);
  const TensorShape need_local = local_of(t, need);
  std::shared_ptr<Buffer> moved = std::move(grad);
  if (!(have == need)) {
    moved = std::make_shared<Buffer>(move(info.shape,
                                          view_of(t, *moved, local_of(t, without_partial(have))),
                                          have, need, MemoryCategory::temporaries));
  }
  std::shared_ptr<Buffer>& sum = grad_[t.index()];
  // A fused gradient some parts wrote their slots of: the others' slots are zeroed first.
  if (sum != nullptr && parts_written_[t.index()] != 0) complete_parts(t);
  if (sum == nullptr) {
    sum = std::move(moved);
  } else if (sum.use_count() == 1) {
    be_.add_scaled(view_of(t, *moved, need_local), 1.0f, view_of(t, *sum, need_local));
  } else if (moved.use_count() == 1 && moved != sum) {
    be_.add_scaled(view_of(t, *sum, need_local), 1.0f, view_of(t, *moved, need_local));
    sum = std::move(moved);
  } else {
    auto own = allocate(need_local, dtype_of(t), MemoryCategory::temporaries);
    be_.add(view_of(t, *sum, need_local), view_of(t, *moved, need_local),
            view_of(t, *own, need_local));
    sum = std::move(own);
  }
}

inline void Executor::run_backward(std::size_t k) {
  const trace::OpScope trace_op(static_cast<std::int64_t>(k), trace::Phase::backward);
  const Op& op = g_.ops()[k];
  const Strategy& s = st_[k];
  const TensorId out = op.output;
  if (parts_all_[out.index()] != 0) complete_parts(out);
  std::shared_ptr<Buffer> dy_buf = grad_[out.index()];
  if (dy_buf == nullptr) return;  // the output does not reach the result
  const TensorShape out_local = local_of(out, without_partial(s.sharding.output));
  const ConstTensorView dY = view_of(out, *dy_buf, out_local);
  Saved& sv = saved_[k];

  std::array<std::shared_ptr<Buffer>, 3> dx{};
  std::array<TensorShape, 3> in_local{};
  std::array<TensorShape, 3> g_local{};
  // How each input's gradient is stored, and whether dx[i] is already where it accumulates (a
  // parameter's gradient below ZeRO 2), so it needs no routing.
  std::array<CopyMode, 3> mode{CopyMode::assign, CopyMode::assign, CopyMode::assign};
  std::array<bool, 3> in_place{};
  std::array<bool, 3> handed{};  // dx[i] is dY's own buffer (hands_gradient_on)
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    in_local[i] = local_of(op.inputs[i], without_partial(s.sharding.inputs[i]));
    g_local[i] = local_of(op.inputs[i], without_partial(s.gradients[i]));
    const TensorInfo& info = g_.tensor(op.inputs[i]);
    // Every non-index input gets a gradient buffer (graph inputs' are dropped by routing).
    if (info.kind == TensorKind::index) continue;
    if (info.kind == TensorKind::parameter && opt_.zero_stage < 2 &&
        op.kind != OpKind::fused_attention) {
      Param& p = param_of(op.inputs[i]);
      const auto use = std::find_if(p.uses.begin(), p.uses.end(),
                                    [&](const Use& u) { return u.op == k && u.input == i; });
      if (use->direct) {
        use->accumulator = std::shared_ptr<Buffer>(&p.grad, [](Buffer*) {});
        mode[i] = p.grad_written ? CopyMode::accumulate : CopyMode::assign;
        p.grad_written = true;
      } else {
        if (use->accumulator == nullptr)
          use->accumulator = allocate(g_local[i], compute_, MemoryCategory::gradients);
        mode[i] = use->accumulated ? CopyMode::accumulate : CopyMode::assign;
      }
      dx[i] = use->accumulator;
      use->accumulated = true;
      in_place[i] = true;
    } else if (writes_part_slot(k) && grad_[op.inputs[i].index()] != nullptr) {
      // A part view (Q, K or V of the fused QKV; gate or up) whose sibling allocated the fused
      // gradient: this part writes its own slot.
      dx[i] = grad_[op.inputs[i].index()];
      in_place[i] = true;
    } else if (adds_part_in_place(k) || accumulates_in_place(k, i)) {
      // The input already has a gradient in the spec this one is written in (a later consumer's,
      // or a sibling part's): add into it, as the schedule counts.
      dx[i] = grad_[op.inputs[i].index()];
      mode[i] = CopyMode::accumulate;
      in_place[i] = true;
    } else if (hands_gradient_on(k, i)) {
      dx[i] = dy_buf;
      handed[i] = true;
    } else {
      dx[i] = allocate(g_local[i], dtype_of(op.inputs[i]), MemoryCategory::temporaries);
    }
  }
  auto DX = [&](std::size_t i) { return view_of(op.inputs[i], *dx[i], g_local[i]); };
  // dx_i (=, +=) factor · dY in input i's mode.
  auto scaled_into = [&](std::size_t i, float factor) {
    if (mode[i] == CopyMode::assign) {
      be_.scale(dY, factor, DX(i));
    } else {
      be_.add_scaled(dY, factor, DX(i));
    }
  };
  std::array<std::shared_ptr<Buffer>, 3> x{};
  auto X = [&](std::size_t i) -> ConstTensorView {
    if (x[i] == nullptr) x[i] = reread(k, i);
    return view_of(op.inputs[i], *x[i], in_local[i]);
  };
  auto Ids = [&](std::size_t i) {
    if (x[i] == nullptr) x[i] = reread(k, i);
    return index_view(*x[i], in_local[i]);
  };

  switch (op.kind) {
    case OpKind::einsum: {
      const IndexLetters& la = op.einsum.inputs[0];
      const IndexLetters& lb = op.einsum.inputs[1];
      const IndexLetters& lc = op.einsum.output;
      if (dx[0]) local_einsum(lc, dY, lb, X(1), la, DX(0), mode[0] == CopyMode::accumulate);
      if (dx[1]) local_einsum(la, X(0), lc, dY, lb, DX(1), mode[1] == CopyMode::accumulate);
      break;
    }
    case OpKind::gelu: be_.gelu_backward(X(0), dY, DX(0), mode[0]); break;
    case OpKind::dropout:
      be_.dropout_backward(dY, DX(0),
                           {.probability = static_cast<float>(op.probability),
                            .rng = dropout_stream(k),
                            .placement = placement(g_.tensor(out).shape, s.sharding.output)},
                           mode[0]);
      break;
    case OpKind::scale: scaled_into(0, static_cast<float>(op.factor)); break;
    case OpKind::add:
      if (dx[0] && !handed[0]) scaled_into(0, 1.0f);
      if (dx[1] && !handed[1]) scaled_into(1, 1.0f);
      break;
    case OpKind::bias:
      if (dx[0] && !handed[0]) scaled_into(0, 1.0f);
      if (dx[1]) be_.bias_backward(dY, DX(1), mode[1]);
      break;
    case OpKind::softmax:
      be_.softmax_backward(view_of(out, *sv.output, out_local), dY, DX(0),
                           {.scale = 1.0f,
                            .masking = op.masking,
                            .placement = placement(g_.tensor(out).shape, s.sharding.output)},
                           mode[0]);
      break;
    case OpKind::layernorm: {
      const TensorShape rows = rows_shape(in_local[0]);
      auto tmp0 = dx[0] ? nullptr : allocate(in_local[0], compute_, MemoryCategory::temporaries);
      auto tmp1 = dx[1] ? nullptr : allocate(in_local[1], compute_, MemoryCategory::temporaries);
      auto tmp2 = dx[2] ? nullptr : allocate(in_local[2], compute_, MemoryCategory::temporaries);
      const NormGradModes modes{.dx = mode[0], .dgamma = mode[1], .dbeta = mode[2]};
      TensorView d0 = dx[0] ? DX(0) : tmp0->view(in_local[0], compute_);
      TensorView d1 = dx[1] ? DX(1) : tmp1->view(in_local[1], compute_);
      TensorView d2 = dx[2] ? DX(2) : tmp2->view(in_local[2], compute_);
      if (s.sharding.variant != OpVariant::distributed_statistics) {
        be_.layernorm_backward(dY, X(0), X(1), sv.state1.view(rows), sv.state2.view(rows), d0, d1,
                               d2, modes);
      } else {
        TensorShape sums_shape = rows;
        sums_shape.push_back({"stats", 2});
        Buffer sums = buffer(sums_shape, DType::fp32, MemoryCategory::temporaries);
        be_.layernorm_backward_partial_sums(dY, X(0), X(1), sv.state1.view(rows),
                                            sv.state2.view(rows), sums.view(sums_shape));
        all_reduce(sums.view(sums_shape), s.sharding.inputs[0].dims()[op.dim], ReduceOp::sum);
        be_.layernorm_backward_apply(
            dY, X(0), X(1), sv.state1.view(rows), sv.state2.view(rows), sums.view(sums_shape),
            g_.tensor(op.inputs[0]).shape.dims()[op.dim].extent, d0, d1, d2, modes);
      }
      break;
    }
    case OpKind::gather: {
      if (!dx[0]) break;
      const Slice table =
          device_slice(g_.tensor(op.inputs[0]).shape, s.sharding.inputs[0], mesh_, device_);
      be_.embedding_backward(dY, Ids(1), DX(0), {.vocab_offset = table.offset[0]}, mode[0]);
      break;
    }
    case OpKind::softmax_cross_entropy: {
      const TensorShape rows = rows_shape(in_local[0]);
      be_.cross_entropy_backward(view_of(op.inputs[0], *sv.extra, in_local[0]), Ids(1),
                                 sv.state1.view(rows), reshaped(dY, {{"loss", 1}}), DX(0),
                                 ce_args(k), mode[0]);
      break;
    }
    case OpKind::fused_attention: {
      const TensorShape lse = rows_shape(in_local[0]);  // (B, a, S) or (B, n, g, S)
      const AttentionArgs args = attention_args(k);
      if (!gathers_kv(k)) {
        be_.attention_backward(X(0), X(1), X(2), view_of(out, *sv.output, out_local),
                               sv.state1.view(lse), dY, DX(0), DX(1), DX(2), args,
                               CopyMode::assign);
        break;
      }
      const TensorShape fs{
          in_local[1].dims()[0],
          in_local[1].dims()[1],
          {in_local[1].dims()[2].name, g_.tensor(op.inputs[1]).shape.dims()[2].extent},
          in_local[1].dims()[3]};
      auto kf = gather_seq(k, X(1));
      auto vf = gather_seq(k, X(2));
      const DType dt = compute_;
      auto dkf = allocate(fs, dt, MemoryCategory::temporaries);
      auto dvf = allocate(fs, dt, MemoryCategory::temporaries);
      be_.attention_backward(X(0), kf->view(fs, dt), vf->view(fs, dt),
                             view_of(out, *sv.output, out_local), sv.state1.view(lse), dY, DX(0),
                             dkf->view(fs, dt), dvf->view(fs, dt), args, CopyMode::assign);
      // scatter_seq adds its reduce-scattered pieces into dk and dv.
      be_.fill(DX(1), 0.0f);
      be_.fill(DX(2), 0.0f);
      scatter_seq(k, dkf->view(fs, dt), DX(1));
      scatter_seq(k, dvf->view(fs, dt), DX(2));
      break;
    }
    case OpKind::view: {
      // A split_heads or split_groups of a part (Q, K, V out of the fused QKV; gate, up out of
      // the fused gate/up) writes one part of dx.
      const bool part = op.view == ViewKind::split_heads || op.view == ViewKind::split_groups;
      const bool whole =
          !part || g_.tensor(op.inputs[0]).shape.numel() == g_.tensor(out).shape.numel();
      if (whole || writes_part_slot(k)) {
        view_copy(op, dY, DX(0), mode[0], true);
        break;
      }
      if (mode[0] == CopyMode::assign) be_.fill(DX(0), 0.0f);
      view_copy(op, dY, DX(0), CopyMode::accumulate, true);
      break;
    }
    case OpKind::rmsnorm: {
      const TensorShape rows = rows_shape(in_local[0]);
      auto tmp0 = dx[0] ? nullptr : allocate(in_local[0], compute_, MemoryCategory::temporaries);
      auto tmp1 = dx[1] ? nullptr : allocate(in_local[1], compute_, MemoryCategory::temporaries);
      const NormGradModes modes{.dx = mode[0], .dgamma = mode[1]};
      TensorView d0 = dx[0] ? DX(0) : tmp0->view(in_local[0], compute_);
      TensorView d1 = dx[1] ? DX(1) : tmp1->view(in_local[1], compute_);
      if (s.sharding.variant != OpVariant::distributed_statistics) {
        be_.rmsnorm_backward(dY, X(0), X(1), sv.state1.view(rows), d0, d1, modes);
      } else {
        Buffer sums = buffer(rows, DType::fp32, MemoryCategory::temporaries);
        be_.rmsnorm_backward_partial_sums(dY, X(0), X(1), sv.state1.view(rows), sums.view(rows));
        all_reduce(sums.view(rows), s.sharding.inputs[0].dims()[op.dim], ReduceOp::sum);
        be_.rmsnorm_backward_apply(dY, X(0), X(1), sv.state1.view(rows), sums.view(rows),
                                   g_.tensor(op.inputs[0]).shape.dims()[op.dim].extent, d0, d1,
                                   modes);
      }
      break;
    }
    case OpKind::silu_mul: {
      // Gate and up are activations (views of the fused gate/up projection): both get fresh
      // gradient buffers, assigned.
      CARTO_CHECK(dx[0] && dx[1] && mode[0] == mode[1],
                  "silu_mul's gate and up gradients are written in one mode");
      if (!silu_mul_in_place(k)) {
        be_.silu_mul_backward(X(0), X(1), dY, DX(0), DX(1), mode[0]);
        break;
      }
      CARTO_CHECK(sv.inputs[0].buffer != nullptr, "silu_mul's gate/up projection was not saved");
      const DType dt = compute_;
      silu_mul_chunks(k, *sv.inputs[0].buffer,
                      [&](ConstTensorView gate, ConstTensorView up, std::int64_t offset,
                          const TensorShape& chunk) {
                        be_.silu_mul_backward(gate, up, offset_view(*dy_buf, offset, chunk, dt),
                                              offset_view(*dx[0], offset, chunk, dt),
                                              offset_view(*dx[1], offset, chunk, dt), mode[0]);
                      });
      break;
    }
    case OpKind::rotary: be_.rotary_backward(dY, DX(0), rotary_args(k), mode[0]); break;
  }
  x = {};
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (dx[i] && !in_place[i]) route_gradient(k, i, std::move(dx[i]));
  }
  // A part that wrote its slot marks it; one that wrote into a zero-filled whole buffer (another
  // spec) leaves every slot valid.
  if (part_bit_[k] != 0 && parts_all_[op.inputs[0].index()] != 0 && dy_buf != nullptr) {
    parts_written_[op.inputs[0].index()] |=
        writes_part_slot(k) ? part_bit_[k] : parts_all_[op.inputs[0].index()];
  }
}

}  // namespace carto
