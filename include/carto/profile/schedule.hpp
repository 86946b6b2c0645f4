// carto/profile/schedule.hpp — one training step walked op by op: FLOPs, liveness, peak memory.
//
// Design note (DESIGN.md §5): the step's schedule is forward in graph order, backward in reverse,
// then the optimizer. The walk allocates and frees bytes in five categories and records the live
// bytes at every op (after the op's allocations, before its frees); the peak is the maximum over
// that timeline, never a sum of maxima.
//  - parameters and optimizer states are live throughout (optimizer_bytes_per_param: fp32 master +
//    AdamW m, v in mixed precision, ZeRO §3.1);
//  - a parameter's gradient is allocated by the first backward op that produces it and lives until
//    the optimizer step;
//  - forward: an op's output is allocated when it runs (a view allocates nothing: it aliases its
//    input's storage); a storage that some op saves is "activations" and lives until the backward
//    of the first op (in graph order) that saves it; any other is "temporaries" and is freed after
//    its last forward use; private saved state (masks, statistics) lives until the op's backward;
//  - backward of an op: allocates the gradients of its inputs (accumulated when already allocated;
//    a view renames its output's gradient), its workspace, then frees its output's gradient, its
//    workspace and the storages whose last saver it is;
//  - a checkpointed group (every transformer_block under Recompute::full) keeps only its inputs
//  from
//    outside the group during forward (its ops save nothing, their masks are transient); just
//    before the backward of its last op its forward runs again (phase `recompute`, FLOPs counted in
//    flops.recompute) with normal saving, so its activations live only while its backward runs.
//
// Per group (layer) the profile reports FLOPs, the parameters first used there and the bytes it
// keeps from forward to backward (a storage saved by several groups counts in the first one).
// activation_bytes_per_layer is the largest such figure over transformer blocks.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/profile/options.hpp"
#include "carto/util/checked.hpp"

namespace carto {

enum class MemoryCategory : std::uint8_t {
  parameters,
  gradients,
  optimizer,
  activations,
  temporaries
};
enum class Phase : std::uint8_t { forward, recompute, backward, optimizer };

constexpr std::string_view to_string_view(Phase p) {
  switch (p) {
    case Phase::forward: return "forward";
    case Phase::recompute: return "recompute";
    case Phase::backward: return "backward";
    case Phase::optimizer: return "optimizer";
  }
  return "?";
}

namespace detail {
// total += value, or a carto::Error when a step's FLOP or byte total no longer fits in int64.
constexpr void grow(std::int64_t& total, std::int64_t value) {
  total = checked_add(total, value, "a FLOP or byte total of a training step");
}
}  // namespace detail

struct MemoryBytes {
  std::int64_t parameters = 0;
  std::int64_t gradients = 0;
  std::int64_t optimizer = 0;
  std::int64_t activations = 0;  // saved for backward
  std::int64_t temporaries =
      0;  // everything else: unsaved outputs, gradients of activations, workspace
  [[nodiscard]] constexpr std::int64_t total() const {
    std::int64_t sum = 0;
    for (std::int64_t v : {parameters, gradients, optimizer, activations, temporaries}) {
      sum = checked_add(sum, v, "the live bytes of a training step");
    }
    return sum;
  }
  constexpr std::int64_t& operator[](MemoryCategory c) {
    switch (c) {
      case MemoryCategory::parameters: return parameters;
      case MemoryCategory::gradients: return gradients;
      case MemoryCategory::optimizer: return optimizer;
      case MemoryCategory::activations: return activations;
      case MemoryCategory::temporaries: return temporaries;
    }
    return temporaries;
  }
  friend constexpr bool operator==(const MemoryBytes&, const MemoryBytes&) = default;
};

struct TimelineEvent {
  Phase phase = Phase::forward;
  OpId op{};                // invalid for the optimizer step
  std::int32_t group = -1;  // the op's group, or -1
  MemoryBytes live{};
};

struct LayerProfile {
  LayerName name{};
  GroupKind kind = GroupKind::layer;
  std::int64_t flops_forward = 0;
  std::int64_t flops_backward_input = 0;
  std::int64_t flops_backward_weight = 0;
  std::int64_t flops_recompute = 0;
  std::int64_t matmul_flops_forward = 0;
  std::int64_t saved_bytes = 0;  // kept from forward to backward under the schedule
  std::int64_t params = 0;       // parameters first used in this layer
  [[nodiscard]] constexpr std::int64_t flops_backward() const {
    return checked_add(flops_backward_input, flops_backward_weight, "the backward FLOPs of an op");
  }
};

struct StepFlops {
  std::int64_t forward = 0;
  std::int64_t backward_input = 0;
  std::int64_t backward_weight = 0;
  std::int64_t backward = 0;
  std::int64_t recompute = 0;
  std::int64_t step = 0;  // forward + backward + recompute
  std::int64_t matmul_forward = 0;
  std::int64_t matmul_backward = 0;
  std::int64_t matmul_recompute = 0;
  std::int64_t matmul_step = 0;  // what Narayanan et al. 2021 / Korthikanti et al. 2022 count
};

struct StepMemory {
  std::int64_t params_bytes = 0;
  std::int64_t grads_bytes = 0;
  std::int64_t optimizer_bytes = 0;
  std::int64_t activation_bytes_per_layer = 0;  // saved by one transformer block (the largest)
  std::int64_t activation_bytes = 0;            // saved by the whole model at the end of forward
  std::int64_t peak_bytes = 0;
  MemoryBytes peak{};          // the live bytes by category at the peak
  std::size_t peak_event = 0;  // index into ModelProfile::timeline
};

struct ModelProfile {
  std::int64_t params = 0;
  StepFlops flops{};
  StepMemory memory{};
  std::vector<LayerProfile> layers{};
  std::vector<TimelineEvent> timeline{};
};

namespace detail {

inline constexpr std::int32_t kNever = std::numeric_limits<std::int32_t>::max();

class StepWalk {
 public:
  constexpr StepWalk(const Graph& g, const ProfileOptions& options) : g_(g), options_(options) {}

  constexpr ModelProfile run() {
    prepare();
    forward();
    result_.memory.activation_bytes = live_.activations;
    backward();
    optimizer();
    finish();
    return std::move(result_);
  }

 private:
  [[nodiscard]] constexpr std::size_t storage(TensorId t) const {
    return g_.tensor(t).storage.index();
  }
  [[nodiscard]] constexpr bool is_param(TensorId t) const {
    return g_.tensor(t).kind == TensorKind::parameter;
  }
  [[nodiscard]] constexpr std::int32_t producer_of_storage(std::size_t s) const {
    return g_.tensors()[s].producer.value;  // -1 for graph inputs
  }
  [[nodiscard]] constexpr std::int32_t checkpoint_group(std::size_t k) const {
    const std::int32_t grp = g_.ops()[k].group;
    if (options_.recompute != Recompute::full || grp < 0) return -1;
    return g_.groups()[static_cast<std::size_t>(grp)].kind == GroupKind::transformer_block ? grp
                                                                                           : -1;
  }
  [[nodiscard]] constexpr const OpGroup& group(std::int32_t grp) const {
    return g_.groups()[static_cast<std::size_t>(grp)];
  }

  constexpr void alloc(std::size_t s, MemoryCategory c) {
    if (alive_[s]) return;
    alive_[s] = true;
    category_[s] = c;
    grow(live_[c], bytes_[s]);
  }
  constexpr void release(std::size_t s) {
    if (!alive_[s]) return;
    alive_[s] = false;
    live_[category_[s]] -= bytes_[s];
  }
  constexpr void event(Phase phase, std::int32_t op) {
    const std::int32_t grp = op >= 0 ? g_.ops()[static_cast<std::size_t>(op)].group : -1;
    result_.timeline.push_back(
        TimelineEvent{.phase = phase, .op = OpId{op}, .group = grp, .live = live_});
    if (live_.total() > result_.memory.peak_bytes) {
      result_.memory.peak_bytes = live_.total();
      result_.memory.peak = live_;
      result_.memory.peak_event = result_.timeline.size() - 1;
    }
  }

  constexpr void prepare() {
    const std::size_t n = g_.num_ops();
    const std::size_t t = g_.tensors().size();
    bytes_.assign(t, 0);
    alive_.assign(t, false);
    category_.assign(t, MemoryCategory::temporaries);
    last_use_.assign(t, -1);
    keep_.assign(t, kNever);
    grad_.assign(t, false);
    private_live_.assign(n, false);
    costs_.reserve(n);
    for (std::size_t i = 0; i < t; ++i) bytes_[i] = tensor_bytes(g_.tensors()[i]);
    for (std::size_t k = 0; k < n; ++k) {
      costs_.push_back(op_cost(g_, OpId{static_cast<std::int32_t>(k)}, options_.layernorm_stats));
      const Op& op = g_.ops()[k];
      const auto kk = static_cast<std::int32_t>(k);
      last_use_[storage(op.output)] = std::max(last_use_[storage(op.output)], kk);
      for (TensorId in : op.inputs) {
        if (!is_param(in)) last_use_[storage(in)] = std::max(last_use_[storage(in)], kk);
      }
      const std::int32_t grp = checkpoint_group(k);
      if (grp < 0) {
        for (TensorId sv : saved_tensors(g_, op))
          keep_[storage(sv)] = std::min(keep_[storage(sv)], kk);
      } else {
        for (TensorId in : op.inputs) {
          if (!is_param(in) && producer_of_storage(storage(in)) < group(grp).first_op) {
            keep_[storage(in)] = std::min(keep_[storage(in)], group(grp).first_op);
          }
        }
      }
    }
    // Parameters, optimizer states and model totals.
    for (std::size_t i = 0; i < t; ++i) {
      if (g_.tensors()[i].kind != TensorKind::parameter) continue;
      grow(result_.params, g_.tensors()[i].shape.numel());
      grow(live_.parameters, bytes_[i]);
      grow(result_.memory.grads_bytes, bytes_[i]);
    }
    result_.memory.params_bytes = live_.parameters;
    live_.optimizer = checked_mul(result_.params, optimizer_bytes_per_param(options_.precision),
                                  "the optimizer state bytes of a model");
    result_.memory.optimizer_bytes = live_.optimizer;
    // Layers.
    std::vector<bool> param_seen(t, false);
    for (const OpGroup& grp : g_.groups()) {
      result_.layers.push_back(LayerProfile{.name = grp.name, .kind = grp.kind});
    }
    for (std::size_t k = 0; k < n; ++k) {
      const Op& op = g_.ops()[k];
      const OpCost& c = costs_[k];
      grow(result_.flops.forward, c.flops_forward);
      grow(result_.flops.backward_input, c.flops_backward_input);
      grow(result_.flops.backward_weight, c.flops_backward_weight);
      if (c.matmul) {
        grow(result_.flops.matmul_forward, c.flops_forward);
        grow(result_.flops.matmul_backward, c.flops_backward());
      }
      if (op.group < 0) continue;
      LayerProfile& layer = result_.layers[static_cast<std::size_t>(op.group)];
      grow(layer.flops_forward, c.flops_forward);
      grow(layer.flops_backward_input, c.flops_backward_input);
      grow(layer.flops_backward_weight, c.flops_backward_weight);
      if (c.matmul) grow(layer.matmul_flops_forward, c.flops_forward);
      if (checkpoint_group(k) >= 0) {
        grow(layer.flops_recompute, c.flops_forward);
      } else {
        grow(layer.saved_bytes, c.private_saved_bytes);
      }
      for (TensorId in : op.inputs) {
        if (is_param(in) && !param_seen[in.index()]) {
          param_seen[in.index()] = true;
          grow(layer.params, g_.tensor(in).shape.numel());
        }
      }
    }
    for (std::size_t s = 0; s < t; ++s) {
      if (keep_[s] == kNever) continue;
      const std::int32_t grp = g_.ops()[static_cast<std::size_t>(keep_[s])].group;
      if (grp >= 0) grow(result_.layers[static_cast<std::size_t>(grp)].saved_bytes, bytes_[s]);
    }
    for (const LayerProfile& layer : result_.layers) {
      if (layer.kind == GroupKind::transformer_block) {
        result_.memory.activation_bytes_per_layer =
            std::max(result_.memory.activation_bytes_per_layer, layer.saved_bytes);
      }
    }
  }

  [[nodiscard]] constexpr MemoryCategory forward_category(std::size_t s) const {
    return keep_[s] != kNever ? MemoryCategory::activations : MemoryCategory::temporaries;
  }

  constexpr void forward() {
    // Graph inputs (token ids, a Sequential's input) exist before the step.
    for (std::size_t s = 0; s < g_.tensors().size(); ++s) {
      const TensorInfo& ti = g_.tensors()[s];
      if (ti.kind != TensorKind::parameter && !ti.producer.valid() && last_use_[s] >= 0) {
        alloc(s, forward_category(s));
      }
    }
    for (std::size_t k = 0; k < g_.num_ops(); ++k) {
      const Op& op = g_.ops()[k];
      const auto kk = static_cast<std::int32_t>(k);
      if (op.kind != OpKind::view) alloc(storage(op.output), forward_category(storage(op.output)));
      const std::int64_t priv = costs_[k].private_saved_bytes;
      const bool transient = checkpoint_group(k) >= 0;
      grow(live_[transient ? MemoryCategory::temporaries : MemoryCategory::activations], priv);
      private_live_[k] = !transient && priv > 0;
      event(Phase::forward, kk);
      if (transient) live_.temporaries -= priv;
      auto maybe_free = [&](TensorId x) {
        const std::size_t s = storage(x);
        if (!is_param(x) && last_use_[s] == kk && keep_[s] == kNever) release(s);
      };
      for (TensorId in : op.inputs) maybe_free(in);
      maybe_free(op.output);
    }
  }

  constexpr void recompute(std::int32_t grp_index) {
    const OpGroup& grp = group(grp_index);
    auto own = [&](TensorId x) {
      return !is_param(x) && producer_of_storage(storage(x)) >= grp.first_op;
    };
    // Liveness inside the group: a saved storage produced here lives until its first saver's
    // backward, any other until its last use here.
    for (std::int32_t r = grp.first_op; r < grp.end_op; ++r) {
      const Op& op = g_.ops()[static_cast<std::size_t>(r)];
      for (TensorId sv : saved_tensors(g_, op)) {
        if (own(sv)) keep_[storage(sv)] = std::min(keep_[storage(sv)], r);
      }
      last_use_[storage(op.output)] = r;
      for (TensorId in : op.inputs) {
        if (own(in)) last_use_[storage(in)] = r;
      }
    }
    for (std::int32_t r = grp.first_op; r < grp.end_op; ++r) {
      const auto k = static_cast<std::size_t>(r);
      const Op& op = g_.ops()[k];
      if (op.kind != OpKind::view) alloc(storage(op.output), forward_category(storage(op.output)));
      grow(live_.activations, costs_[k].private_saved_bytes);
      private_live_[k] = costs_[k].private_saved_bytes > 0;
      grow(result_.flops.recompute, costs_[k].flops_forward);
      if (costs_[k].matmul) grow(result_.flops.matmul_recompute, costs_[k].flops_forward);
      event(Phase::recompute, r);
      auto maybe_free = [&](TensorId x) {
        const std::size_t s = storage(x);
        if (own(x) && last_use_[s] == r && keep_[s] == kNever) release(s);
      };
      for (TensorId in : op.inputs) maybe_free(in);
      maybe_free(op.output);
    }
  }

  constexpr void backward() {
    const TensorId result = g_.result();
    grad_[result.index()] = true;
    grow(live_.temporaries, bytes_[result.index()]);
    std::vector<bool> param_grad(g_.tensors().size(), false);
    for (std::size_t k = g_.num_ops(); k-- > 0;) {
      const auto kk = static_cast<std::int32_t>(k);
      const std::int32_t ckpt = checkpoint_group(k);
      if (ckpt >= 0 && group(ckpt).end_op == kk + 1) recompute(ckpt);
      const Op& op = g_.ops()[k];
      const TensorId out = op.output;
      if (grad_[out.index()]) {
        auto needs_grad = [&](TensorId x) {
          return g_.tensor(x).kind == TensorKind::activation && g_.tensor(x).producer.valid();
        };
        if (op.kind == OpKind::view) {
          grad_[out.index()] = false;
          live_.temporaries -= bytes_[out.index()];
        }
        for (TensorId in : op.inputs) {
          if (is_param(in)) {
            if (!param_grad[in.index()]) {
              param_grad[in.index()] = true;
              grow(live_.gradients, bytes_[in.index()]);
            }
          } else if (needs_grad(in) && !grad_[in.index()]) {
            grad_[in.index()] = true;
            grow(live_.temporaries, bytes_[in.index()]);
          }
        }
        grow(live_.temporaries, costs_[k].temp_bytes);
        event(Phase::backward, kk);
        live_.temporaries -= costs_[k].temp_bytes;
        if (op.kind != OpKind::view) {
          grad_[out.index()] = false;
          live_.temporaries -= bytes_[out.index()];
        }
      }
      if (private_live_[k]) {
        live_.activations -= costs_[k].private_saved_bytes;
        private_live_[k] = false;
      }
      auto maybe_free = [&](TensorId x) {
        const std::size_t s = storage(x);
        if (!is_param(x) && keep_[s] == kk) {
          release(s);
          keep_[s] = kNever;
        }
      };
      for (TensorId in : op.inputs) maybe_free(in);
      maybe_free(out);
      if (ckpt >= 0 && group(ckpt).first_op == kk) {
        // The group's inputs from outside it were kept for its recomputation.
        for (std::int32_t r = kk; r < group(ckpt).end_op; ++r) {
          for (TensorId in : g_.ops()[static_cast<std::size_t>(r)].inputs) maybe_free(in);
        }
      }
    }
  }

  constexpr void optimizer() { event(Phase::optimizer, -1); }

  constexpr void finish() {
    StepFlops& f = result_.flops;
    constexpr std::string_view kWhat = "the FLOPs of a training step";
    f.backward = checked_add(f.backward_input, f.backward_weight, kWhat);
    f.step = checked_add(checked_add(f.forward, f.backward, kWhat), f.recompute, kWhat);
    f.matmul_step = checked_add(checked_add(f.matmul_forward, f.matmul_backward, kWhat),
                                f.matmul_recompute, kWhat);
  }

  const Graph& g_;
  const ProfileOptions& options_;
  ModelProfile result_{};
  MemoryBytes live_{};
  std::vector<OpCost> costs_{};
  std::vector<std::int64_t> bytes_{};
  std::vector<bool> alive_{};
  std::vector<MemoryCategory> category_{};
  std::vector<std::int32_t> last_use_{};  // last forward op that reads the storage (or produces it)
  std::vector<std::int32_t> keep_{};      // the backward op after which a saved storage is freed
  std::vector<bool> grad_{};              // whether an activation's gradient is allocated
  std::vector<bool> private_live_{};      // whether an op's private saved state is allocated
};

}  // namespace detail

// FLOPs, per-layer figures, the memory timeline and the peak of one training step of `g` (one
// device, unsharded). Uses options.precision (optimizer bytes), .recompute, .layernorm_stats; the
// graph already carries batch, dtypes and dropout.
constexpr ModelProfile profile_graph(const Graph& g, const ProfileOptions& options) {
  if (g.num_ops() == 0) detail::fail("carto: profile_graph of an empty graph; add ops first");
  return detail::StepWalk(g, options).run();
}

}  // namespace carto
