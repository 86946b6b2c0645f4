// carto/spec/shape.hpp — named dims with static or dynamic extents, and shapes.
//
// Design note: one extent vocabulary behind one API (as CuTe's Int<N> beside int, or mdspan's
// extents<I, 3, dynamic_extent>). At compile time a dim is a type: Dim<"hidden", 768> is an empty
// type whose extent is a constant, Dim<"batch"> holds its extent at run time. Shape<Dims...> holds
// the dynamic ones and converts to the run-time value TensorShape, on which all algebra is written
// as constexpr functions, so one implementation serves both forms.
//
// Invariants: extents are positive; a shape has at most kMaxRank dims; dim names are valid names
// (letters, digits, '_') and distinct within a shape is *not* required (x @ x^T has two "hidden").
#pragma once

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <tuple>
#include <type_traits>

#include "carto/error.hpp"
#include "carto/util/checked.hpp"
#include "carto/util/name.hpp"
#include "carto/util/static_vector.hpp"

namespace carto {

inline constexpr std::size_t kMaxRank = 8;
inline constexpr std::int64_t dynamic_extent = -1;

// Index of a tensor dimension (0-based). A strong type so it cannot be confused with a mesh axis
// index or a degree.
struct TensorDim {
  std::size_t value = 0;
  constexpr explicit TensorDim(std::size_t v) : value(v) {}
  friend constexpr bool operator==(TensorDim, TensorDim) = default;
};

// A positive integer: a mesh axis size, a split factor.
class Degree {
 public:
  constexpr explicit Degree(std::int64_t value) : value_(value) {
    if (value < 1) detail::fail("carto: a degree must be positive, got ", value);
  }
  [[nodiscard]] constexpr std::int64_t get() const { return value_; }
  friend constexpr bool operator==(Degree, Degree) = default;

 private:
  std::int64_t value_;
};

struct DimExtent {
  DimName name;
  std::int64_t extent = 1;
  friend constexpr bool operator==(const DimExtent&, const DimExtent&) = default;
};

// Run-time shape value: an ordered list of named extents.
class TensorShape {
 public:
  constexpr TensorShape() = default;
  constexpr TensorShape(std::initializer_list<DimExtent> dims) {
    for (const DimExtent& d : dims) push_back(d);
  }

  constexpr void push_back(const DimExtent& d) {
    if (d.extent < 1) {
      detail::fail("carto: dim '", d.name, "' has extent ", d.extent, "; extents must be positive");
    }
    if (dims_.size() == kMaxRank) {
      detail::fail("carto: a shape has at most ", kMaxRank, " dims; adding '", d.name,
                   "' exceeds it");
    }
    dims_.push_back(d);
  }

  [[nodiscard]] constexpr std::size_t rank() const { return dims_.size(); }
  [[nodiscard]] constexpr std::int64_t extent(TensorDim d) const { return at(d).extent; }
  [[nodiscard]] constexpr const DimName& name(TensorDim d) const { return at(d).name; }
  [[nodiscard]] constexpr const StaticVector<DimExtent, kMaxRank>& dims() const { return dims_; }
  [[nodiscard]] constexpr std::int64_t numel() const {
    std::int64_t n = 1;
    for (const DimExtent& d : dims_) n = checked_mul(n, d.extent, "the element count of a shape");
    return n;
  }

  friend constexpr bool operator==(const TensorShape&, const TensorShape&) = default;

 private:
  [[nodiscard]] constexpr const DimExtent& at(TensorDim d) const {
    if (d.value >= dims_.size()) {
      detail::fail("carto: dim index ", d.value, " is out of range for a rank-", dims_.size(),
                   " shape");
    }
    return dims_[d.value];
  }
  StaticVector<DimExtent, kMaxRank> dims_;
};

// "(batch=8, seq=2048, hidden=12288)"
inline std::ostream& operator<<(std::ostream& out, const TensorShape& shape) {
  out << '(';
  for (std::size_t i = 0; i < shape.rank(); ++i) {
    if (i > 0) out << ", ";
    out << shape.dims()[i].name << '=' << shape.dims()[i].extent;
  }
  return out << ')';
}

inline std::string to_string(const TensorShape& shape) { return detail::concat(shape); }

// ---- compile-time form -------------------------------------------------------------------------

namespace detail {
template <FixedString N>
consteval bool dim_name_ok() {
  return is_valid_name(N.view());
}
}  // namespace detail

// A dim with a static extent: an empty type.
template <FixedString N, std::int64_t Extent = dynamic_extent>
struct Dim {
  static_assert(detail::dim_name_ok<N>(),
                "carto: a Dim name must be 1-23 letters, digits or '_' and not start with a digit");
  static_assert(Extent > 0,
                "carto: a static Dim extent must be positive (or omit it for a "
                "dynamic extent: Dim<\"batch\">)");
  static constexpr bool is_static = true;
  static constexpr DimName name() { return DimName(N.view()); }
  static constexpr std::int64_t extent() { return Extent; }
  static constexpr std::int64_t static_extent = Extent;
};

// A dim whose extent is known at run time.
template <FixedString N>
struct Dim<N, dynamic_extent> {
  static_assert(detail::dim_name_ok<N>(),
                "carto: a Dim name must be 1-23 letters, digits or '_' and not start with a digit");
  static constexpr bool is_static = false;
  static constexpr std::int64_t static_extent = dynamic_extent;
  constexpr explicit Dim(std::int64_t extent) : extent_(extent) {
    if (extent < 1)
      detail::fail("carto: dim '", N.view(), "' got extent ", extent, "; it must be positive");
  }
  static constexpr DimName name() { return DimName(N.view()); }
  [[nodiscard]] constexpr std::int64_t extent() const { return extent_; }

 private:
  std::int64_t extent_;
};

template <class T>
struct is_dim : std::false_type {};
template <FixedString N, std::int64_t E>
struct is_dim<Dim<N, E>> : std::true_type {};

// A shape type. Static dims take no storage; dynamic ones are passed to the constructor in order:
//   Shape<Dim<"batch">, Dim<"seq", 1024>, Dim<"hidden", 768>> x{Dim<"batch">{8}};
template <class... Dims>
class Shape {
  static_assert((is_dim<Dims>::value && ...), "carto: every Shape argument must be a carto::Dim");
  static_assert(sizeof...(Dims) <= kMaxRank, "carto: a Shape has at most 8 dims");

 public:
  static constexpr std::size_t rank = sizeof...(Dims);
  static constexpr bool is_static = (Dims::is_static && ...);
  static constexpr std::int64_t static_extents[rank > 0 ? rank : 1] = {Dims::static_extent...};

  constexpr Shape() requires(is_static) = default;
  template <class... Dynamic>
  constexpr explicit Shape(Dynamic... dynamic_dims) : dims_(make_dims(dynamic_dims...)) {}

  [[nodiscard]] constexpr TensorShape value() const {
    TensorShape out;
    std::apply(
        [&](const auto&... d) {
          (out.push_back(DimExtent{d.name(), d.extent()}), ...);
        },
        dims_);
    return out;
  }
  // Only for fully static shapes: the value as a constant.
  static constexpr TensorShape static_value() requires(is_static) { return Shape{}.value(); }

 private:
  template <class D, class... Dynamic>
  static constexpr D pick(const Dynamic&... dynamic_dims) {
    if constexpr (D::is_static) {
      return D{};
    } else {
      static_assert((std::is_same_v<D, Dynamic> || ...),
                    "carto: a dynamic Dim of this Shape was not passed to its constructor");
      return std::get<D>(std::tuple<Dynamic...>(dynamic_dims...));
    }
  }
  template <class... Dynamic>
  static constexpr std::tuple<Dims...> make_dims(const Dynamic&... dynamic_dims) {
    static_assert(((!Dynamic::is_static) && ...),
                  "carto: pass only the dynamic dims of a Shape to its constructor");
    return std::tuple<Dims...>(pick<Dims>(dynamic_dims...)...);
  }
  std::tuple<Dims...> dims_{};
};

}  // namespace carto
