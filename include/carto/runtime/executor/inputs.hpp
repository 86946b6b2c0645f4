// carto/runtime/executor/inputs.hpp — an op's inputs: the host batch, reading an input in the spec
// the op wants (forward), and reading it again (backward).
//
// Design note (DESIGN.md §7; executor.hpp lists the rules). Every rank holds the whole host batch,
// as a data loader gives it; a consumer slices a graph input in the spec it reads (for a Partial
// spec, coordinate 0 of each Partial axis holds the value and the others zeros). Token ids go to
// their own int32 storage (index_buffer, 4 bytes per id whatever the compute dtype) and are read
// through index_view; values are uploaded as fp32 into a temporary and converted into the compute
// dtype (rounded to bf16 under mixed_bf16).
// read_input brings input i of op k to the op's input spec: a parameter as its local value
// (all-gathered under ZeRO-3), an activation as its materialized stored value, resharded when the
// specs differ; Read::moved and Read::stored let run_forward apply the save rule (keep the moved
// copy, or the stored copy when that is smaller and the move runs again). reread is backward's
// side of that rule: the saved moved copy, or the saved stored storage moved again, or a
// parameter or host slice read afresh.
#pragma once

#include "carto/runtime/executor/parameters.hpp"
#include "carto/runtime/executor/storage.hpp"

namespace carto {

inline void Executor::set_inputs(std::span<const HostInput> inputs) {
  host_.clear();
  for (const HostInput& in : inputs) {
    const TensorInfo& info = g_.tensor(in.tensor);
    CARTO_CHECK(!info.producer.valid() && info.kind != TensorKind::parameter, "tensor ",
                in.tensor.value, " is not a graph input");
    const auto n = static_cast<std::size_t>(info.shape.numel());
    if (info.kind == TensorKind::index) {
      CARTO_CHECK(in.ids.size() == n, "input ", in.tensor.value, " of shape ", info.shape,
                  " needs ", n, " token ids; got ", in.ids.size());
    } else {
      CARTO_CHECK(in.values.size() == n, "input ", in.tensor.value, " of shape ", info.shape,
                  " needs ", n, " values; got ", in.values.size());
    }
    host_[in.tensor.index()] = &in;
  }
  for (std::size_t t = 0; t < g_.tensors().size(); ++t) {
    const TensorInfo& info = g_.tensors()[t];
    if (!info.producer.valid() && info.kind != TensorKind::parameter && consumers_[t] > 0) {
      CARTO_CHECK(host_.contains(t), "graph input ", t, " (", info.shape,
                  ") got no data; pass one HostInput per graph input");
    }
  }
}

// The local slice of a host input in `spec` (no Partial for inputs: a Partial spec keeps the
// value on coordinate 0 of each Partial axis).
inline std::shared_ptr<Buffer> Executor::host_slice(TensorId t, const ShardingSpec& spec) {
  const HostInput& in = *host_.at(t.index());
  const TensorShape& global = g_.tensor(t).shape;
  const TensorShape local = local_shape(global, without_partial(spec), mesh_);
  const Slice s = device_slice(global, without_partial(spec), mesh_, device_);
  bool zero = false;
  for (const AxisName& a : spec.partial())
    zero = zero || mesh_.coord(device_)[mesh_.index_of(a)] != 0;
  const bool ids = g_.tensor(t).kind == TensorKind::index;
  const auto count = static_cast<std::size_t>(local.numel());
  std::vector<std::int32_t> id_data(ids ? count : 0);
  std::vector<float> data(ids ? 0 : count);
  Index idx = exec_detail::filled(local.rank(), 0);
  Index gstride = exec_detail::filled(global.rank(), 1);
  for (std::size_t d = global.rank(); d-- > 1;)
    gstride[d - 1] = gstride[d] * global.dims()[d].extent;
  for (std::size_t e = 0; e < count; ++e) {
    std::int64_t gi = 0;
    for (std::size_t d = 0; d < local.rank(); ++d) gi += (s.offset[d] + idx[d]) * gstride[d];
    const auto g = static_cast<std::size_t>(gi);
    if (ids) {
      id_data[e] = in.ids[g];
    } else {
      data[e] = zero ? 0.0f : in.values[g];
    }
    for (std::size_t d = local.rank(); d-- > 0;) {
      if (++idx[d] < local.dims()[d].extent) break;
      idx[d] = 0;
    }
  }
  if (ids) {
    auto b = index_buffer(local);
    // copy_from_host moves dst.bytes() bytes; an fp32 view of the same 4-byte elements says how
    // many (the ids are copied bit for bit, never converted).
    be_.copy_from_host(id_data.data(), {.data = b->data(), .shape = local, .dtype = DType::fp32});
    return b;
  }
  auto b = allocate(local, dtype_of(t), MemoryCategory::activations);
  if (dtype_of(t) == DType::fp32) {
    be_.copy_from_host(data.data(), view_of(t, *b, local));
    return b;
  }
  Buffer upload = buffer(local, DType::fp32, MemoryCategory::temporaries);
  be_.copy_from_host(data.data(), upload.view(local, DType::fp32));
  be_.convert(upload.view(local, DType::fp32), view_of(t, *b, local));
  return b;
}

inline Executor::Read Executor::read_input(std::size_t k, std::size_t i) {
  const Op& op = g_.ops()[k];
  const TensorId t = op.inputs[i];
  const TensorInfo& info = g_.tensor(t);
  const ShardingSpec& want = st_[k].sharding.inputs[i];
  const ShardingSpec& have = stored_[t.index()];
  if (info.kind == TensorKind::parameter) {
    Param& p = param_of(t);
    std::shared_ptr<Buffer> full = parameter_local(p);
    if (want == have) return {full, nullptr, false};
    return {std::make_shared<Buffer>(move(p.global, full->view(p.local, compute_), have, want,
                                          MemoryCategory::temporaries)),
            nullptr, true};
  }
  if (!info.producer.valid()) {  // graph input: slice the host data in the wanted spec
    auto b = host_slice(t, want);
    return {b, b, false};
  }
  CARTO_CHECK(act_[t.index()] != nullptr, "op ", k, " reads tensor ", t.value,
              " after it was freed");
  std::shared_ptr<Buffer> value = materialize(t, act_[t.index()]);
  if (want == have) return {value, act_[t.index()], false};
  return {std::make_shared<Buffer>(move(info.shape, view_of(t, *value, local_of(t, have)), have,
                                        want, MemoryCategory::activations)),
          act_[t.index()], true};
}

// The input again in backward: a saved moved copy, or the stored storage (plus the move), or a
// parameter / host input re-read.
inline std::shared_ptr<Buffer> Executor::reread(std::size_t k, std::size_t i) {
  const Op& op = g_.ops()[k];
  const TensorId t = op.inputs[i];
  const TensorInfo& info = g_.tensor(t);
  const ShardingSpec& want = st_[k].sharding.inputs[i];
  const ShardingSpec& have = stored_[t.index()];
  const SavedInput& s = saved_[k].inputs[i];
  if (info.kind == TensorKind::parameter) return read_input(k, i).buffer;
  if (!info.producer.valid()) return s.buffer != nullptr ? s.buffer : host_slice(t, want);
  CARTO_CHECK(s.buffer != nullptr, "op ", k, " input ", i, " was not saved for backward");
  if (s.moved_copy) return s.buffer;
  std::shared_ptr<Buffer> value = materialize(t, s.buffer);
  if (want == have) return value;
  return std::make_shared<Buffer>(move(info.shape, view_of(t, *value, local_of(t, have)), have,
                                       want, MemoryCategory::temporaries));
}

}  // namespace carto
