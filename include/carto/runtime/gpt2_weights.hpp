// carto/runtime/gpt2_weights.hpp — GPT-2 checkpoints (safetensors, the model hubs' names) in and
// out of an Executor built from build_gpt.
//
// Design note: build_gpt creates its parameters in a fixed order (carto/layers/gpt.hpp,
// embedding.hpp, transformer.hpp, attention.hpp): wte (V, H), wpe (S, H); per block ln_1 gamma and
// beta (H), the fused QKV weight (H, 3H) and bias (3H), the attention projection (H, H) and bias,
// ln_2 gamma and beta, the MLP up projection (H, 4H) and bias, its down projection (4H, H) and
// bias; then ln_f gamma and beta; the LM head is tied to wte. gpt2_tensors pairs each with the
// hub's name (`wte.weight`, `h.{i}.attn.c_attn.weight`, ..., `ln_f.bias`) and checks every
// shape. The hubs store linear weights as (in, out) (Conv1D), as carto does, so only the fused
// QKV weight and bias change: the hub orders the fused dim [Q | K | V] (column p·H + n·d + e for
// part p, head n, element e, d = H / heads), carto per head (column n·3d + p·d + e, graph.hpp's
// split_heads note). Loading: each rank reads from the file only the box of the global tensor it
// stores (device_slice of the executor's stored spec), one seek per contiguous run, the QKV
// columns in runs of at most d, converted from the file's dtype (F32 or BF16) to fp32 and set
// through Executor::set_parameter_local (which rounds to the run's compute dtype and keeps only
// the ZeRO chunk). Saving gathers every parameter whole (Executor::parameter, collective: every
// rank calls save_gpt2) and rank 0 (device 0) writes the file, atomically (safetensors::write).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "carto/error.hpp"
#include "carto/layers/gpt.hpp"
#include "carto/runtime/executor.hpp"
#include "carto/runtime/safetensors.hpp"

namespace carto {

struct Gpt2Tensor {
  TensorId id{};
  std::string name;                 // the hub's name
  std::vector<std::int64_t> shape;  // global shape
  bool fused_qkv = false;           // the fused dim (the last) is reordered
};

// The hub name of every parameter of build_gpt(c, ...), in the graph's parameter order.
inline std::vector<Gpt2Tensor> gpt2_tensors(const Graph& g, const GptConfig& c) {
  CARTO_CHECK(c.tied_lm_head, "GPT-2 checkpoints tie the LM head to wte; model '", c.name,
              "' has an untied head");
  const std::int64_t h = c.hidden, f = c.ffn_ratio * c.hidden;
  std::vector<Gpt2Tensor> want;
  want.push_back({{}, "wte.weight", {c.vocab, h}, false});
  want.push_back({{}, "wpe.weight", {c.seq, h}, false});
  for (std::int64_t i = 0; i < c.layers; ++i) {
    const std::string p = "h." + std::to_string(i) + ".";
    want.push_back({{}, p + "ln_1.weight", {h}, false});
    want.push_back({{}, p + "ln_1.bias", {h}, false});
    want.push_back({{}, p + "attn.c_attn.weight", {h, 3 * h}, true});
    want.push_back({{}, p + "attn.c_attn.bias", {3 * h}, true});
    want.push_back({{}, p + "attn.c_proj.weight", {h, h}, false});
    want.push_back({{}, p + "attn.c_proj.bias", {h}, false});
    want.push_back({{}, p + "ln_2.weight", {h}, false});
    want.push_back({{}, p + "ln_2.bias", {h}, false});
    want.push_back({{}, p + "mlp.c_fc.weight", {h, f}, false});
    want.push_back({{}, p + "mlp.c_fc.bias", {f}, false});
    want.push_back({{}, p + "mlp.c_proj.weight", {f, h}, false});
    want.push_back({{}, p + "mlp.c_proj.bias", {h}, false});
  }
  want.push_back({{}, "ln_f.weight", {h}, false});
  want.push_back({{}, "ln_f.bias", {h}, false});
  std::size_t k = 0;
  for (std::size_t t = 0; t < g.tensors().size(); ++t) {
    const TensorInfo& info = g.tensors()[t];
    if (info.kind != TensorKind::parameter) continue;
    CARTO_CHECK(k < want.size(), "the graph has more parameters than GPT-2 model '", c.name, "' (",
                want.size(), "); build it with build_gpt from the same config");
    std::vector<std::int64_t> shape;
    for (const DimExtent& d : info.shape.dims()) shape.push_back(d.extent);
    CARTO_CHECK(shape == want[k].shape, "graph parameter ", t, " (", want[k].name, ") has shape ",
                info.shape, "; GPT-2 model '", c.name, "' needs ",
                safetensors::detail::shape_text(want[k].shape));
    want[k].id = TensorId{static_cast<std::int32_t>(t)};
    ++k;
  }
  CARTO_CHECK(k == want.size(), "the graph has ", k, " parameters; GPT-2 model '", c.name, "' has ",
              want.size(), "; build it with build_gpt from the same config");
  return want;
}

namespace gpt2_detail {
// The hub column of carto's fused QKV column c (hidden h, head size d).
inline std::int64_t hub_column(std::int64_t c, std::int64_t h, std::int64_t d) {
  const std::int64_t n = c / (3 * d), p = (c % (3 * d)) / d, e = c % d;
  return p * h + n * d + e;
}
}  // namespace gpt2_detail

// Loads the checkpoint at `path` into the executor (built from build_gpt(c, ...)); each rank reads
// only its own shards. Not collective.
inline void load_gpt2(Executor& ex, const std::string& path, const GptConfig& c) {
  safetensors::Reader file(path);
  const std::int64_t h = c.hidden, d = c.hidden / c.heads;
  for (const Gpt2Tensor& t : gpt2_tensors(ex.graph(), c)) {
    const safetensors::Entry& e = file.require(t.name, t.shape);
    const TensorShape& global = ex.graph().tensor(t.id).shape;
    const Slice s = device_slice(global, ex.stored_spec(t.id), ex.mesh(), ex.device());
    std::vector<std::int64_t> off(s.offset.begin(), s.offset.end());
    std::vector<std::int64_t> ext(s.extent.begin(), s.extent.end());
    if (!t.fused_qkv) {
      ex.set_parameter_local(t.id, file.read_box(e, off, ext));
      continue;
    }
    // Runs of at most d carto columns, each contiguous in the hub's order.
    const std::size_t last = off.size() - 1;
    const std::int64_t c0 = off[last], cols = ext[last];
    std::int64_t rows = 1;
    for (std::size_t i = 0; i < last; ++i) rows *= ext[i];
    std::vector<float> local(static_cast<std::size_t>(rows * cols));
    for (std::int64_t col = c0; col < c0 + cols;) {
      const std::int64_t len = std::min(d - col % d, c0 + cols - col);
      std::vector<std::int64_t> o = off, x = ext;
      o[last] = gpt2_detail::hub_column(col, h, d);
      x[last] = len;
      const std::vector<float> piece = file.read_box(e, o, x);
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t j = 0; j < len; ++j)
          local[static_cast<std::size_t>(r * cols + (col - c0) + j)] =
              piece[static_cast<std::size_t>(r * len + j)];
      col += len;
    }
    ex.set_parameter_local(t.id, local);
  }
}

// Saves the executor's parameters (under mixed_bf16 the fp32 masters) to `path` in `dtype` (fp32
// or bf16) with the hub's names and layout. Collective: every rank calls it; device 0 writes.
inline void save_gpt2(Executor& ex, const std::string& path, const GptConfig& c,
                      DType dtype = DType::fp32) {
  const std::int64_t h = c.hidden, d = c.hidden / c.heads;
  std::vector<safetensors::Tensor> out;
  for (const Gpt2Tensor& t : gpt2_tensors(ex.graph(), c)) {
    std::vector<float> v = ex.parameter(t.id);  // collective
    if (ex.device() != 0) continue;
    if (t.fused_qkv) {
      const std::int64_t cols = 3 * h;
      const std::int64_t rows = static_cast<std::int64_t>(v.size()) / cols;
      std::vector<float> hub(v.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t col = 0; col < cols; ++col)
          hub[static_cast<std::size_t>(r * cols + gpt2_detail::hub_column(col, h, d))] =
              v[static_cast<std::size_t>(r * cols + col)];
      v = std::move(hub);
    }
    out.push_back({t.name, t.shape, std::move(v)});
  }
  if (ex.device() == 0) safetensors::write(path, out, dtype);
}

}  // namespace carto
