// carto/runtime/executor/parameters.hpp — parameters and their optimizer state under ZeRO 0-3:
// initialisation, chunks and gathers, gradient accumulation and reduction, AdamW.
//
// Design note (DESIGN.md §7; executor.hpp lists the rules). A parameter is stored in its first
// consumer's input spec (Param::spec; local shape Param::local, n elements) and is replicated over
// the mesh axes that spec leaves unused: its replica group of r devices (Param::comm). ZeRO splits
// the flat local tensor into r contiguous chunks of ⌈n/r⌉ elements, the last one padded; a rank
// owns chunk group_rank.
//  - Stage 1: the AdamW moments m, v are chunks; after its update the parameter is all-gathered.
//  - Stage 2: the gradient is a chunk too; each backward reduces it at once and keeps this rank's
//    chunk (accumulate_parameter_gradient), as DeepSpeed does.
//  - Stage 3: the value is a chunk as well, all-gathered before each use (parameter_local).
// Below stage 2 each use accumulates its gradient over the micro-batches in its Partial local
// form: the direct uses (gradient spec = stored spec, with the Partial axes of the first such
// use) into Param::grad, the others into their own accumulator; finish_gradients reduces them once
// per step and moves them to the stored spec. Nothing is zero-filled per step: the first
// contribution of a step to a buffer assigns (Param::grad_written, Use::accumulated false, reset
// by begin_step), later ones add; at stage 2-3 the first use to
// reach the gradient chunk in a step assigns it. Initial values: GPT-2's normal from an rng stream
// keyed by the tensor id and the global element index (layernorm gamma 1, beta and biases 0), so
// every plan starts alike. Dtypes: the value (what kernels read) and the gradient are in the
// compute dtype, m and v fp32. Under mixed_bf16 each parameter also has an fp32 master
// (Param::master, optimizer category, sharded like m and v: local at ZeRO 0, this rank's chunk at
// 1-3) holding the fp32 initial value; the compute copy is its bf16 rounding (Backend::convert).
// AdamW updates the master from the bf16 gradient and converts the result into the compute copy: at
// ZeRO 0 the whole local tensor; at 1-2 this rank's chunk, converted, then all-gathered in bf16
// into the compute copy; at 3 the chunk, which is what the gathers before each use read. Gradients
// are reduced in ExecutorOptions::gradient_reduction (reduce_gradient, storage.hpp).
#pragma once

#include "carto/runtime/executor/storage.hpp"

namespace carto {

inline void Executor::init_parameters() {
  for (std::size_t t = 0; t < g_.tensors().size(); ++t) {
    const TensorInfo& info = g_.tensors()[t];
    if (info.kind != TensorKind::parameter) continue;
    Param p;
    p.id = TensorId{static_cast<std::int32_t>(t)};
    p.global = info.shape;
    p.spec = stored_[t];
    p.local = local_shape(p.global, p.spec, mesh_);
    for (std::size_t a = 0; a < mesh_.num_axes(); ++a) {
      const AxisName& name = mesh_.axis(a).name;
      if (!p.spec.uses(name) && mesh_.axis(a).size > 1) p.replica_axes.push_back(name);
    }
    p.replicas = replication_factor(p.spec, mesh_);
    const std::int64_t n = p.local.numel();
    p.chunk = (n + p.replicas - 1) / p.replicas;
    if (p.replicas > 1) {
      p.comm = &comms_.axes(p.replica_axes);
      p.group_rank = p.comm->rank();
    }
    // Value: GPT-2's initialisation (fp32), by the op that reads it. Under fp32 at ZeRO 0-2 that
    // buffer is the value itself; otherwise it is a temporary the value (and the master) come from.
    const bool mixed = opt_.precision == Precision::mixed_bf16;
    const bool keep_init = !mixed && opt_.zero_stage < 3;
    Buffer full = buffer(p.local, DType::fp32,
                         keep_init ? MemoryCategory::parameters : MemoryCategory::temporaries);
    const TensorView init = full.view(p.local, DType::fp32);
    init_value(p, init);
    const TensorShape chunk{{"chunk", p.chunk}};
    if (mixed) {
      if (opt_.zero_stage == 0) {
        p.master = buffer(p.local, DType::fp32, MemoryCategory::optimizer);
        be_.convert(init, p.master.view(p.local, DType::fp32));
      } else {
        p.master = buffer(chunk, DType::fp32, MemoryCategory::optimizer);
        copy_chunk(init, p, p.master.view(chunk, DType::fp32));
      }
    }
    if (keep_init) {
      p.value = std::move(full);
    } else if (opt_.zero_stage == 3) {
      p.value = buffer(chunk, compute_, MemoryCategory::parameters);
      copy_chunk(init, p, p.value.view(chunk, compute_));  // rounds to the compute dtype
    } else {
      p.value = buffer(p.local, compute_, MemoryCategory::parameters);
      be_.convert(init, p.value.view(p.local, compute_));
    }
    const TensorShape& state = opt_.zero_stage >= 1 ? chunk : p.local;
    p.m = buffer(state, DType::fp32, MemoryCategory::optimizer);
    p.v = buffer(state, DType::fp32, MemoryCategory::optimizer);
    be_.fill(p.m.view(state, DType::fp32), 0.0f);
    be_.fill(p.v.view(state, DType::fp32), 0.0f);
    const TensorShape& grad = opt_.zero_stage >= 2 ? chunk : p.local;
    p.grad = buffer(grad, compute_, MemoryCategory::gradients);
    be_.fill(p.grad.view(grad, compute_), 0.0f);
    // Uses.
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      const Op& op = g_.ops()[k];
      for (std::size_t i = 0; i < op.inputs.size(); ++i) {
        if (op.inputs[i].index() != t) continue;
        Use u{.op = k,
              .input = i,
              .want = st_[k].sharding.inputs[i],
              .grad_spec = st_[k].gradients[i]};
        const auto first_direct = std::find_if(p.uses.begin(), p.uses.end(),
                                               [](const Use& v) { return v.direct; });
        u.direct = without_partial(u.grad_spec) == p.spec &&
                   (first_direct == p.uses.end() || first_direct->grad_spec == u.grad_spec);
        p.uses.push_back(std::move(u));
      }
    }
    param_index_[t] = params_.size();
    params_.push_back(std::move(p));
  }
  be_.synchronize();
}

inline void Executor::init_value(const Param& p, TensorView value) {
  // The first consumer decides: layernorm and rmsnorm gamma 1, beta 0; a bias 0; otherwise normal.
  float constant = -1;
  for (const Op& op : g_.ops()) {
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      if (op.inputs[i] != p.id) continue;
      if (op.kind == OpKind::layernorm) constant = i == 1 ? 1.0f : 0.0f;
      if (op.kind == OpKind::rmsnorm) constant = 1.0f;
      if (op.kind == OpKind::bias) constant = 0.0f;
      goto decided;
    }
  }
decided:
  if (constant >= 0) {
    be_.fill(value, constant);
  } else {
    be_.fill_normal(
        value, opt_.init_stddev,
        {.seed = opt_.seed,
         .id = stream_id(RngPurpose::parameter_init, static_cast<std::uint32_t>(p.id.value), 0)},
        placement(p.global, p.spec));
  }
}

// The flat chunk of this rank (ZeRO) of a full local tensor.
inline void Executor::copy_chunk(ConstTensorView full, const Param& p, TensorView chunk) {
  const std::int64_t n = full.numel();
  const std::int64_t begin = std::min(n, p.group_rank * p.chunk);
  const std::int64_t len = std::min(n, begin + p.chunk) - begin;
  if (len < p.chunk) {  // the padding past the tensor's end is 0
    const std::int64_t elem = size_bytes(chunk.dtype);
    be_.fill({.data = static_cast<std::byte*>(chunk.data) + len * elem,
              .shape = {{"padding", p.chunk - len}},
              .dtype = chunk.dtype},
             0.0f);
  }
  if (len > 0) {
    be_.copy_box(reshaped(full, {{"flat", n}}), {.offset = {begin}, .extent = {len}},
                 reshaped(chunk, {{"chunk", p.chunk}}), {0}, CopyMode::assign);
  }
}

// dst (the full local tensor, n elements) = the first n elements of the replica group's chunks
// concatenated in group-rank order, gathered in the chunk's dtype.
inline void Executor::all_gather_chunks(Param& p, ConstTensorView chunk, TensorView dst) {
  const std::int64_t n = p.local.numel();
  if (p.replicas == 1) {
    be_.copy_box(chunk, {.offset = {0}, .extent = {n}}, reshaped(dst, {{"flat", n}}), {0},
                 CopyMode::assign);
    return;
  }
  const TensorShape all_shape{{"all", p.chunk * p.replicas}};
  Buffer all = buffer(all_shape, chunk.dtype(), MemoryCategory::temporaries);
  const TensorView gathered = all.view(all_shape, chunk.dtype());
  be_.synchronize();
  p.comm->all_gather(bytes_of(chunk), bytes_of(gathered), chunk.dtype()).wait();
  be_.copy_box(gathered, {.offset = {0}, .extent = {n}}, reshaped(dst, {{"flat", n}}), {0},
               CopyMode::assign);
}

// The full local tensor from the chunks (of `dtype`) of the replica group (a ZeRO gather): the
// chunks are gathered straight into a buffer of all of them, whose first elements are the local
// tensor (the last chunk's padding follows).
inline Buffer Executor::gather_chunks(Param& p, const Buffer& chunk, DType dtype) {
  if (p.replicas == 1) {
    Buffer out = buffer(p.local, dtype, MemoryCategory::temporaries);
    all_gather_chunks(p, chunk.view({{"chunk", p.chunk}}, dtype), out.view(p.local, dtype));
    return out;
  }
  const TensorShape all_shape{{"all", p.chunk * p.replicas}};
  Buffer out = buffer(all_shape, dtype, MemoryCategory::temporaries);
  be_.synchronize();
  p.comm
      ->all_gather(bytes_of(chunk.view({{"chunk", p.chunk}}, dtype)),
                   bytes_of(out.view(all_shape, dtype)), dtype)
      .wait();
  return out;
}

inline std::shared_ptr<Buffer> Executor::parameter_local(Param& p) {
  if (opt_.zero_stage == 3) return std::make_shared<Buffer>(gather_chunks(p, p.value, compute_));
  return std::shared_ptr<Buffer>(&p.value, [](Buffer*) {});  // borrowed
}

inline std::vector<float> Executor::parameter(TensorId t) {
  Param& p = param_of(t);
  if (opt_.precision == Precision::mixed_bf16) {  // the fp32 master
    if (opt_.zero_stage == 0) {
      return gather_to_host(p.global, p.master.view(p.local, DType::fp32), p.spec);
    }
    Buffer full = gather_chunks(p, p.master, DType::fp32);
    return gather_to_host(p.global, full.view(p.local, DType::fp32), p.spec);
  }
  std::shared_ptr<Buffer> full = parameter_local(p);
  return gather_to_host(p.global, full->view(p.local, compute_), p.spec);
}

inline std::vector<float> Executor::gradient(TensorId t) {
  Param& p = param_of(t);
  if (opt_.zero_stage >= 2) {
    Buffer full = gather_chunks(p, p.grad, compute_);
    return gather_to_host(p.global, full.view(p.local, compute_), p.spec);
  }
  return gather_to_host(p.global, p.grad.view(p.local, compute_), p.spec);
}

inline void Executor::set_parameter_local(TensorId t, std::span<const float> local_values) {
  Param& p = param_of(t);
  CARTO_CHECK(static_cast<std::int64_t>(local_values.size()) == p.local.numel(), "parameter ",
              t.value, ": set_parameter_local takes the local tensor ", p.local, " (",
              p.local.numel(), " values); got ", local_values.size());
  Buffer full = buffer(p.local, DType::fp32, MemoryCategory::temporaries);
  const TensorView init = full.view(p.local, DType::fp32);
  be_.copy_from_host(local_values.data(), init);
  const TensorShape chunk{{"chunk", p.chunk}};
  if (opt_.precision == Precision::mixed_bf16) {
    if (opt_.zero_stage == 0) {
      be_.convert(init, p.master.view(p.local, DType::fp32));
    } else {
      copy_chunk(init, p, p.master.view(chunk, DType::fp32));
    }
  }
  if (opt_.zero_stage == 3) {
    copy_chunk(init, p, p.value.view(chunk, compute_));  // rounds to the compute dtype
  } else {
    be_.convert(init, p.value.view(p.local, compute_));
  }
  be_.synchronize();
}

inline void Executor::set_parameter(TensorId t, std::span<const float> global_values) {
  const Param& p = param_of(t);
  CARTO_CHECK(static_cast<std::int64_t>(global_values.size()) == p.global.numel(), "parameter ",
              t.value, ": set_parameter takes the whole tensor ", p.global, " (", p.global.numel(),
              " values); got ", global_values.size());
  const Slice s = device_slice(p.global, p.spec, mesh_, device_);
  const std::size_t r = p.global.rank();
  Index gstride = exec_detail::filled(r, 1);
  for (std::size_t d = r; d-- > 1;) gstride[d - 1] = gstride[d] * p.global.dims()[d].extent;
  std::vector<float> local(static_cast<std::size_t>(p.local.numel()));
  Index idx = exec_detail::filled(r, 0);
  for (float& v : local) {
    std::int64_t gi = 0;
    for (std::size_t d = 0; d < r; ++d) gi += (s.offset[d] + idx[d]) * gstride[d];
    v = global_values[static_cast<std::size_t>(gi)];
    for (std::size_t d = r; d-- > 0;) {
      if (++idx[d] < s.extent[d]) break;
      idx[d] = 0;
    }
  }
  set_parameter_local(t, local);
}

inline std::vector<TensorId> Executor::parameters() const {
  std::vector<TensorId> out;
  for (const Param& p : params_) out.push_back(p.id);
  return out;
}

// The step's first contribution to each use's gradient assigns it (no zero fill).
inline void Executor::begin_step() {
  for (Param& p : params_) {
    p.grad_written = false;
    for (Use& u : p.uses) u.accumulated = false;
  }
}

// A parameter's gradient from op k's input i (in the strategy's gradient spec), added where the
// ZeRO stage keeps it: this rank's chunk (stage 2-3, reduced now), Param::grad (the direct
// use) or the use's Partial accumulator (reduced by finish_gradients).
inline void Executor::accumulate_parameter_gradient(std::size_t k, std::size_t i,
                                                    std::shared_ptr<Buffer> grad) {
  const TensorId t = g_.ops()[k].inputs[i];
  const ShardingSpec& have = st_[k].gradients[i];
  Param& p = param_of(t);
  Use* use = nullptr;
  for (Use& u : p.uses)
    if (u.op == k && u.input == i) use = &u;
  const TensorShape glocal = local_of(t, without_partial(have));
  // dst (=, +=) src: a copy on the first contribution, an addition after.
  auto store = [&](ConstTensorView src, TensorView dst, bool first) {
    if (first) {
      be_.convert(src, dst);
    } else {
      be_.add_scaled(src, 1.0f, dst);
    }
  };
  if (opt_.zero_stage >= 2) {  // reduce now, keep this rank's chunk
    const bool first =
        std::none_of(p.uses.begin(), p.uses.end(), [](const Use& u) { return u.accumulated; });
    use->accumulated = true;
    reduce_gradient(*grad, have, p.global);
    std::shared_ptr<Buffer> full = grad;
    if (!(without_partial(have) == p.spec)) {
      full = std::make_shared<Buffer>(move(p.global, grad->view(glocal, compute_),
                                           without_partial(have), p.spec,
                                           MemoryCategory::temporaries));
    }
    const TensorShape chunk{{"chunk", p.chunk}};
    if (first) {  // this rank's chunk straight into the gradient
      copy_chunk(full->view(p.local, compute_), p, p.grad.view(chunk, compute_));
      return;
    }
    Buffer mine = buffer(chunk, compute_, MemoryCategory::temporaries);
    copy_chunk(full->view(p.local, compute_), p, mine.view(chunk, compute_));
    be_.add_scaled(mine.view(chunk, compute_), 1.0f, p.grad.view(chunk, compute_));
    return;
  }
  // Below stage 2 run_backward writes a parameter's gradient in place; this path serves the ops
  // that produce it into a temporary.
  if (use->direct) {
    store(grad->view(glocal, compute_), p.grad.view(p.local, compute_), !p.grad_written);
    use->accumulator = std::shared_ptr<Buffer>(&p.grad, [](Buffer*) {});
    p.grad_written = true;
  } else {
    if (use->accumulator == nullptr)
      use->accumulator = allocate(glocal, compute_, MemoryCategory::gradients);
    store(grad->view(glocal, compute_), use->accumulator->view(glocal, compute_),
          !use->accumulated);
  }
  use->accumulated = true;
}

inline void Executor::finish_gradients() {
  if (opt_.zero_stage >= 2) {  // reduced at each backward into the shards
    for (Param& p : params_) {
      const bool reached =
          std::any_of(p.uses.begin(), p.uses.end(), [](const Use& u) { return u.accumulated; });
      if (!reached) be_.fill(p.grad.view({{"chunk", p.chunk}}, compute_), 0.0f);
    }
    return;
  }
  for (Param& p : params_) {
    bool first = true;
    for (Use& u : p.uses) {  // the direct uses share Param::grad: reduced once
      if (!u.accumulated || !u.direct) continue;
      reduce_gradient(p.grad, u.grad_spec, p.global);
      first = false;
      break;
    }
    for (Use& u : p.uses) {
      if (!u.accumulated || u.direct) continue;
      reduce_gradient(*u.accumulator, u.grad_spec, p.global);
      Buffer moved =
          move(p.global, u.accumulator->view(local_shape(p.global, u.grad_spec, mesh_), compute_),
               without_partial(u.grad_spec), p.spec, MemoryCategory::temporaries);
      if (first) {
        be_.convert(moved.view(p.local, compute_), p.grad.view(p.local, compute_));
      } else {
        be_.add_scaled(moved.view(p.local, compute_), 1.0f, p.grad.view(p.local, compute_));
      }
      first = false;
    }
    if (first) be_.fill(p.grad.view(p.local, compute_), 0.0f);  // no gradient reached it
  }
}

// One fused AdamW call over every shard this rank updates (Backend::adamw_update_all), then per
// parameter what follows the update: the bf16 compute copy from the master, the all-gather of
// the updated chunks.
inline void Executor::optimizer_step() {
  ++step_;
  AdamWArgs args = opt_.adamw;
  args.step = step_;
  const bool mixed = opt_.precision == Precision::mixed_bf16;
  // The fp32 weights AdamW updates for each parameter (the master under mixed_bf16, else the
  // value): the local tensor at ZeRO 0, else this rank's chunk, elements [begin, begin + len) of
  // the flat local tensor (empty when the chunk is all padding).
  std::vector<TensorView> weights(params_.size());
  std::vector<AdamWShard> shards;
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const std::int64_t n = p.local.numel();
    const TensorShape flat{{"flat", n}};
    if (opt_.zero_stage == 0) {
      weights[i] = mixed ? p.master.view(flat, DType::fp32) : p.value.view(flat, compute_);
      shards.push_back({.param = weights[i],
                        .grad = p.grad.view(flat, compute_),
                        .m = p.m.view(flat, DType::fp32),
                        .v = p.v.view(flat, DType::fp32)});
      continue;
    }
    const std::int64_t begin = std::min(n, p.group_rank * p.chunk);
    const std::int64_t len = std::min(n, begin + p.chunk) - begin;
    if (len == 0) continue;
    const TensorShape piece{{"flat", len}};
    weights[i] = mixed                  ? p.master.view(piece, DType::fp32)
                 : opt_.zero_stage == 3 ? p.value.view(piece, compute_)
                                        : offset_view(p.value, begin, piece, compute_);
    const ConstTensorView grad = opt_.zero_stage >= 2
                                     ? ConstTensorView(p.grad.view(piece, compute_))
                                     : ConstTensorView(offset_view(p.grad, begin, piece, compute_));
    shards.push_back({.param = weights[i],
                      .grad = grad,
                      .m = p.m.view(piece, DType::fp32),
                      .v = p.v.view(piece, DType::fp32)});
  }
  be_.adamw_update_all(shards, args);
  for (std::size_t i = 0; i < params_.size(); ++i) {
    Param& p = params_[i];
    const std::int64_t n = p.local.numel();
    const TensorShape flat{{"flat", n}};
    const TensorShape chunk{{"chunk", p.chunk}};
    const TensorView& w = weights[i];
    const bool updated = w.data != nullptr;
    if (opt_.zero_stage == 0) {
      if (mixed) be_.convert(w, p.value.view(flat, compute_));
      continue;
    }
    const std::int64_t begin = std::min(n, p.group_rank * p.chunk);
    const std::int64_t len = std::min(n, begin + p.chunk) - begin;
    const TensorShape piece{{"flat", len}};
    if (opt_.zero_stage == 3) {
      // The compute chunk (what the gathers read) from the updated master; its padding stays 0.
      if (mixed && updated) be_.convert(w, p.value.view(piece, compute_));
    } else if (mixed || p.replicas > 1) {
      // All-gather the updated chunk in the compute dtype over the replica group (under
      // mixed_bf16 the bf16 rounding of the master chunk, also when the group is one device).
      Buffer send = buffer(chunk, compute_, MemoryCategory::temporaries);
      const TensorView sent = send.view(chunk, compute_);
      if (len < p.chunk) {  // the padding
        be_.fill(offset_view(send, len, {{"padding", p.chunk - len}}, compute_), 0.0f);
      }
      if (updated) {
        be_.copy_box(mixed ? ConstTensorView(w)
                           : ConstTensorView(offset_view(p.value, begin, piece, compute_)),
                     {.offset = {0}, .extent = {len}}, sent, {0}, CopyMode::assign);
      }
      all_gather_chunks(p, sent, p.value.view(flat, compute_));
    }
  }
  be_.synchronize();
}

}  // namespace carto
