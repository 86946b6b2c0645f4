// carto/runtime/executor/forward.hpp — the forward pass, and the distributed forms of layernorm,
// cross-entropy and attention.
//
// Design note (DESIGN.md §7; executor.hpp lists the rules). forward() runs the ops in graph order;
// remaining_ counts each tensor's forward consumers left and an activation is freed after its last
// one (the result and an evaluate target are kept). run_forward reads the inputs (inputs.hpp),
// saves those that profile/op_cost.hpp's saved_tensors names, by the regather rule, runs the local
// kernel on local shards and stores the output in its output spec — Partial over the axes that
// split a contracted einsum letter, resolved by the next reshard that needs it. In a checkpointed
// group the ops run with keep = false and save nothing; the group's external inputs are kept in
// ckpt_inputs_ for backward's recompute. Dropout draws from a stream keyed by (op, step·m +
// micro-batch), so the recompute draws the same masks.
// Distributed forms:
//  - layernorm and RMSNorm with distributed statistics (the normalized dim split): partial row
//    sums ((Σx, Σx²); Σx² for RMSNorm), all-reduced over the axes splitting that dim, then applied
//    locally (RmsNormArgs from ExecutorOptions::rmsnorm);
//  - rotary on a sequence shard: RotaryArgs::position_offset is the shard's first global position;
//  - vocab-parallel cross-entropy (Megatron-LM's scheme): the row max all-reduced (max), then the
//    row Σexp and the target logit all-reduced (sum);
//  - fused attention with the query sequence split (gathered_kv): K and V all-gathered along the
//    sequence (gather_seq); backward reduce-scatters dK and dV (scatter_seq). Grouped-query
//    attention (q (B, n, g, S, d), K and V (B, n, S, d)) runs the same way: its probabilities are
//    placed as (B, n, g, Sq, Sk).
// Dtypes: each output is stored in dtype_of (the compute dtype; a cross-entropy loss fp32); the
// statistics saved for backward (layernorm mean and rstd, RMSNorm rstd, logsumexp) and the partial
// sums and row pieces that are all-reduced (layernorm and RMSNorm sums, cross-entropy max, Σexp,
// target logit) are fp32.
#pragma once

#include "carto/runtime/executor/einsum.hpp"
#include "carto/runtime/executor/inputs.hpp"
#include "carto/runtime/executor/storage.hpp"
#include "carto/runtime/trace.hpp"

namespace carto {

inline void Executor::forward() {
  const trace::OpScope trace_phase(-1, trace::Phase::forward);
  for (std::size_t t = 0; t < remaining_.size(); ++t) remaining_[t] = consumers_[t];
  ckpt_inputs_.assign(g_.groups().size(), {});
  for (std::size_t k = 0; k < g_.num_ops(); ++k) {
    const Op& op = g_.ops()[k];
    const bool ckpt = checkpointed(op.group);
    if (ckpt) {  // keep the external inputs of the group for its recompute
      const OpGroup& grp = g_.groups()[static_cast<std::size_t>(op.group)];
      for (TensorId t : op.inputs) {
        const TensorInfo& info = g_.tensor(t);
        if (info.kind == TensorKind::activation && info.producer.valid() &&
            (info.producer.value < grp.first_op || info.producer.value >= grp.end_op)) {
          ckpt_inputs_[static_cast<std::size_t>(op.group)].push_back({t, act_[t.index()]});
        }
      }
    }
    run_forward(k, !ckpt);
  }
}

inline double Executor::result_value() {
  const trace::OpScope trace_phase(-1, trace::Phase::forward);  // reading the loss ends the forward
  const TensorId r = g_.result();
  const TensorInfo& info = g_.tensor(r);
  CARTO_CHECK(act_[r.index()] != nullptr, "the result tensor was freed");
  std::shared_ptr<Buffer> value = materialize(r, act_[r.index()]);
  std::vector<float> host = gather_to_host(
      info.shape, view_of(r, *value, local_of(r, stored_[r.index()])), stored_[r.index()]);
  if (info.shape.numel() == 1) return host[0];
  double sum = 0;
  const RngStream s = seed_stream();
  for (std::size_t i = 0; i < host.size(); ++i)
    sum += static_cast<double>(host[i]) * rng::normal(s, static_cast<std::int64_t>(i));
  return sum;
}

inline void Executor::release_after_use(TensorId t) {
  if (--remaining_[t.index()] <= 0 && !kept(t)) act_[t.index()].reset();
}

inline void Executor::run_forward(std::size_t k, bool keep) {
  const trace::OpScope trace_op(static_cast<std::int64_t>(k), trace::Phase::forward);
  const Op& op = g_.ops()[k];
  const Strategy& s = st_[k];
  Saved& sv = saved_[k];
  sv = Saved{};
  const auto saved_list = saved_tensors(g_, op);
  auto is_saved = [&](TensorId t) {
    return std::find(saved_list.begin(), saved_list.end(), t) != saved_list.end();
  };
  const TensorId out = op.output;
  const TensorShape out_global = g_.tensor(out).shape;
  const TensorShape out_local = local_of(out, s.sharding.output);

  if (op.kind == OpKind::view && lazy_[out.index()]) {  // alias the base storage
    act_[out.index()] = act_[op.inputs[0].index()];
    release_after_use(op.inputs[0]);
    if (remaining_[out.index()] <= 0 && !kept(out)) act_[out.index()].reset();
    return;
  }

  std::array<Read, 3> in{};
  std::array<TensorShape, 3> in_local{};
  const bool glu_in_place = silu_mul_in_place(k);
  for (std::size_t i = 0; i < op.inputs.size(); ++i) {
    if (glu_in_place) {  // gate and up stay in the fused projection; it is what is saved
      if (keep && is_saved(op.inputs[i])) sv.inputs[i] = {act_[op.inputs[i].index()], false};
      continue;
    }
    in[i] = read_input(k, i);
    in_local[i] = local_of(op.inputs[i], without_partial(s.sharding.inputs[i]));
    const TensorId t = op.inputs[i];
    if (keep && is_saved(t)) {
      const TensorInfo& info = g_.tensor(t);
      const bool regather = in[i].moved && info.producer.valid() &&
                            local_of(t, stored_[t.index()]).numel() < in_local[i].numel();
      if (!in[i].moved || regather) {
        sv.inputs[i] = {in[i].stored != nullptr ? in[i].stored : in[i].buffer, false};
      } else {
        sv.inputs[i] = {in[i].buffer, true};
      }
    }
  }
  auto X = [&](std::size_t i) {
    return ConstTensorView(view_of(op.inputs[i], *in[i].buffer, in_local[i]));
  };
  auto Ids = [&](std::size_t i) { return index_view(*in[i].buffer, in_local[i]); };

  auto y = allocate(out_local, dtype_of(out), MemoryCategory::activations);
  TensorView Y = view_of(out, *y, out_local);
  switch (op.kind) {
    case OpKind::einsum:
      local_einsum(op.einsum.inputs[0], X(0), op.einsum.inputs[1], X(1), op.einsum.output, Y,
                   false);
      break;
    case OpKind::gelu: be_.gelu_forward(X(0), Y); break;
    case OpKind::dropout:
      be_.dropout_forward(X(0), Y,
                          {.probability = inference_ ? 0.0f : static_cast<float>(op.probability),
                           .rng = dropout_stream(k),
                           .placement = placement(out_global, s.sharding.output)});
      break;
    case OpKind::scale: be_.scale(X(0), static_cast<float>(op.factor), Y); break;
    case OpKind::add: be_.add(X(0), X(1), Y); break;
    case OpKind::bias: be_.bias_forward(X(0), X(1), Y); break;
    case OpKind::softmax:
      be_.softmax_forward(X(0), Y,
                          {.scale = 1.0f,
                           .masking = op.masking,
                           .placement = placement(out_global, s.sharding.output)});
      break;
    case OpKind::layernorm: layernorm_forward(k, X(0), X(1), X(2), Y, sv); break;
    case OpKind::gather: {
      const Slice table =
          device_slice(g_.tensor(op.inputs[0]).shape, s.sharding.inputs[0], mesh_, device_);
      be_.embedding_forward(X(0), Ids(1), Y, {.vocab_offset = table.offset[0]});
      break;
    }
    case OpKind::softmax_cross_entropy:
      cross_entropy_forward(k, X(0), Ids(1), Y, sv);
      // The logits (compute dtype), in place of the fp32 softmax the model counts.
      sv.extra = in[0].buffer;
      break;
    case OpKind::fused_attention: attention_forward(k, X(0), X(1), X(2), Y, sv); break;
    case OpKind::view: view_copy(op, X(0), Y, CopyMode::assign, false); break;
    case OpKind::rmsnorm: rmsnorm_forward(k, X(0), X(1), Y, sv); break;
    case OpKind::silu_mul:
      if (!glu_in_place) {
        be_.silu_mul_forward(X(0), X(1), Y);
        break;
      }
      silu_mul_chunks(k, *act_[op.inputs[0].index()],
                      [&](ConstTensorView gate, ConstTensorView up, std::int64_t offset,
                          const TensorShape& chunk) {
                        be_.silu_mul_forward(gate, up,
                                             offset_view(*y, offset, chunk, dtype_of(out)));
                      });
      break;
    case OpKind::rotary: be_.rotary_forward(X(0), Y, rotary_args(k)); break;
  }
  act_[out.index()] = y;
  if (keep && is_saved(out)) sv.output = y;
  if (!keep) sv = Saved{};  // a checkpointed group keeps nothing; it recomputes
  for (TensorId t : op.inputs) {
    if (g_.tensor(t).kind == TensorKind::activation && g_.tensor(t).producer.valid())
      release_after_use(t);
  }
  if (remaining_[out.index()] <= 0 && !kept(out)) act_[out.index()].reset();
}

inline void Executor::layernorm_forward(std::size_t k, ConstTensorView x, ConstTensorView gamma,
                                        ConstTensorView beta, TensorView y, Saved& sv) {
  const Op& op = g_.ops()[k];
  const Strategy& s = st_[k];
  const TensorShape rows = rows_shape(x.shape());
  sv.state1 = buffer(rows, DType::fp32, MemoryCategory::activations);
  sv.state2 = buffer(rows, DType::fp32, MemoryCategory::activations);
  if (s.sharding.variant != OpVariant::distributed_statistics) {
    be_.layernorm_forward(x, gamma, beta, y, sv.state1.view(rows), sv.state2.view(rows),
                          opt_.layernorm);
    return;
  }
  const AxisList& axes = s.sharding.inputs[0].dims()[op.dim];
  TensorShape sums_shape = rows;
  sums_shape.push_back({"stats", 2});
  Buffer sums = buffer(sums_shape, DType::fp32, MemoryCategory::temporaries);
  be_.layernorm_partial_sums(x, sums.view(sums_shape));
  all_reduce(sums.view(sums_shape), axes, ReduceOp::sum);
  be_.layernorm_apply(x, sums.view(sums_shape), g_.tensor(op.inputs[0]).shape.dims()[op.dim].extent,
                      gamma, beta, y, sv.state1.view(rows), sv.state2.view(rows), opt_.layernorm);
}

inline void Executor::rmsnorm_forward(std::size_t k, ConstTensorView x, ConstTensorView gamma,
                                      TensorView y, Saved& sv) {
  const Op& op = g_.ops()[k];
  const Strategy& s = st_[k];
  const TensorShape rows = rows_shape(x.shape());
  sv.state1 = buffer(rows, DType::fp32, MemoryCategory::activations);
  if (s.sharding.variant != OpVariant::distributed_statistics) {
    be_.rmsnorm_forward(x, gamma, y, sv.state1.view(rows), opt_.rmsnorm);
    return;
  }
  Buffer sums = buffer(rows, DType::fp32, MemoryCategory::temporaries);
  be_.rmsnorm_partial_sums(x, sums.view(rows));
  all_reduce(sums.view(rows), s.sharding.inputs[0].dims()[op.dim], ReduceOp::sum);
  be_.rmsnorm_apply(x, sums.view(rows), g_.tensor(op.inputs[0]).shape.dims()[op.dim].extent, gamma,
                    y, sv.state1.view(rows), opt_.rmsnorm);
}

// Whether op k is a silu_mul whose gate and up are lazy views, read as stored, of one stored
// fused gate/up projection (split_heads parts of head size 1): it then reads them in place.
inline bool Executor::silu_mul_in_place(std::size_t k) const {
  const Op& op = g_.ops()[k];
  if (op.kind != OpKind::silu_mul) return false;
  TensorId base{};
  for (std::size_t i = 0; i < 2; ++i) {
    const TensorId t = op.inputs[i];
    if (!lazy_[t.index()] || !(st_[k].sharding.inputs[i] == stored_[t.index()])) return false;
    const Op& view = g_.op(g_.tensor(t).producer);
    if (view.view != ViewKind::split_heads || g_.tensor(t).shape.dims()[3].extent != 1 ||
        lazy_[view.inputs[0].index()])
      return false;
    if (i == 1 && !(view.inputs[0] == base)) return false;
    base = view.inputs[0];
  }
  return true;
}

// Calls body(gate, up, offset, chunk) on chunks of gate and up (B, F, S, 1) — one batch row and
// at most F/8 of the columns, copied out of the fused (B, S, 2F) projection `base` — with the
// element offset of the chunk in that layout, so the copies live a chunk at a time (the schedule
// counts gate and up as views of the projection, not as copies).
inline void Executor::silu_mul_chunks(std::size_t k, const Buffer& base, const ChunkBody& body) {
  const Op& op = g_.ops()[k];
  const TensorId b = g_.op(g_.tensor(op.inputs[0]).producer).inputs[0];
  const TensorShape gl = local_of(op.inputs[0], stored_[op.inputs[0].index()]);  // (B, F, S, 1)
  const TensorShape bl = local_of(b, stored_[b.index()]);                        // (B, S, W)
  const std::int64_t rows = gl.dims()[0].extent, f = gl.dims()[1].extent, s = gl.dims()[2].extent;
  const std::int64_t w = bl.dims()[2].extent, parts = w / f;
  const std::int64_t fc = std::max<std::int64_t>(1, (f + 7) / 8);
  const ConstTensorView whole = view_of(b, base, bl);
  const TensorShape most{{"chunk", fc * s}};
  Buffer gate = buffer(most, compute_, MemoryCategory::temporaries);
  Buffer up = buffer(most, compute_, MemoryCategory::temporaries);
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t f0 = 0; f0 < f; f0 += fc) {
      const std::int64_t n = std::min(fc, f - f0);
      const TensorShape chunk{
          {gl.dims()[0].name, 1}, {gl.dims()[1].name, n}, gl.dims()[2], gl.dims()[3]};
      const Index ext{1, n, s, 1};
      const StridedBox dense = box_of(chunk, {.offset = exec_detail::filled(4, 0), .extent = ext});
      for (std::size_t i = 0; i < 2; ++i) {
        const auto part = static_cast<std::int64_t>(g_.op(g_.tensor(op.inputs[i]).producer).dim);
        StridedBox from = heads_box(bl, parts, part, f);
        from.offset += r * s * w + f0 * parts;
        be_.copy_strided(whole, from, (i == 0 ? gate : up).view(chunk, compute_), dense, ext,
                         CopyMode::assign);
      }
      body(gate.view(chunk, compute_), up.view(chunk, compute_), (r * f + f0) * s, chunk);
    }
  }
}

// θ and the global position of the local shard's first row (the sequence is the second-to-last
// dim; the head dim is never split).
inline RotaryArgs Executor::rotary_args(std::size_t k) const {
  const Op& op = g_.ops()[k];
  const TensorShape& x = g_.tensor(op.inputs[0]).shape;
  const Slice s = device_slice(x, without_partial(st_[k].sharding.inputs[0]), mesh_, device_);
  return {.theta = op.factor, .position_offset = s.offset[x.rank() - 2]};
}

inline const AxisList& Executor::vocab_axes(std::size_t k) const {
  const ShardingSpec& logits = st_[k].sharding.inputs[0];
  return logits.dims()[logits.rank() - 1];
}

inline CrossEntropyArgs Executor::ce_args(std::size_t k) const {
  const Op& op = g_.ops()[k];
  const Slice s =
      device_slice(g_.tensor(op.inputs[0]).shape, st_[k].sharding.inputs[0], mesh_, device_);
  return {.vocab_offset = s.offset[s.offset.size() - 1],
          .token_count = g_.tensor(op.inputs[1]).shape.numel()};
}

inline void Executor::cross_entropy_forward(std::size_t k, ConstTensorView logits,
                                            IndexView targets, TensorView loss, Saved& sv) {
  const TensorShape rows = rows_shape(logits.shape());
  sv.state1 = buffer(rows, DType::fp32, MemoryCategory::activations);
  const CrossEntropyArgs args = ce_args(k);
  const TensorView one = reshaped(loss, {{"loss", 1}});
  const AxisList& axes = vocab_axes(k);
  if (axes.empty() || split_factor(axes, mesh_) == 1) {
    be_.cross_entropy_forward(logits, targets, one, sv.state1.view(rows), args);
    return;
  }
  Buffer mx = buffer(rows, DType::fp32, MemoryCategory::temporaries);
  Buffer se = buffer(rows, DType::fp32, MemoryCategory::temporaries);
  Buffer tl = buffer(rows, DType::fp32, MemoryCategory::temporaries);
  be_.cross_entropy_row_max(logits, mx.view(rows));
  all_reduce(mx.view(rows), axes, ReduceOp::max);
  be_.cross_entropy_sum_exp(logits, mx.view(rows), se.view(rows));
  be_.cross_entropy_target_logit(logits, targets, tl.view(rows), args);
  all_reduce(se.view(rows), axes, ReduceOp::sum);
  all_reduce(tl.view(rows), axes, ReduceOp::sum);
  be_.cross_entropy_loss(mx.view(rows), se.view(rows), tl.view(rows), one, sv.state1.view(rows),
                         args);
}

inline AttentionArgs Executor::attention_args(std::size_t k) const {
  const Op& op = g_.ops()[k];
  // q (B, a, S, d), or (B, n, g, S, d) grouped: the probabilities (q's dims but d, then Sk).
  const TensorShape& q = g_.tensor(op.inputs[0]).shape;
  const Slice s = device_slice(q, st_[k].sharding.inputs[0], mesh_, device_);
  ShardPlacement p;
  for (std::size_t d = 0; d + 1 < q.rank(); ++d) {
    p.global_extents.push_back(q.dims()[d].extent);
    p.offset.push_back(s.offset[d]);
  }
  p.global_extents.push_back(q.dims()[q.rank() - 2].extent);
  p.offset.push_back(0);
  return {.scale = static_cast<float>(op.factor),
          .masking = op.masking,
          .dropout = inference_ ? 0.0f : static_cast<float>(op.probability),
          .rng = dropout_stream(k),
          .placement = p};
}

// The axes splitting the query sequence under gathered_kv: K's (B, n, S, d) sequence axes, which
// are q's.
inline const AxisList& Executor::kv_seq_axes(std::size_t k) const {
  return st_[k].sharding.inputs[1].dims()[2];
}

inline bool Executor::gathers_kv(std::size_t k) const {
  return st_[k].sharding.variant == OpVariant::gathered_kv &&
         split_factor(kv_seq_axes(k), mesh_) > 1;
}

// K or V gathered along the sequence over the query's sequence axes.
inline std::shared_ptr<Buffer> Executor::gather_seq(std::size_t k, ConstTensorView local) {
  const AxisList& axes = kv_seq_axes(k);
  Communicator& c = comms_.axes(axes);
  const auto r = static_cast<std::int64_t>(c.size());
  const TensorShape& ls = local.shape();
  TensorShape full = ls;
  full = TensorShape{
      ls.dims()[0], ls.dims()[1], {ls.dims()[2].name, ls.dims()[2].extent * r}, ls.dims()[3]};
  const TensorShape all_shape{{"gathered", local.numel() * r}};
  auto all = allocate(all_shape, local.dtype(), MemoryCategory::temporaries);
  const TensorView gathered = all->view(all_shape, local.dtype());
  be_.synchronize();
  c.all_gather(bytes_of(local), bytes_of(gathered), local.dtype()).wait();
  auto out = allocate(full, local.dtype(), MemoryCategory::temporaries);
  const Index ext{ls.dims()[0].extent, ls.dims()[1].extent, ls.dims()[2].extent,
                  ls.dims()[3].extent};
  for (std::int64_t j = 0; j < r; ++j) {
    const StridedBox from = box_of(ls, {.offset = exec_detail::filled(4, 0), .extent = ext});
    StridedBox piece = from;
    piece.offset += j * local.numel();
    be_.copy_strided(gathered, piece, out->view(full, local.dtype()),
                     box_of(full, {.offset = {0, 0, j * ext[2], 0}, .extent = ext}), ext,
                     CopyMode::assign);
  }
  return out;
}

// d (local, += ) = reduce-scatter of the gathered gradient along the sequence.
inline void Executor::scatter_seq(std::size_t k, ConstTensorView gathered, TensorView local) {
  const AxisList& axes = kv_seq_axes(k);
  Communicator& c = comms_.axes(axes);
  const auto r = static_cast<std::int64_t>(c.size());
  const TensorShape& ls = local.shape;
  const Index ext{ls.dims()[0].extent, ls.dims()[1].extent, ls.dims()[2].extent,
                  ls.dims()[3].extent};
  const TensorShape send_shape{{"send", local.numel() * r}};
  auto send = allocate(send_shape, gathered.dtype(), MemoryCategory::temporaries);
  const TensorView sent = send->view(send_shape, gathered.dtype());
  for (std::int64_t j = 0; j < r; ++j) {
    StridedBox piece = box_of(ls, {.offset = exec_detail::filled(4, 0), .extent = ext});
    piece.offset += j * local.numel();
    be_.copy_strided(gathered,
                     box_of(gathered.shape(), {.offset = {0, 0, j * ext[2], 0}, .extent = ext}),
                     sent, piece, ext, CopyMode::assign);
  }
  auto recv = allocate(ls, gathered.dtype(), MemoryCategory::temporaries);
  const TensorView received = recv->view(ls, gathered.dtype());
  be_.synchronize();
  c.reduce_scatter(bytes_of(ConstTensorView(sent)), bytes_of(received), gathered.dtype(),
                   ReduceOp::sum)
      .wait();
  be_.add_scaled(received, 1.0f, local);
}

inline void Executor::attention_forward(std::size_t k, ConstTensorView q, ConstTensorView kk,
                                        ConstTensorView v, TensorView out, Saved& sv) {
  const TensorShape lse = rows_shape(q.shape());  // (B, a, S) or (B, n, g, S)
  sv.state1 = buffer(lse, DType::fp32, MemoryCategory::activations);
  if (!gathers_kv(k)) {
    be_.attention_forward(q, kk, v, out, sv.state1.view(lse), attention_args(k));
    return;
  }
  auto kf = gather_seq(k, kk);
  auto vf = gather_seq(k, v);
  const TensorShape fs{
      kk.shape().dims()[0],
      kk.shape().dims()[1],
      {kk.shape().dims()[2].name, g_.tensor(g_.ops()[k].inputs[1]).shape.dims()[2].extent},
      kk.shape().dims()[3]};
  be_.attention_forward(q, kf->view(fs, kk.dtype()), vf->view(fs, v.dtype()), out,
                        sv.state1.view(lse), attention_args(k));
}

}  // namespace carto
