// carto/spec/sharding.hpp — Shard / Replicate / Partial placements and ShardingSpec.
//
// Design note (see docs/architecture.md, "Specs"): a ShardingSpec of a rank-r tensor gives, for
// each tensor dim, the ordered list of mesh axes the dim is split over (empty = not split), plus
// the set of mesh axes over which the tensor is Partial (each device holds a summand; the logical
// value is their sum). Every mesh axis appears at most once in a spec; axes that appear nowhere are
// replicated. Splitting a dim over (a, b) means a is the outer and b the inner split: the shard
// index of a device along that dim is coord[a] * size[b] + coord[b].
//
// Validation against a shape and mesh reports the first problem as a SpecCheck value (so that
// static_assert can use it) and check_spec() turns it into a carto::Error naming the tensor, dim,
// sizes and spec.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <string_view>

#include "carto/error.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

using AxisList = StaticVector<AxisName, kMaxMeshAxes>;

class ShardingSpec {
 public:
  constexpr ShardingSpec() = default;

  // Every dim replicated, nothing partial.
  static constexpr ShardingSpec replicated(std::size_t rank) {
    ShardingSpec s;
    for (std::size_t i = 0; i < rank; ++i) s.dims_.push_back({});
    return s;
  }

  [[nodiscard]] constexpr std::size_t rank() const { return dims_.size(); }
  [[nodiscard]] constexpr const AxisList& axes(TensorDim d) const { return dims_[checked(d)]; }
  [[nodiscard]] constexpr const StaticVector<AxisList, kMaxRank>& dims() const { return dims_; }
  [[nodiscard]] constexpr const AxisList& partial() const { return partial_; }
  [[nodiscard]] constexpr bool is_partial() const { return !partial_.empty(); }
  [[nodiscard]] constexpr bool is_replicated() const {
    return !is_partial() &&
           std::all_of(dims_.begin(), dims_.end(), [](const AxisList& a) { return a.empty(); });
  }

  // Builders; they do not validate (see check_spec / validate).
  constexpr ShardingSpec& add_dim(const AxisList& axes = {}) {
    if (dims_.size() == kMaxRank) detail::fail("carto: a spec has at most ", kMaxRank, " dims");
    dims_.push_back(axes);
    return *this;
  }
  constexpr ShardingSpec& shard(TensorDim d, const AxisName& axis) {
    dims_[checked(d)].push_back(axis);
    return *this;
  }
  constexpr ShardingSpec& add_partial(const AxisName& axis) {
    partial_.push_back(axis);
    return *this;
  }
  constexpr ShardingSpec& clear_partial() {
    partial_.clear();
    return *this;
  }

  // Whether the mesh axis appears in this spec and where.
  [[nodiscard]] constexpr bool uses(const AxisName& axis) const {
    return std::find(partial_.begin(), partial_.end(), axis) != partial_.end() ||
           std::any_of(dims_.begin(), dims_.end(), [&](const AxisList& a) {
             return std::find(a.begin(), a.end(), axis) != a.end();
           });
  }

  // Equal when the per-dim ordered lists are equal and the partial axes form the same set.
  friend constexpr bool operator==(const ShardingSpec& a, const ShardingSpec& b) {
    if (!(a.dims_ == b.dims_) || a.partial_.size() != b.partial_.size()) return false;
    return std::all_of(a.partial_.begin(), a.partial_.end(), [&](const AxisName& x) {
      return std::find(b.partial_.begin(), b.partial_.end(), x) != b.partial_.end();
    });
  }

 private:
  [[nodiscard]] constexpr std::size_t checked(TensorDim d) const {
    if (d.value >= dims_.size()) {
      detail::fail("carto: dim index ", d.value, " is out of range for a rank-", dims_.size(),
                   " spec");
    }
    return d.value;
  }
  StaticVector<AxisList, kMaxRank> dims_;
  AxisList partial_;
};

// Text form: "S(dp),R,S(tp)", "S(dp,tp),R", "R,R|P(tp)"; a rank-0 spec prints as "" or "|P(dp)".
// Parsing lives in carto/spec/text.hpp.
inline std::ostream& operator<<(std::ostream& out, const ShardingSpec& spec) {
  auto list = [&out](const AxisList& axes) {
    out << '(';
    for (std::size_t i = 0; i < axes.size(); ++i) out << (i > 0 ? "," : "") << axes[i];
    out << ')';
  };
  for (std::size_t d = 0; d < spec.rank(); ++d) {
    if (d > 0) out << ',';
    const AxisList& axes = spec.dims()[d];
    if (axes.empty()) {
      out << 'R';
    } else {
      out << 'S';
      list(axes);
    }
  }
  if (spec.is_partial()) {
    out << "|P";
    list(spec.partial());
  }
  return out;
}
inline std::string to_string(const ShardingSpec& spec) { return detail::concat(spec); }

namespace detail {
struct AxisListPrinter {
  const AxisList& axes;
  friend std::ostream& operator<<(std::ostream& out, const AxisListPrinter& p) {
    for (std::size_t i = 0; i < p.axes.size(); ++i) out << (i > 0 ? "," : "") << p.axes[i];
    return out;
  }
};
}  // namespace detail

// ---- validation
// ----------------------------------------------------------------------------------

enum class SpecProblem : std::uint8_t {
  none,
  rank_mismatch,    // spec rank != shape rank
  unknown_axis,     // a spec axis is not in the mesh
  axis_used_twice,  // a mesh axis appears twice (in dims or partial)
  uneven_split,     // a dim's extent is not divisible by the product of its axes' sizes
};

struct SpecCheck {
  constexpr SpecCheck() = default;
  constexpr SpecCheck(SpecProblem p, std::size_t d = 0, AxisName a = {}, std::int64_t e = 0,
                      std::int64_t f = 0)
      : problem(p), dim(d), axis(a), extent(e), divisor(f) {}
  SpecProblem problem = SpecProblem::none;
  std::size_t dim = 0;       // offending tensor dim (or partial: kPartialDim)
  AxisName axis;             // offending axis, for unknown_axis / axis_used_twice
  std::int64_t extent = 0;   // for uneven_split
  std::int64_t divisor = 0;  // for uneven_split
  [[nodiscard]] constexpr bool ok() const { return problem == SpecProblem::none; }
};
inline constexpr std::size_t kPartialDim = static_cast<std::size_t>(-1);

// Product of the sizes of the listed axes (all must be in the mesh).
constexpr std::int64_t split_factor(const AxisList& axes, const DeviceMesh& mesh) {
  std::int64_t f = 1;
  for (const AxisName& a : axes) f *= mesh.size_of(a);
  return f;
}

// Checks a spec against a mesh alone (axes known, none used twice).
constexpr SpecCheck validate(const ShardingSpec& spec, const DeviceMesh& mesh) {
  StaticVector<AxisName, 2 * kMaxMeshAxes + kMaxRank * kMaxMeshAxes> seen;
  auto visit = [&](const AxisName& a, std::size_t dim) -> SpecCheck {
    if (!mesh.find(a)) return {SpecProblem::unknown_axis, dim, a};
    if (std::find(seen.begin(), seen.end(), a) != seen.end()) {
      return {SpecProblem::axis_used_twice, dim, a};
    }
    seen.push_back(a);
    return {};
  };
  for (std::size_t d = 0; d < spec.rank(); ++d) {
    for (const AxisName& a : spec.dims()[d]) {
      if (SpecCheck c = visit(a, d); !c.ok()) return c;
    }
  }
  for (const AxisName& a : spec.partial()) {
    if (SpecCheck c = visit(a, kPartialDim); !c.ok()) return c;
  }
  return {};
}

// Checks a spec against a shape and a mesh.
constexpr SpecCheck validate(const TensorShape& shape, const ShardingSpec& spec,
                             const DeviceMesh& mesh) {
  if (spec.rank() != shape.rank()) {
    return {SpecProblem::rank_mismatch, 0, AxisName{}, static_cast<std::int64_t>(shape.rank()),
            static_cast<std::int64_t>(spec.rank())};
  }
  if (SpecCheck c = validate(spec, mesh); !c.ok()) return c;
  for (std::size_t d = 0; d < spec.rank(); ++d) {
    const std::int64_t f = split_factor(spec.dims()[d], mesh);
    const std::int64_t e = shape.dims()[d].extent;
    if (e % f != 0) return {SpecProblem::uneven_split, d, AxisName{}, e, f};
  }
  return {};
}

namespace detail {
[[noreturn]] inline void spec_problem(std::string_view tensor, const TensorShape* shape,
                                      const ShardingSpec& spec, const DeviceMesh& mesh,
                                      const SpecCheck& check) {
  const std::string where =
      concat("carto: spec '", spec, "' of ", tensor,
             shape != nullptr ? concat(" ", *shape) : std::string(), " on mesh ", mesh, ": ");
  switch (check.problem) {
    case SpecProblem::rank_mismatch:
      fail(where, "the spec has ", check.divisor, " dims but the tensor has rank ", check.extent,
           "; give one placement (S(...) or R) per tensor dim");
    case SpecProblem::unknown_axis:
      fail(
          where, "axis '", check.axis, "' is not an axis of the mesh",
          check.dim == kPartialDim ? std::string(" (in P(...))") : concat(" (dim ", check.dim, ")"),
          "; the mesh axes are ", mesh);
    case SpecProblem::axis_used_twice:
      fail(where, "mesh axis '", check.axis, "' is used more than once",
           check.dim == kPartialDim ? std::string(" (again in P(...))")
                                    : concat(" (again in dim ", check.dim, ")"),
           "; each mesh axis may split one dim or be Partial, once");
    case SpecProblem::uneven_split:
      fail(where, "dim ", check.dim, " ('",
           shape != nullptr ? shape->dims()[check.dim].name : DimName{}, "', extent ", check.extent,
           ") does not divide evenly into ", check.divisor, " shards (",
           spec.dims()[check.dim].size() == 1 ? "axis " : "axes ",
           concat(AxisListPrinter{spec.dims()[check.dim]}),
           "); use an extent that is a multiple of ", check.divisor,
           " or split it over fewer devices");
    case SpecProblem::none: break;
  }
  fail(where, "invalid spec");
}
}  // namespace detail

// Throws carto::Error naming the tensor, the dim, the sizes and the spec when the spec is invalid.
inline void check_spec(const TensorShape& shape, const ShardingSpec& spec, const DeviceMesh& mesh,
                       std::string_view tensor = "tensor") {
  if (SpecCheck c = validate(shape, spec, mesh); !c.ok()) {
    detail::spec_problem(tensor, &shape, spec, mesh, c);
  }
}
inline void check_spec(const ShardingSpec& spec, const DeviceMesh& mesh,
                       std::string_view tensor = "tensor") {
  if (SpecCheck c = validate(spec, mesh); !c.ok())
    detail::spec_problem(tensor, nullptr, spec, mesh, c);
}

// ---- compile-time placements
// ---------------------------------------------------------------------

struct Replicate {
  static constexpr bool is_partial = false;
  static constexpr AxisList axes() { return {}; }
};

template <FixedString... Axes>
struct Shard {
  static_assert(sizeof...(Axes) >= 1, "carto: Shard<> needs at least one mesh axis name");
  static_assert((is_valid_name(Axes.view()) && ...),
                "carto: a Shard axis name must be 1-23 letters, digits or '_'");
  static constexpr bool is_partial = false;
  static constexpr AxisList axes() { return {AxisName(Axes.view())...}; }
};

template <FixedString... Axes>
struct Partial {
  static_assert(sizeof...(Axes) >= 1, "carto: Partial<> needs at least one mesh axis name");
  static_assert((is_valid_name(Axes.view()) && ...),
                "carto: a Partial axis name must be 1-23 letters, digits or '_'");
  static constexpr bool is_partial = true;
  static constexpr AxisList axes() { return {AxisName(Axes.view())...}; }
};

template <class T>
struct is_placement : std::false_type {};
template <>
struct is_placement<Replicate> : std::true_type {};
template <FixedString... A>
struct is_placement<Shard<A...>> : std::true_type {};
template <FixedString... A>
struct is_placement<Partial<A...>> : std::true_type {};

// Spec<Shard<"dp">, Replicate, Shard<"tp">> — one placement per tensor dim; a trailing
// Partial<"tp"> (not counted as a dim) marks the tensor Partial over those axes.
template <class... Placements>
struct Spec {
  static_assert((is_placement<Placements>::value && ...),
                "carto: Spec arguments must be Shard<...>, Replicate or Partial<...>");

 private:
  static constexpr std::size_t num_partial = (std::size_t{Placements::is_partial} + ... + 0);
  static constexpr bool partial_last() {
    bool seen_partial = false;
    bool ok = true;
    ((seen_partial ? (ok = false) : (seen_partial = Placements::is_partial)), ...);
    return ok;
  }
  static_assert(
      num_partial <= 1 && partial_last(),
      "carto: Partial<...> may appear once, as the last argument of Spec (it is not a dim)");

 public:
  static constexpr std::size_t rank = sizeof...(Placements) - num_partial;
  static constexpr ShardingSpec value() {
    ShardingSpec s;
    auto add = [&s]<class P>() {
      if constexpr (P::is_partial) {
        for (const AxisName& a : P::axes()) s.add_partial(a);
      } else {
        s.add_dim(P::axes());
      }
    };
    (add.template operator()<Placements>(), ...);
    return s;
  }
};

}  // namespace carto
