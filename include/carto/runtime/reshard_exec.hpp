// carto/runtime/reshard_exec.hpp — running a resharding plan: this rank's shard of a tensor moved
// from one sharding spec to another through the mesh communicators.
//
// Design note. execute_reshard runs the steps of a ReshardPlan (cost/reshard.hpp) one by one, each
// exactly the data movement the cost model charges, so the bytes each collective moves are the
// step's `bytes` and the memory it holds is the step's `extra_bytes`. Layout (spec/layout.hpp): a
// dim split over (a1, ..., ak) puts the device at coordinate c on shard ((c[a1]·n[a2] +
// c[a2])·...), the last axis innermost; a step on axis x runs on the communicator of x alone, whose
// rank is c[x]. With L the local bytes before the step, per kind:
//  - local_slice (x joins dim d innermost): keep piece c[x] of n along d. No collective.
//  - all_gather (x innermost in d leaves it): the x-group's blocks are the n consecutive pieces of
//    the new block along d, in group-rank order. S = n·L.
//  - reduce_scatter (x Partial becomes the innermost split of d): group rank k receives piece k
//    along d of the sum. S = L.
//  - all_to_all (x innermost in d moves to the innermost split of d2): group rank k is sent piece
//    k along d2 of this block, and the piece received from rank i is sub-block i along d. S = L.
//  - all_reduce (x Partial is dropped): the sum over the x-group. S = L.
//  - make_partial (x unused becomes Partial): coordinate 0 keeps the block, the others hold
//    zeros, so the sum over the x-group is the value. No collective.
// Collectives take rank-major chunks. A chunk along dim d is contiguous in a local block when
// every dim before d has local extent 1; otherwise the step stages: an all-gather gathers into a
// buffer of its output size and interleaves the chunks into place, a reduce-scatter packs its
// input into a buffer of the input size, and an all-to-all always packs (or unpacks) through one
// buffer of L, receiving in place when neither side is contiguous.
// Memory (what ReshardGraph::plan charges): the source stays allocated; each step allocates its
// output (category temporaries, the last step's `category`) and its staging buffer (temporaries)
// through the backend's allocator, frees the staging buffer when it ends and its input when the
// next step's output exists (never the source). So the peak beyond the source is the plan's
// extra_memory_bytes. A plan without steps returns a copy (its bytes beyond the source are the
// output's, which the plan does not count).
// Every collective is preceded by backend.synchronize() and waited for before the backend reads
// its output, so a backend with a queue (CUDA) sees its writes ordered with the communicator's.
// fp32 and bf16 (the tensor's dtype, kept by every step and staging buffer; a bf16 reduction sums
// in fp32 in rank order and rounds once, communicator.hpp); other dtypes throw.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "carto/cost/hardware.hpp"
#include "carto/cost/reshard.hpp"
#include "carto/error.hpp"
#include "carto/runtime/backend.hpp"
#include "carto/runtime/communicator.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

namespace detail {

// Row-major strides, in elements, of a contiguous tensor of `shape`.
inline Index contiguous_strides(const TensorShape& shape) {
  Index strides;
  for (std::size_t d = 0; d < shape.rank(); ++d) strides.push_back(1);
  std::int64_t stride = 1;
  for (std::size_t d = shape.rank(); d-- > 0;) {
    strides[d] = stride;
    stride *= shape.dims()[d].extent;
  }
  return strides;
}

inline Index extents_of(const TensorShape& shape) {
  Index extents;
  for (const DimExtent& e : shape.dims()) extents.push_back(e.extent);
  return extents;
}

inline TensorShape with_extent(const TensorShape& shape, std::size_t dim, std::int64_t extent) {
  TensorShape out;
  for (std::size_t d = 0; d < shape.rank(); ++d) {
    out.push_back({shape.dims()[d].name, d == dim ? extent : shape.dims()[d].extent});
  }
  return out;
}

// Whether the n equal pieces of a contiguous tensor of `shape` along `dim` are its n consecutive
// flat chunks: every dim before `dim` has extent 1.
inline bool chunks_contiguous(const TensorShape& shape, std::size_t dim) {
  for (std::size_t d = 0; d < dim; ++d) {
    if (shape.dims()[d].extent != 1) return false;
  }
  return true;
}

// Piece k of n along `dim` of a contiguous tensor of `whole` shape, and flat chunk k of a buffer
// of the same size holding those pieces one after the other (each contiguous).
struct ChunkBoxes {
  StridedBox piece;
  StridedBox chunk;
  Index extents;
};
inline ChunkBoxes chunk_boxes(const TensorShape& whole, std::size_t dim, std::int64_t n,
                              std::int64_t k) {
  const TensorShape part = with_extent(whole, dim, whole.dims()[dim].extent / n);
  const Index strides = contiguous_strides(whole);
  return {.piece = {.offset = k * part.dims()[dim].extent * strides[dim], .strides = strides},
          .chunk = {.offset = k * part.numel(), .strides = contiguous_strides(part)},
          .extents = extents_of(part)};
}

// flat chunk k = piece k of `whole` along `dim`, for k < n (`flat` has whole's element count).
inline void pack_chunks(Backend& backend, ConstTensorView whole, std::size_t dim, std::int64_t n,
                        TensorView flat) {
  for (std::int64_t k = 0; k < n; ++k) {
    const ChunkBoxes b = chunk_boxes(whole.shape(), dim, n, k);
    backend.copy_strided(whole, b.piece, flat, b.chunk, b.extents, CopyMode::assign);
  }
}

// piece k of `whole` along `dim` = flat chunk k, for k < n.
inline void unpack_chunks(Backend& backend, ConstTensorView flat, std::size_t dim, std::int64_t n,
                          TensorView whole) {
  for (std::int64_t k = 0; k < n; ++k) {
    const ChunkBoxes b = chunk_boxes(whole.shape, dim, n, k);
    backend.copy_strided(flat, b.chunk, whole, b.piece, b.extents, CopyMode::assign);
  }
}

// dst = src, two contiguous tensors of the same shape.
inline void copy_whole(Backend& backend, ConstTensorView src, TensorView dst) {
  const StridedBox all{.offset = 0, .strides = contiguous_strides(src.shape())};
  backend.copy_strided(src, all, dst, all, extents_of(src.shape()), CopyMode::assign);
}

// A view's bytes, for the byte-level collectives (which take the view's dtype beside them).
inline std::span<const std::byte> span_of(ConstTensorView v) {
  return {static_cast<const std::byte*>(v.data()), static_cast<std::size_t>(v.bytes())};
}
inline std::span<std::byte> span_of(TensorView v) {
  return {static_cast<std::byte*>(v.data), static_cast<std::size_t>(v.bytes())};
}

inline std::string describe_step(const ReshardPlan& plan, std::size_t i) {
  const ReshardStep& s = plan.steps[i];
  std::string what = concat(to_string_view(s.kind), " over '", s.axis, "'");
  if (s.dim != kNoDim) what += concat(", dim ", s.dim);
  if (s.to_dim != kNoDim) what += concat(" to dim ", s.to_dim);
  return concat("step ", i, " (", what, ") of the plan '", plan.from, "' -> '", plan.to, "'");
}

// The spec a step leads to from `spec`, checking that the step applies to it.
inline ShardingSpec spec_after_step(const ShardingSpec& spec, const ReshardStep& step,
                                    const ReshardPlan& plan, std::size_t i) {
  auto bad = [&](std::string_view why) {
    fail("carto: execute_reshard: ", describe_step(plan, i), " does not apply to spec '", spec,
         "': ", why);
  };
  auto dim_ok = [&](std::size_t d) {
    if (d >= spec.rank()) bad(concat("dim ", d, " is out of range"));
  };
  bool partial = false;
  for (const AxisName& p : spec.partial()) partial = partial || p == step.axis;
  ShardingSpec out;
  switch (step.kind) {
    case ReshardKind::local_slice:
    case ReshardKind::make_partial:
      if (spec.uses(step.axis)) bad("the axis is already used");
      out = spec;
      if (step.kind == ReshardKind::make_partial) return out.add_partial(step.axis);
      dim_ok(step.dim);
      return out.shard(TensorDim{step.dim}, step.axis);
    case ReshardKind::all_gather:
    case ReshardKind::all_to_all: {
      dim_ok(step.dim);
      const AxisList& list = spec.dims()[step.dim];
      if (list.empty() || !(list.back() == step.axis)) bad("the axis is not innermost in the dim");
      StaticVector<AxisList, kMaxRank> dims = spec.dims();
      dims[step.dim].pop_back();
      if (step.kind == ReshardKind::all_to_all) {
        dim_ok(step.to_dim);
        if (step.to_dim == step.dim) bad("it moves the split to the same dim");
        dims[step.to_dim].push_back(step.axis);
      }
      for (const AxisList& d : dims) out.add_dim(d);
      for (const AxisName& p : spec.partial()) out.add_partial(p);
      return out;
    }
    case ReshardKind::all_reduce:
    case ReshardKind::reduce_scatter:
      if (!partial) bad("the spec is not Partial over the axis");
      for (const AxisList& d : spec.dims()) out.add_dim(d);
      for (const AxisName& p : spec.partial()) {
        if (!(p == step.axis)) out.add_partial(p);
      }
      if (step.kind == ReshardKind::all_reduce) return out;
      dim_ok(step.dim);
      return out.shard(TensorDim{step.dim}, step.axis);
  }
  bad("unknown step kind");
  return out;
}

// One step on axis `comm` (rank c = this device's coordinate, size n): `in` (the local block
// before) to `out` (the local block after, allocated by the caller).
inline void run_reshard_step(Backend& backend, Communicator& comm, const ReshardStep& step,
                             ConstTensorView in, TensorView out) {
  const std::int64_t n = comm.size();
  const std::int64_t c = comm.rank();
  const DType dt = in.dtype();
  auto staging = [&](const TensorShape& shape) {
    return backend.allocate(shape, dt, MemoryCategory::temporaries);
  };
  switch (step.kind) {
    case ReshardKind::local_slice: {
      // Piece c of n along step.dim: a box of `in` at offset c·e there, 0 elsewhere.
      Slice piece{.offset = {}, .extent = extents_of(out.shape)};
      for (std::size_t d = 0; d < out.shape.rank(); ++d) piece.offset.push_back(0);
      const Index zero = piece.offset;
      piece.offset[step.dim] = c * piece.extent[step.dim];
      backend.copy_box(in, piece, out, zero, CopyMode::assign);
      return;
    }
    case ReshardKind::make_partial:
      if (c == 0) {
        copy_whole(backend, in, out);
      } else {
        backend.fill(out, 0.0f);
      }
      return;
    case ReshardKind::all_reduce:
      backend.synchronize();
      comm.all_reduce(span_of(in), span_of(out), dt, ReduceOp::sum).wait();
      return;
    case ReshardKind::all_gather:
      backend.synchronize();
      if (chunks_contiguous(out.shape, step.dim)) {
        comm.all_gather(span_of(in), span_of(out), dt).wait();
      } else {
        const Buffer gathered = staging(out.shape);
        const TensorView g = gathered.view(out.shape, dt);
        comm.all_gather(span_of(in), span_of(g), dt).wait();
        unpack_chunks(backend, g, step.dim, n, out);
      }
      return;
    case ReshardKind::reduce_scatter:
      if (chunks_contiguous(in.shape(), step.dim)) {
        backend.synchronize();
        comm.reduce_scatter(span_of(in), span_of(out), dt, ReduceOp::sum).wait();
      } else {
        const Buffer packed = staging(in.shape());
        const TensorView p = packed.view(in.shape(), dt);
        pack_chunks(backend, in, step.dim, n, p);
        backend.synchronize();
        comm.reduce_scatter(span_of(ConstTensorView(p)), span_of(out), dt, ReduceOp::sum).wait();
      }
      return;
    case ReshardKind::all_to_all: {
      // Send chunk k: piece k of `in` along to_dim; receive chunk i: piece i of `out` along dim.
      const Buffer buffer = staging(in.shape());
      const TensorView s = buffer.view(in.shape(), dt);
      if (chunks_contiguous(out.shape, step.dim)) {
        pack_chunks(backend, in, step.to_dim, n, s);
        backend.synchronize();
        comm.all_to_all(span_of(ConstTensorView(s)), span_of(out), dt).wait();
      } else {
        if (chunks_contiguous(in.shape(), step.to_dim)) {
          backend.synchronize();
          comm.all_to_all(span_of(in), span_of(s), dt).wait();
        } else {
          pack_chunks(backend, in, step.to_dim, n, s);
          backend.synchronize();
          comm.all_to_all(span_of(ConstTensorView(s)), span_of(s), dt).wait();
        }
        unpack_chunks(backend, s, step.dim, n, out);
      }
      return;
    }
  }
}

}  // namespace detail

// This rank's shard of a tensor of global shape `global`, stored in spec `plan.from`, moved to
// spec `plan.to` by running the steps of `plan` (from reshard(...) or ReshardCache::plan, with
// MakePartial::allow when the target may be Partial over more axes than the source) through the
// mesh communicators. Returns a new buffer holding the local shard in `plan.to`, allocated through
// backend.allocate(..., category); temporaries go through it with MemoryCategory::temporaries.
// `local` (fp32 or bf16; the output and every temporary keep it) must have local_shape(global,
// plan.from, comms.mesh()); `local` is not modified.
// Collective over the mesh: every rank calls it with the same global shape and plan.
inline Buffer execute_reshard(Backend& backend, MeshComms& comms, const TensorShape& global,
                              ConstTensorView local, const ReshardPlan& plan,
                              MemoryCategory category) {
  const DeviceMesh& mesh = comms.mesh();
  check_spec(global, plan.from, mesh, "reshard source");
  check_spec(global, plan.to, mesh, "reshard target");
  const TensorShape expected = local_shape(global, plan.from, mesh);
  bool same = local.shape().rank() == expected.rank();
  for (std::size_t d = 0; same && d < expected.rank(); ++d) {
    same = local.shape().dims()[d].extent == expected.dims()[d].extent;
  }
  if (!same) {
    detail::fail("carto: execute_reshard: the local shard of tensor ", global, " in spec '",
                 plan.from, "' on mesh ", mesh, " has shape ", local.shape(),
                 "; expected the local shape ", expected);
  }
  const DType dt = local.dtype();
  if (dt != DType::fp32 && dt != DType::bf16) {
    detail::fail("carto: execute_reshard: the local shard of tensor ", global, " is ",
                 to_string_view(dt), "; resharding runs on fp32 and bf16");
  }
  const ConstTensorView source(local.data(), expected, dt);

  if (plan.steps.empty()) {
    if (!(plan.from == plan.to)) {
      detail::fail("carto: execute_reshard: the plan '", plan.from, "' -> '", plan.to,
                   "' has no steps but its specs differ");
    }
    Buffer out = backend.allocate(expected, dt, category);
    detail::copy_whole(backend, source, out.view(expected, dt));
    return out;
  }

  ShardingSpec spec = plan.from;
  Buffer current;  // the output of the last step; empty while the input is the source
  ConstTensorView in = source;
  for (std::size_t i = 0; i < plan.steps.size(); ++i) {
    const ReshardStep& step = plan.steps[i];
    const ShardingSpec next = detail::spec_after_step(spec, step, plan, i);
    if (!(next == step.after)) {
      detail::fail("carto: execute_reshard: ", detail::describe_step(plan, i), " leads from '",
                   spec, "' to '", next, "', but the plan says '", step.after, "'");
    }
    const TensorShape out_shape = local_shape(global, next, mesh);
    const bool last = i + 1 == plan.steps.size();
    Buffer out = backend.allocate(out_shape, dt, last ? category : MemoryCategory::temporaries);
    const TensorView o = out.view(out_shape, dt);
    detail::run_reshard_step(backend, comms.axis(mesh.index_of(step.axis)), step, in, o);
    current = std::move(out);  // frees the previous step's output
    in = o;
    spec = next;
  }
  if (!(spec == plan.to)) {
    detail::fail("carto: execute_reshard: the steps of the plan '", plan.from, "' -> '", plan.to,
                 "' end in '", spec, "'");
  }
  return current;
}

// Plans the move with `cache` (the fastest path under `hw` for the tensor's dtype, Partial targets
// allowed through make_partial) and runs it.
inline Buffer reshard_tensor(Backend& backend, MeshComms& comms, ReshardCache& cache,
                             const HardwareProfile& hw, const TensorShape& global,
                             ConstTensorView local, const ShardingSpec& from,
                             const ShardingSpec& to, MemoryCategory category) {
  const ReshardPlan plan = cache.plan(global, local.dtype(), from, to, comms.mesh(), hw,
                                      {.make_partial = MakePartial::allow});
  return execute_reshard(backend, comms, global, local, plan, category);
}

}  // namespace carto
