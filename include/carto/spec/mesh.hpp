// carto/spec/mesh.hpp — device meshes with named axes.
//
// Design note: a mesh is an ordered list of named axes with sizes, e.g. {dp:2, tp:4}; devices are
// numbered row-major (the last axis varies fastest). The last axis is the innermost one: it maps
// onto the fastest links (same node, NVLink). Compile-time form: Mesh<Axis<"dp",2>, Axis<"tp",4>>;
// run-time form: DeviceMesh. Invariants: 1 to kMaxMeshAxes axes, distinct valid names, sizes >= 1,
// at most kMaxDevices (2^20) devices in all (util/checked.hpp).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>

#include "carto/error.hpp"
#include "carto/spec/shape.hpp"
#include "carto/util/checked.hpp"
#include "carto/util/name.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

inline constexpr std::size_t kMaxMeshAxes = 3;

struct MeshAxis {
  AxisName name;
  std::int64_t size = 1;
  friend constexpr bool operator==(const MeshAxis&, const MeshAxis&) = default;
};

// Per-axis coordinates of one device.
using MeshCoord = StaticVector<std::int64_t, kMaxMeshAxes>;

enum class MeshProblem : std::uint8_t {
  none,
  no_axes,
  too_many_axes,
  bad_name,
  duplicate_name,
  bad_size,
  too_many_devices  // the product of the sizes exceeds kMaxDevices
};

struct MeshCheck {
  constexpr MeshCheck() = default;
  constexpr MeshCheck(MeshProblem p, std::size_t a = 0, std::size_t o = 0)
      : problem(p), axis(a), other(o) {}
  MeshProblem problem = MeshProblem::none;
  std::size_t axis = 0;   // the offending axis
  std::size_t other = 0;  // for duplicate_name: the earlier axis with the same name
  [[nodiscard]] constexpr bool ok() const { return problem == MeshProblem::none; }
};

class DeviceMesh {
 public:
  constexpr DeviceMesh() = default;
  // Validates; throws carto::Error naming the problem.
  constexpr DeviceMesh(std::initializer_list<MeshAxis> axes) {
    for (const MeshAxis& a : axes) {
      if (axes_.size() == kMaxMeshAxes) too_many(axes.size());
      axes_.push_back(a);
    }
    validate_or_throw();
  }

  // Checks without throwing (usable in static_assert).
  [[nodiscard]] static constexpr MeshCheck check(const StaticVector<MeshAxis, kMaxMeshAxes>& axes) {
    if (axes.empty()) return {MeshProblem::no_axes};
    for (std::size_t i = 0; i < axes.size(); ++i) {
      if (!is_valid_name(axes[i].name.view())) return {MeshProblem::bad_name, i};
      if (axes[i].size < 1) return {MeshProblem::bad_size, i};
      for (std::size_t j = 0; j < i; ++j) {
        if (axes[j].name == axes[i].name) return {MeshProblem::duplicate_name, i, j};
      }
    }
    std::int64_t devices = 1;
    for (std::size_t i = 0; i < axes.size(); ++i) {
      if (__builtin_mul_overflow(devices, axes[i].size, &devices) || devices > kMaxDevices) {
        return {MeshProblem::too_many_devices, i};
      }
    }
    return {};
  }

  [[nodiscard]] constexpr std::size_t num_axes() const { return axes_.size(); }
  [[nodiscard]] constexpr const StaticVector<MeshAxis, kMaxMeshAxes>& axes() const { return axes_; }
  [[nodiscard]] constexpr const MeshAxis& axis(std::size_t i) const { return axes_[i]; }
  [[nodiscard]] constexpr std::int64_t num_devices() const {
    std::int64_t n = 1;
    for (const MeshAxis& a : axes_) n = checked_mul(n, a.size, "the device count of a mesh");
    return n;
  }
  [[nodiscard]] constexpr std::optional<std::size_t> find(const AxisName& name) const {
    for (std::size_t i = 0; i < axes_.size(); ++i) {
      if (axes_[i].name == name) return i;
    }
    return std::nullopt;
  }
  // The index of a named axis; throws naming the mesh when it has no such axis.
  [[nodiscard]] constexpr std::size_t index_of(const AxisName& name) const {
    if (auto i = find(name)) return *i;
    unknown_axis(name);
  }
  [[nodiscard]] constexpr std::int64_t size_of(const AxisName& name) const {
    return axes_[index_of(name)].size;
  }

  // Row-major: the last axis varies fastest.
  [[nodiscard]] constexpr MeshCoord coord(std::int64_t device) const {
    if (device < 0 || device >= num_devices()) bad_device(device);
    MeshCoord c;
    for (std::size_t i = 0; i < axes_.size(); ++i) c.push_back(0);
    for (std::size_t i = axes_.size(); i-- > 0;) {
      c[i] = device % axes_[i].size;
      device /= axes_[i].size;
    }
    return c;
  }
  [[nodiscard]] constexpr std::int64_t device(const MeshCoord& c) const {
    std::int64_t d = 0;
    for (std::size_t i = 0; i < axes_.size(); ++i) d = d * axes_[i].size + c[i];
    return d;
  }

  friend constexpr bool operator==(const DeviceMesh&, const DeviceMesh&) = default;

 private:
  constexpr void validate_or_throw() const;
  [[noreturn]] static void too_many(std::size_t n) {
    detail::fail("carto: a mesh has 1 to ", kMaxMeshAxes, " axes; got ", n);
  }
  [[noreturn]] void unknown_axis(const AxisName& name) const;
  [[noreturn]] void bad_device(std::int64_t device) const;

  StaticVector<MeshAxis, kMaxMeshAxes> axes_;
};

// "{dp:2, tp:4}"
inline std::ostream& operator<<(std::ostream& out, const DeviceMesh& mesh) {
  out << '{';
  for (std::size_t i = 0; i < mesh.num_axes(); ++i) {
    if (i > 0) out << ", ";
    out << mesh.axis(i).name << ':' << mesh.axis(i).size;
  }
  return out << '}';
}
inline std::string to_string(const DeviceMesh& mesh) { return detail::concat(mesh); }

inline void DeviceMesh::unknown_axis(const AxisName& name) const {
  detail::fail("carto: mesh ", *this, " has no axis named '", name, "'");
}
inline void DeviceMesh::bad_device(std::int64_t device) const {
  detail::fail("carto: device ", device, " is not in mesh ", *this, " (devices 0..",
               num_devices() - 1, ")");
}

namespace detail {
[[noreturn]] inline void mesh_problem(const StaticVector<MeshAxis, kMaxMeshAxes>& axes,
                                      const MeshCheck& check) {
  switch (check.problem) {
    case MeshProblem::no_axes: fail("carto: a mesh needs at least one axis");
    case MeshProblem::too_many_axes: fail("carto: a mesh has at most ", kMaxMeshAxes, " axes");
    case MeshProblem::bad_name:
      fail("carto: mesh axis ", check.axis, " has name '", axes[check.axis].name,
           "'; names are 1-23 letters, digits or '_' and do not start with a digit");
    case MeshProblem::duplicate_name:
      fail("carto: mesh axes ", check.other, " and ", check.axis, " are both named '",
           axes[check.axis].name, "'; axis names must be distinct");
    case MeshProblem::bad_size:
      fail("carto: mesh axis '", axes[check.axis].name, "' has size ", axes[check.axis].size,
           "; sizes must be at least 1");
    case MeshProblem::too_many_devices: {
      std::string sizes;
      for (const MeshAxis& a : axes) sizes += concat(sizes.empty() ? "" : " x ", a.size);
      fail("carto: a mesh of ", sizes, " devices has more than ", kMaxDevices,
           " (2^20) devices, the most carto supports; use smaller axis sizes");
    }
    case MeshProblem::none: break;
  }
  fail("carto: invalid mesh");
}
}  // namespace detail

constexpr void DeviceMesh::validate_or_throw() const {
  if (MeshCheck c = check(axes_); !c.ok()) detail::mesh_problem(axes_, c);
}

// ---- compile-time form -------------------------------------------------------------------------

template <FixedString N, std::int64_t Size>
struct Axis {
  static_assert(
      is_valid_name(N.view()),
      "carto: a mesh Axis name must be 1-23 letters, digits or '_' and not start with a digit");
  static_assert(Size >= 1, "carto: a mesh Axis size must be at least 1");
  static constexpr MeshAxis value() { return MeshAxis{AxisName(N.view()), Size}; }
};

template <class T>
struct is_axis : std::false_type {};
template <FixedString N, std::int64_t S>
struct is_axis<Axis<N, S>> : std::true_type {};

template <class... Axes>
struct Mesh {
  static_assert((is_axis<Axes>::value && ...), "carto: every Mesh argument must be a carto::Axis");
  static_assert(sizeof...(Axes) >= 1, "carto: a Mesh needs at least one Axis");
  static_assert(sizeof...(Axes) <= kMaxMeshAxes,
                "carto: a Mesh has at most 3 axes (1-D, 2-D or 3-D)");

  static constexpr StaticVector<MeshAxis, kMaxMeshAxes> axis_list() {
    StaticVector<MeshAxis, kMaxMeshAxes> v;
    (v.push_back(Axes::value()), ...);
    return v;
  }
  static_assert(DeviceMesh::check(axis_list()).problem != MeshProblem::duplicate_name,
                "carto: two axes of this Mesh have the same name; axis names must be distinct");

  static constexpr std::size_t num_axes = sizeof...(Axes);
  static constexpr std::int64_t num_devices = (Axes::value().size * ...);
  static constexpr DeviceMesh value() {
    DeviceMesh m{Axes::value()...};
    return m;
  }
};

}  // namespace carto
