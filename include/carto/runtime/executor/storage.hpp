// carto/runtime/executor/storage.hpp — where each tensor lives and how it moves: the stored specs,
// reshards, collectives on local tensors, gathering to the host, and lazy views.
//
// Design note (DESIGN.md §7; executor.hpp lists the rules). layout() stores a tensor in its
// producer's output spec and a parameter (or graph input) in its first consumer's input spec,
// and counts each tensor's forward consumers. A view op whose input is an activation read as
// stored is lazy: its output aliases the base's storage (act_ holds the base's buffer) and
// materialize() copies the chain of views out into a temporary only while an op needs the value,
// so a saved view costs its base once. view_copy runs one view forward (y = view(x)) or inverse
// (dx (+)= view⁻¹(dy)) as one strided copy; local shards keep whole heads because the fused QKV dim
// is ordered per head. move() reshards through runtime/reshard_exec.hpp, the Dijkstra plan the
// cost model charged, in the tensor's dtype; it synchronizes the backend first, as do the
// collectives here (reduce_gradient, all_reduce: in place), because communicators read the local
// memory directly. Collectives take the view's bytes and dtype: fp32 or bf16 (a bf16 reduction sums
// in fp32 in rank order and rounds once, communicator.hpp). reduce_gradient reduces a parameter
// gradient in ExecutorOptions::gradient_reduction, widening a bf16 gradient to fp32 and rounding
// the sum back once when that is fp32. gather_to_host widens bf16 to fp32 on the host.
#pragma once

#include "carto/runtime/executor/executor_class.hpp"
#include "carto/runtime/trace.hpp"

namespace carto {

inline void Executor::validate() {
  CARTO_CHECK(st_.size() == g_.num_ops(), "an Executor needs one strategy per op: got ", st_.size(),
              " for ", g_.num_ops(), " ops");
  for (std::size_t k = 0; k < st_.size(); ++k) {
    CARTO_CHECK(st_[k].op.value == static_cast<std::int32_t>(k), "strategy ", k, " is for op ",
                st_[k].op.value, "; op k's goes at index k");
  }
  CARTO_CHECK(opt_.zero_stage >= 0 && opt_.zero_stage <= 3, "ZeRO stage ", opt_.zero_stage,
              " is not 0, 1, 2 or 3");
  compute_ = compute_dtype(opt_.precision);
  const bool reduction_ok =
      opt_.gradient_reduction == DType::fp32 ||
      (opt_.precision == Precision::mixed_bf16 && opt_.gradient_reduction == DType::bf16);
  CARTO_CHECK(reduction_ok, "an Executor of ", to_string_view(opt_.precision),
              " training reduces gradients in ",
              opt_.precision == Precision::fp32 ? "fp32" : "fp32 or bf16", ", not ",
              to_string_view(opt_.gradient_reduction));
  CARTO_CHECK(comms_.mesh() == mesh_, "the plan's mesh ", mesh_,
              " differs from the communicators' mesh ", comms_.mesh());
  for (const Op& op : g_.ops()) {
    if ((op.kind == OpKind::softmax || op.kind == OpKind::layernorm ||
         op.kind == OpKind::rmsnorm) &&
        op.dim + 1 != g_.tensor(op.inputs[0]).shape.rank()) {
      detail::fail("carto: the executor runs ", to_string_view(op.kind),
                   " over the last dim only; this one reduces dim ", op.dim);
    }
  }
}

inline void Executor::layout() {
  const std::size_t n = g_.tensors().size();
  stored_.assign(n, ShardingSpec{});
  consumers_.assign(n, 0);
  lazy_.assign(n, false);
  act_.assign(n, nullptr);
  grad_.assign(n, nullptr);
  remaining_.assign(n, 0);
  saved_.clear();
  saved_.resize(g_.num_ops());
  std::vector<bool> has(n, false);
  for (std::size_t k = 0; k < g_.num_ops(); ++k) {
    const Op& op = g_.ops()[k];
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const std::size_t t = op.inputs[i].index();
      ++consumers_[t];
      if (!has[t]) {
        stored_[t] = st_[k].sharding.inputs[i];
        has[t] = true;
      }
    }
    stored_[op.output.index()] = st_[k].sharding.output;
    has[op.output.index()] = true;
    // A view of its input as stored is lazy (aliases the base storage).
    const TensorInfo& in = g_.tensor(op.inputs[0]);
    lazy_[op.output.index()] = op.kind == OpKind::view && in.kind == TensorKind::activation &&
                               in.producer.valid() &&
                               stored_[op.inputs[0].index()] == st_[k].sharding.inputs[0];
  }
  // Part views: a fused tensor whose consumers are all views of one part each (at most 32).
  part_bit_.assign(g_.num_ops(), 0);
  parts_all_.assign(n, 0);
  parts_written_.assign(n, 0);
  std::vector<bool> other_consumer(n, false);
  std::vector<int> parts(n, 0);
  for (std::size_t k = 0; k < g_.num_ops(); ++k) {
    const Op& op = g_.ops()[k];
    const bool part =
        op.kind == OpKind::view &&
        (op.view == ViewKind::split_heads || op.view == ViewKind::split_groups) &&
        g_.tensor(op.inputs[0]).shape.numel() != g_.tensor(op.output).shape.numel();
    for (std::size_t i = 0; i < op.inputs.size(); ++i) {
      const std::size_t t = op.inputs[i].index();
      if (!part || i > 0 || parts[t] >= 32) {
        other_consumer[t] = true;
        continue;
      }
      part_bit_[k] = 1U << parts[t]++;
      parts_all_[t] |= part_bit_[k];
    }
  }
  // Each part writes its own slot only if every part writes its gradient in the spec the fused
  // gradient is kept in (no Partial, no move); else they all add into a zero-filled buffer.
  for (std::size_t k = 0; k < g_.num_ops(); ++k) {
    if (part_bit_[k] == 0) continue;
    const std::size_t t = g_.ops()[k].inputs[0].index();
    const ShardingSpec& have = st_[k].gradients[0];
    if (have.is_partial() || !(have == without_partial(stored_[t]))) other_consumer[t] = true;
  }
  for (std::size_t t = 0; t < n; ++t) {
    if (other_consumer[t]) parts_all_[t] = 0;
  }
}

inline Buffer Executor::move(const TensorShape& global, ConstTensorView local,
                             const ShardingSpec& from, const ShardingSpec& to,
                             MemoryCategory category) {
  const trace::Span trace_span(trace::Kind::reshard, "reshard", local.bytes());
  be_.synchronize();
  return reshard_tensor(be_, comms_, cache_, hw_, global, local, from, to, category);
}

// A parameter gradient (compute dtype), Partial over `spec`'s Partial axes, all-reduced over them
// in place, in ExecutorOptions::gradient_reduction.
inline void Executor::reduce_gradient(Buffer& b, const ShardingSpec& spec,
                                      const TensorShape& global) {
  if (!spec.is_partial() || split_factor(spec.partial(), mesh_) == 1) return;
  const TensorShape local = local_shape(global, without_partial(spec), mesh_);
  const TensorView g = b.view(local, compute_);
  if (opt_.gradient_reduction == compute_) {
    all_reduce(g, spec.partial(), ReduceOp::sum);
    return;
  }
  // Widened for the reduction, rounded back once.
  Buffer wide = buffer(local, opt_.gradient_reduction, MemoryCategory::temporaries);
  const TensorView w = wide.view(local, opt_.gradient_reduction);
  be_.convert(g, w);
  all_reduce(w, spec.partial(), ReduceOp::sum);
  be_.convert(w, g);
}

inline void Executor::all_reduce(TensorView v, const AxisList& axes, ReduceOp op) {
  if (axes.empty() || split_factor(axes, mesh_) == 1) return;
  be_.synchronize();
  comms_.axes(axes).all_reduce(bytes_of(ConstTensorView(v)), bytes_of(v), v.dtype, op).wait();
}

// The whole tensor on the host, widened to fp32 when it is stored in bf16.
inline std::vector<float> Executor::gather_to_host(const TensorShape& global, ConstTensorView local,
                                                   const ShardingSpec& spec) {
  const ShardingSpec whole = ShardingSpec::replicated(global.rank());
  const auto n = static_cast<std::size_t>(global.numel());
  std::vector<float> out(n);
  auto to_host = [&](ConstTensorView v) {
    be_.synchronize();
    if (v.dtype() == DType::fp32) {
      be_.copy_to_host(v, out.data());
      return;
    }
    CARTO_CHECK(v.dtype() == DType::bf16, "gather_to_host of a ", to_string_view(v.dtype()),
                " tensor; the executor stores fp32 and bf16");
    std::vector<Bf16> narrow(n);
    be_.copy_to_host(v, narrow.data());
    for (std::size_t i = 0; i < n; ++i) out[i] = to_float(narrow[i]);
  };
  if (spec == whole) {
    to_host(local);
    return out;
  }
  Buffer b = move(global, local, spec, whole, MemoryCategory::temporaries);
  to_host(b.view(global, local.dtype()));
  return out;
}

// The local tensor `t` in its stored spec, given the storage `base` of its (lazy view) chain.
inline std::shared_ptr<Buffer> Executor::materialize(TensorId t,
                                                     const std::shared_ptr<Buffer>& base) {
  if (!lazy_[t.index()]) return base;
  const Op& op = g_.op(g_.tensor(t).producer);
  std::shared_ptr<Buffer> in = materialize(op.inputs[0], base);
  const TensorShape in_local = local_of(op.inputs[0], stored_[op.inputs[0].index()]);
  const TensorShape out_local = local_of(t, stored_[t.index()]);
  auto out = allocate(out_local, dtype_of(t), MemoryCategory::temporaries);
  view_copy(op, view_of(op.inputs[0], *in, in_local), view_of(t, *out, out_local), CopyMode::assign,
            false);
  return out;
}

// y = view(x) (forward), or dx (+)= view⁻¹(dy) (inverse).
inline void Executor::view_copy(const Op& op, ConstTensorView x, TensorView y, CopyMode mode,
                                bool inverse) {
  // x is the view's input shape when !inverse; when inverse, x is the view's output (dy) and y
  // the input's gradient.
  const TensorShape& out = inverse ? x.shape() : y.shape;
  const TensorShape& in = inverse ? y.shape : x.shape();
  const Index extents = exec_detail::extents_of(out);
  const StridedBox contiguous =
      box_of(out, {.offset = exec_detail::filled(out.rank(), 0), .extent = extents});
  StridedBox in_box;
  switch (op.view) {
    case ViewKind::split_heads: {
      // Local shards keep whole heads (the fused dim is ordered per head), so the box of the
      // local fused tensor is the local split.
      const std::int64_t heads = out.dims()[1].extent, d = out.dims()[3].extent;
      in_box = heads_box(in, in.dims()[2].extent / (heads * d), static_cast<std::int64_t>(op.dim),
                         heads);
      break;
    }
    case ViewKind::merge_heads: {
      // out (B, S, a·d) seen as (B, a, S, d) is heads_box(out, 1, 0, a); (B, S, n·g·d) seen as
      // (B, n, g, S, d) has strides (S·W, g·d, d, W, 1), W = n·g·d. Walk in's index space.
      const Index in_ext = exec_detail::extents_of(in);
      StridedBox out_box;
      if (in.rank() == 5) {
        const std::int64_t w = out.dims()[2].extent, s = out.dims()[1].extent;
        const std::int64_t g = in.dims()[2].extent, d = in.dims()[4].extent;
        out_box = {.offset = 0, .strides = {s * w, g * d, d, w, 1}};
      } else {
        out_box = heads_box(out, 1, 0, in.dims()[1].extent);
      }
      const StridedBox in_contig =
          box_of(in, {.offset = exec_detail::filled(in.rank(), 0), .extent = in_ext});
      if (!inverse) {
        be_.copy_strided(x, in_contig, y, out_box, in_ext, mode);
      } else {
        be_.copy_strided(x, out_box, y, in_contig, in_ext, mode);
      }
      return;
    }
    case ViewKind::split_groups: {
      // in (B, S, n·c·d) with c slots per group (whole groups on every shard: only n is split);
      // out (B, n, g, S, d) takes each group's first g slots: strides (S·W, c·d, d, W, 1).
      const std::int64_t w = in.dims()[2].extent, s = in.dims()[1].extent;
      const std::int64_t n = out.dims()[1].extent, d = out.dims()[4].extent;
      const std::int64_t c = w / (n * d);
      CARTO_CHECK(c * n * d == w && c >= out.dims()[2].extent, "split_groups of a local ", in,
                  " into ", out, ": the local fused dim must hold whole groups");
      in_box = {.offset = 0, .strides = {s * w, c * d, d, w, 1}};
      break;
    }
    case ViewKind::transpose: {
      // out = in with the last two dims swapped: walk out's index space, read in transposed.
      in_box = box_of(
          in, {.offset = exec_detail::filled(in.rank(), 0), .extent = exec_detail::extents_of(in)});
      std::swap(in_box.strides[in.rank() - 1], in_box.strides[in.rank() - 2]);
      break;
    }
  }
  if (!inverse) {
    be_.copy_strided(x, in_box, y, contiguous, extents, mode);
  } else {
    be_.copy_strided(x, contiguous, y, in_box, extents, mode);
  }
}

}  // namespace carto
