// carto/cost/reshard.hpp — the cheapest way to turn one sharding spec of a tensor into another.
//
// Design note. The nodes of the spec graph are every valid spec of one tensor on one mesh
// (enumerate_specs with Partial included); an edge is one step on one mesh axis x of size n, and a
// path's cost is the sum of its steps' times (collectives.hpp), so the shortest path is found
// exactly by Dijkstra (all costs are non-negative) and path costs obey the triangle inequality.
// Ties in time go to the path with fewer steps.
//
// Which single steps are exact data movements under carto's layout (spec/layout.hpp: a dim split
// over (a1, ..., ak) puts the device at coordinate c on shard ((c[a1]·n[a2] + c[a2])·n[a3] + ...),
// so the last axis of the list is the innermost split). Let L be the bytes one device holds.
//  - local slice: x unused (neither splitting a dim nor Partial) becomes the innermost split of dim
//    d: shard s becomes s·n + c[x], a sub-block of what the device already holds. Free. Adding x
//    anywhere but innermost would ask a device for a block it does not hold (shard c[x]·F + s is
//    another device's), so it is not a step.
//  - all-gather: x innermost in dim d is removed. The x-group (devices differing only in c[x])
//    holds sub-blocks s·n + 0 .. s·n + n-1, which are exactly the n consecutive pieces of the new
//    block s: one all-gather, S = n·L (the gathered output). Removing an axis that is *not*
//    innermost is not a single collective: with d split over (x, y) a device needs pieces held by
//    devices that also differ in c[y] (an all-gather followed by a permutation), so it is reached
//    through other steps (gather y, gather x, slice y) instead.
//  - all-to-all: x innermost in dim d1 becomes the innermost split of dim d2 != d1: within an
//    x-group every device sends device k the part of its block that is k's sub-block along d2 and
//    receives the pieces of its new block along d1. S = L (one rank's send buffer).
//  - all-reduce: x Partial is dropped. The x-group holds summands of the same block (x splits no
//    dim): summing them is exact. S = L.
//  - reduce-scatter: x Partial is dropped and becomes the innermost split of dim d: device c[x]
//    receives piece c[x] of the sum along d, i.e. shard s·n + c[x]. S = L (the full input).
//  - make Partial (only with ReshardOptions{.make_partial = MakePartial::allow}): x unused becomes
//    Partial; the device at c[x] = 0 keeps its block and the others hold zeros. Free, exact. No
//    collective creates a Partial value, so without this step a spec Partial over an axis that the
//    source is not Partial over is unreachable; plan() says so.
// With these steps, spec B is reachable from A iff B's Partial axes are among A's (or make_partial
// is allowed): reduce the others, gather every dim to R, then slice B's lists outer axis first
// (every prefix of an even split is even).
//
// Memory: the source buffer stays allocated until the move ends; each step writes a new buffer of
// its output size and frees its input unless the input is the source. A step also needs a staging
// buffer when the collective's rank-major chunks are not the local layout: an all-gather or a
// reduce-scatter along a dim that has a dim of local extent > 1 before it (its chunks interleave),
// and every all-to-all (it packs its send buffer). extra_memory_bytes is the peak over the steps of
// (the step's input unless it is the source) + output + staging, per device: the destination
// buffer is counted, the source is not. Dijkstra minimises time only; the memory is that of the
// path it returns.
//
// Caching: a ReshardGraph holds the graph of one (shape, dtype, mesh, hardware, options) and runs
// Dijkstra once per source spec, keeping the shortest-path tree, so every later query from that
// source is a lookup. A ReshardCache maps the (shape, dtype, mesh, hardware, options) key to its
// graph. Neither is thread-safe; give each thread its own.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "carto/cost/collectives.hpp"
#include "carto/cost/hardware.hpp"
#include "carto/error.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/enumerate.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

enum class ReshardKind : std::uint8_t {
  local_slice,
  all_gather,
  all_to_all,
  all_reduce,
  reduce_scatter,
  make_partial
};

constexpr std::string_view to_string_view(ReshardKind kind) {
  switch (kind) {
    case ReshardKind::local_slice: return "local_slice";
    case ReshardKind::all_gather: return "all_gather";
    case ReshardKind::all_to_all: return "all_to_all";
    case ReshardKind::all_reduce: return "all_reduce";
    case ReshardKind::reduce_scatter: return "reduce_scatter";
    case ReshardKind::make_partial: return "make_partial";
  }
  return "?";
}

// The collective a step runs, if any.
constexpr std::optional<Collective> collective_of(ReshardKind kind) {
  switch (kind) {
    case ReshardKind::all_gather: return Collective::all_gather;
    case ReshardKind::all_to_all: return Collective::all_to_all;
    case ReshardKind::all_reduce: return Collective::all_reduce;
    case ReshardKind::reduce_scatter: return Collective::reduce_scatter;
    case ReshardKind::local_slice:
    case ReshardKind::make_partial: return std::nullopt;
  }
  return std::nullopt;
}

enum class MakePartial : std::uint8_t { forbid, allow };

struct ReshardOptions {
  MakePartial make_partial = MakePartial::forbid;
  friend constexpr bool operator==(const ReshardOptions&, const ReshardOptions&) = default;
};

inline constexpr std::size_t kNoDim = static_cast<std::size_t>(-1);

// One step of a move.
struct ReshardStep {
  ReshardKind kind = ReshardKind::local_slice;
  AxisName axis{};
  std::size_t dim = kNoDim;     // slice/reduce-scatter: the dim x now splits; gather and
                                // all-to-all: the dim x leaves; all-reduce/make-partial: kNoDim
  std::size_t to_dim = kNoDim;  // all-to-all: the dim x joins
  std::int64_t bytes = 0;       // the collective's S (nccl-tests convention); 0 for local steps
  double time_s = 0;
  std::int64_t extra_bytes = 0;  // per device, live during the step beyond the source buffer
  ShardingSpec after{};
};

struct ReshardPlan {
  ShardingSpec from{};
  ShardingSpec to{};
  std::vector<ReshardStep> steps{};
  double time_s = 0;
  std::int64_t extra_memory_bytes = 0;  // peak over the steps of extra_bytes
};

// An edge of the spec graph: one step out of a spec.
struct ReshardEdge {
  std::size_t to = 0;  // node index
  ReshardKind kind = ReshardKind::local_slice;
  std::size_t axis = 0;  // mesh axis index
  std::size_t dim = kNoDim;
  std::size_t to_dim = kNoDim;
  std::int64_t bytes = 0;
  double time_s = 0;
};

class ReshardGraph {
 public:
  ReshardGraph(const TensorShape& shape, DType dtype, const DeviceMesh& mesh,
               const HardwareProfile& hw, ReshardOptions options = {})
      : shape_(shape), dtype_(dtype), mesh_(mesh), options_(options) {
    check_hardware_profile(hw, hw.name);
    for (std::size_t i = 0; i < mesh.num_axes(); ++i)
      links_.push_back(link_cost(axis_link(mesh, i, hw)));
    specs_ = enumerate_specs(shape, mesh, {.partial = PartialSpecs::include});
    index_.assign(std::size_t{1} << (kCodeBits * mesh.num_axes()), kAbsent);
    for (std::size_t i = 0; i < specs_.size(); ++i) index_[code(specs_[i])] = i;
    for (const ShardingSpec& s : specs_) {
      std::int64_t slices = 1;
      for (std::size_t d = 0; d < s.rank(); ++d) slices *= split_factor(s.dims()[d], mesh);
      local_bytes_.push_back(shape.numel() / slices * size_bytes(dtype));
    }
    edges_.resize(specs_.size());
    for (std::size_t i = 0; i < specs_.size(); ++i) build_edges(i);
    trees_.resize(specs_.size());
  }

  [[nodiscard]] std::size_t size() const { return specs_.size(); }
  [[nodiscard]] const std::vector<ShardingSpec>& specs() const { return specs_; }
  [[nodiscard]] const ShardingSpec& spec(std::size_t i) const { return specs_.at(i); }
  [[nodiscard]] const TensorShape& shape() const { return shape_; }
  [[nodiscard]] const DeviceMesh& mesh() const { return mesh_; }
  [[nodiscard]] DType dtype() const { return dtype_; }
  // Bytes one device holds under spec i.
  [[nodiscard]] std::int64_t local_bytes(std::size_t i) const { return local_bytes_.at(i); }
  // The single steps out of spec i.
  [[nodiscard]] const std::vector<ReshardEdge>& edges(std::size_t i) const { return edges_.at(i); }

  [[nodiscard]] std::optional<std::size_t> find(const ShardingSpec& spec) const {
    if (spec.rank() != shape_.rank() || !validate(spec, mesh_).ok()) return std::nullopt;
    const std::size_t i = index_[code(spec)];
    if (i == kAbsent) return std::nullopt;
    return i;
  }
  // The node of a spec; an invalid spec throws naming the spec, the shape and the mesh.
  [[nodiscard]] std::size_t index(const ShardingSpec& spec,
                                  std::string_view role = "tensor") const {
    check_spec(shape_, spec, mesh_, role);
    return index_[code(spec)];
  }

  // Least time from spec `from` to spec `to` (node indices); +infinity when unreachable.
  [[nodiscard]] double time(std::size_t from, std::size_t to) { return tree(from).time.at(to); }
  [[nodiscard]] bool reachable(std::size_t from, std::size_t to) {
    return tree(from).time.at(to) != kInfinity;
  }

  [[nodiscard]] ReshardPlan plan(const ShardingSpec& from, const ShardingSpec& to) {
    ReshardPlan p = plan(index(from, "reshard source"), index(to, "reshard target"));
    p.from = from;
    p.to = to;
    return p;
  }

  [[nodiscard]] ReshardPlan plan(std::size_t from, std::size_t to) {
    const Tree& t = tree(from);
    if (t.time.at(to) == kInfinity) unreachable(from, to);
    std::vector<const ReshardEdge*> path;
    for (std::size_t v = to; v != from;) {
      const ReshardEdge* e = t.via[v];
      path.push_back(e);
      v = t.parent[v];
    }
    ReshardPlan p{.from = specs_[from], .to = specs_[to]};
    std::size_t at = from;
    for (std::size_t k = path.size(); k-- > 0;) {
      const ReshardEdge& e = *path[k];
      const std::int64_t in = at == from ? 0 : local_bytes_[at];
      const std::int64_t extra = in + local_bytes_[e.to] + staging_bytes(at, e);
      p.steps.push_back({.kind = e.kind,
                         .axis = mesh_.axis(e.axis).name,
                         .dim = e.dim,
                         .to_dim = e.to_dim,
                         .bytes = e.bytes,
                         .time_s = e.time_s,
                         .extra_bytes = extra,
                         .after = specs_[e.to]});
      p.time_s += e.time_s;
      p.extra_memory_bytes = std::max(p.extra_memory_bytes, extra);
      at = e.to;
    }
    return p;
  }

 private:
  static constexpr std::size_t kCodeBits = 5;  // per mesh axis: 0 = R, 1 = P, 2 + d·3 + position
  static constexpr std::size_t kAbsent = static_cast<std::size_t>(-1);
  static constexpr double kInfinity = std::numeric_limits<double>::infinity();
  static_assert(2 + kMaxRank * kMaxMeshAxes <= (std::size_t{1} << kCodeBits));

  struct Tree {
    std::vector<double> time;
    std::vector<std::size_t> steps;
    std::vector<std::size_t> parent;
    std::vector<const ReshardEdge*> via;
  };

  // A canonical code: where each mesh axis sits. Equal specs (Partial as a set) get equal codes.
  [[nodiscard]] std::size_t code(const ShardingSpec& s) const {
    std::size_t c = 0;
    for (std::size_t a = 0; a < mesh_.num_axes(); ++a) {
      const AxisName& name = mesh_.axis(a).name;
      std::size_t where = 0;
      for (const AxisName& p : s.partial())
        if (p == name) where = 1;
      for (std::size_t d = 0; d < s.rank(); ++d)
        for (std::size_t k = 0; k < s.dims()[d].size(); ++k)
          if (s.dims()[d][k] == name) where = 2 + d * kMaxMeshAxes + k;
      c |= where << (kCodeBits * a);
    }
    return c;
  }

  void add_edge(std::size_t from, const ShardingSpec& to, ReshardEdge e) {
    if (to.rank() != shape_.rank()) return;
    const std::size_t j = index_[code(to)];
    if (j == kAbsent) return;  // an uneven split: not a spec of this tensor
    e.to = j;
    if (const auto c = collective_of(e.kind)) {
      e.time_s = collective_time(*c, mesh_.axis(e.axis).size, e.bytes, links_[e.axis]);
    }
    edges_[from].push_back(e);
  }

  static ShardingSpec without_partial(const ShardingSpec& s, const AxisName& x) {
    ShardingSpec out;
    for (const AxisList& d : s.dims()) out.add_dim(d);
    for (const AxisName& p : s.partial())
      if (!(p == x)) out.add_partial(p);
    return out;
  }
  static ShardingSpec with_dims(const ShardingSpec& s,
                                const StaticVector<AxisList, kMaxRank>& dims) {
    ShardingSpec out;
    for (const AxisList& d : dims) out.add_dim(d);
    for (const AxisName& p : s.partial()) out.add_partial(p);
    return out;
  }

  void build_edges(std::size_t i) {
    const ShardingSpec& s = specs_[i];
    const std::int64_t L = local_bytes_[i];
    const std::size_t r = s.rank();
    for (std::size_t a = 0; a < mesh_.num_axes(); ++a) {
      const AxisName& x = mesh_.axis(a).name;
      const std::int64_t n = mesh_.axis(a).size;
      bool partial = false;
      for (const AxisName& p : s.partial()) partial = partial || p == x;
      std::size_t dim = kNoDim;
      bool innermost = false;
      for (std::size_t d = 0; d < r; ++d) {
        const AxisList& list = s.dims()[d];
        for (std::size_t k = 0; k < list.size(); ++k) {
          if (list[k] == x) {
            dim = d;
            innermost = k + 1 == list.size();
          }
        }
      }
      if (partial) {
        add_edge(i, without_partial(s, x),
                 {.kind = ReshardKind::all_reduce, .axis = a, .bytes = L});
        for (std::size_t d = 0; d < r; ++d) {
          ShardingSpec t = without_partial(s, x);
          t.shard(TensorDim{d}, x);
          add_edge(i, t, {.kind = ReshardKind::reduce_scatter, .axis = a, .dim = d, .bytes = L});
        }
      } else if (dim == kNoDim) {
        for (std::size_t d = 0; d < r; ++d) {
          ShardingSpec t = s;
          t.shard(TensorDim{d}, x);
          add_edge(i, t, {.kind = ReshardKind::local_slice, .axis = a, .dim = d});
        }
        if (options_.make_partial == MakePartial::allow) {
          ShardingSpec t = s;
          t.add_partial(x);
          add_edge(i, t, {.kind = ReshardKind::make_partial, .axis = a});
        }
      } else if (innermost) {
        StaticVector<AxisList, kMaxRank> dims = s.dims();
        dims[dim].pop_back();
        add_edge(i, with_dims(s, dims),
                 {.kind = ReshardKind::all_gather, .axis = a, .dim = dim, .bytes = L * n});
        for (std::size_t d2 = 0; d2 < r; ++d2) {
          if (d2 == dim) continue;
          StaticVector<AxisList, kMaxRank> moved = dims;
          moved[d2].push_back(x);
          add_edge(
              i, with_dims(s, moved),
              {.kind = ReshardKind::all_to_all, .axis = a, .dim = dim, .to_dim = d2, .bytes = L});
        }
      }
    }
  }

  // Staging buffer of a step out of node `at` (see the design note).
  [[nodiscard]] std::int64_t staging_bytes(std::size_t at, const ReshardEdge& e) const {
    const ShardingSpec& s = specs_[at];
    auto interleaved = [&](std::size_t d) {
      for (std::size_t k = 0; k < d; ++k) {
        if (shape_.dims()[k].extent / split_factor(s.dims()[k], mesh_) > 1) return true;
      }
      return false;
    };
    switch (e.kind) {
      case ReshardKind::all_gather: return interleaved(e.dim) ? local_bytes_[e.to] : 0;
      case ReshardKind::reduce_scatter: return interleaved(e.dim) ? local_bytes_[at] : 0;
      case ReshardKind::all_to_all: return local_bytes_[at];
      case ReshardKind::local_slice:
      case ReshardKind::all_reduce:
      case ReshardKind::make_partial: return 0;
    }
    return 0;
  }

  const Tree& tree(std::size_t from) {
    if (from >= specs_.size())
      detail::fail("carto: reshard: spec index ", from, " is out of range (", specs_.size(),
                   " specs)");
    if (trees_[from]) return *trees_[from];
    auto t = std::make_unique<Tree>();
    const std::size_t n = specs_.size();
    t->time.assign(n, kInfinity);
    t->steps.assign(n, 0);
    t->parent.assign(n, kAbsent);
    t->via.assign(n, nullptr);
    using Item = std::tuple<double, std::size_t, std::size_t>;  // (time, steps, node)
    std::priority_queue<Item, std::vector<Item>, std::greater<>> queue;
    t->time[from] = 0;
    queue.emplace(0.0, 0, from);
    while (!queue.empty()) {
      const auto [time, steps, v] = queue.top();
      queue.pop();
      if (time != t->time[v] || steps != t->steps[v]) continue;  // a stale entry
      for (const ReshardEdge& e : edges_[v]) {
        const double nt = time + e.time_s;
        const std::size_t ns = steps + 1;
        if (nt < t->time[e.to] || (nt == t->time[e.to] && ns < t->steps[e.to])) {
          t->time[e.to] = nt;
          t->steps[e.to] = ns;
          t->parent[e.to] = v;
          t->via[e.to] = &e;
          queue.emplace(nt, ns, e.to);
        }
      }
    }
    trees_[from] = std::move(t);
    return *trees_[from];
  }

  [[noreturn]] void unreachable(std::size_t from, std::size_t to) const {
    const ShardingSpec& a = specs_[from];
    const ShardingSpec& b = specs_[to];
    std::string why = "no sequence of steps connects them";
    for (const AxisName& p : b.partial()) {
      bool in_source = false;
      for (const AxisName& q : a.partial()) in_source = in_source || q == p;
      if (!in_source) {
        why = detail::concat("the target is Partial over axis '", p,
                             "' and the source is not; no collective creates a Partial value "
                             "(ReshardOptions{.make_partial = MakePartial::allow} permits the "
                             "free local step that does)");
        break;
      }
    }
    detail::fail("carto: no resharding path from '", a, "' to '", b, "' of tensor ", shape_,
                 " on mesh ", mesh_, ": ", why);
  }

  TensorShape shape_;
  DType dtype_;
  DeviceMesh mesh_;
  ReshardOptions options_;
  std::vector<LinkCost> links_;
  std::vector<ShardingSpec> specs_;
  std::vector<std::size_t> index_;
  std::vector<std::int64_t> local_bytes_;
  std::vector<std::vector<ReshardEdge>> edges_;
  std::vector<std::unique_ptr<Tree>> trees_;
};

// Graphs keyed by (shape, dtype, mesh, hardware, options); plans by (from, to) within a graph.
class ReshardCache {
 public:
  ReshardGraph& graph(const TensorShape& shape, DType dtype, const DeviceMesh& mesh,
                      const HardwareProfile& hw, ReshardOptions options = {}) {
    // The hardware's part of the key: its JSON, written once per distinct profile.
    if (!(hw_ == hw) || hw_key_.empty()) {
      hw_ = hw;
      hw_key_ = to_json(hw).dump();
    }
    std::string key = detail::concat(shape, '|', dtype, '|', mesh, '|',
                                     static_cast<int>(options.make_partial), '|', hw_key_);
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      it = graphs_
               .emplace(std::move(key),
                        std::make_unique<ReshardGraph>(shape, dtype, mesh, hw, options))
               .first;
    }
    return *it->second;
  }

  ReshardPlan plan(const TensorShape& shape, DType dtype, const ShardingSpec& from,
                   const ShardingSpec& to, const DeviceMesh& mesh, const HardwareProfile& hw,
                   ReshardOptions options = {}) {
    return graph(shape, dtype, mesh, hw, options).plan(from, to);
  }

  [[nodiscard]] std::size_t size() const { return graphs_.size(); }

 private:
  std::map<std::string, std::unique_ptr<ReshardGraph>> graphs_;
  HardwareProfile hw_{};
  std::string hw_key_{};
};

// One plan without a cache (builds the graph of this tensor and runs one Dijkstra).
inline ReshardPlan reshard(const TensorShape& shape, DType dtype, const ShardingSpec& from,
                           const ShardingSpec& to, const DeviceMesh& mesh,
                           const HardwareProfile& hw, ReshardOptions options = {}) {
  ReshardGraph g(shape, dtype, mesh, hw, options);
  return g.plan(from, to);
}

}  // namespace carto
