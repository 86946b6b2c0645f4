// carto/spec/text.hpp — parsing the text forms of specs, meshes and shapes.
//
// Design note: the grammar (white space allowed between tokens):
//   spec      := [ placement { ',' placement } ] [ '|' 'P' axes ]
//   placement := 'R' | 'S' axes
//   axes      := '(' name { ',' name } ')'
//   mesh      := [ '{' ] name (':'|'=') size { ',' name (':'|'=') size } [ '}' ]
//              | size { 'x' size }                  (axes named x, y, z)
//   shape     := dim { ',' dim },  dim := extent | name (':'|'=') extent
// Printing (operator<< of each value type) gives the canonical form, which parses back to an equal
// value. A parse error is a carto::Error that quotes the input, names the 0-based position and
// says what was expected there. The parsers only build values; validating a spec against a mesh
// and shape is check_spec's job.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "carto/error.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"

namespace carto {

namespace detail {

class Cursor {
 public:
  Cursor(std::string_view text, std::string_view what) : text_(text), what_(what) {}

  void skip_space() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  [[nodiscard]] bool at_end() {
    skip_space();
    return pos_ == text_.size();
  }
  [[nodiscard]] char peek() {
    skip_space();
    return pos_ < text_.size() ? text_[pos_] : '\0';
  }
  bool accept(char c) {
    if (peek() == c && pos_ < text_.size()) {
      ++pos_;
      return true;
    }
    return false;
  }
  void expect(char c, std::string_view expected) {
    if (!accept(c)) error(expected);
  }
  std::string_view name(std::string_view expected) {
    skip_space();
    const std::size_t start = pos_;
    if (pos_ < text_.size() && !(text_[pos_] >= '0' && text_[pos_] <= '9')) {
      while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    }
    if (pos_ == start) error(expected);
    if (pos_ - start > kMaxNameLength) {
      pos_ = start;
      error(concat("a name of at most ", kMaxNameLength, " characters"));
    }
    return text_.substr(start, pos_ - start);
  }
  std::int64_t integer(std::string_view expected) {
    skip_space();
    const std::size_t start = pos_;
    std::int64_t value = 0;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') {
      const int digit = text_[pos_] - '0';
      if (value > (std::numeric_limits<std::int64_t>::max() - digit) / 10) {
        pos_ = start;
        error("an integer that fits in 64 bits");
      }
      value = value * 10 + digit;
      ++pos_;
    }
    if (pos_ == start) error(expected);
    return value;
  }
  [[noreturn]] void error(std::string_view expected) {
    skip_space();
    const std::string found = pos_ < text_.size() ? concat("'", text_[pos_], "'") : "the end";
    fail("carto: cannot parse ", what_, " '", quoted(), "': at position ", pos_, ": expected ",
         expected, ", found ", found);
  }
  // The text, or for a long one (kQuoteLimit characters and more) the part around the error
  // position with the length: a 100 KB mistake is not echoed in full.
  [[nodiscard]] std::string quoted() const {
    constexpr std::size_t kQuoteLimit = 96;
    if (text_.size() < kQuoteLimit) return std::string(text_);
    const std::size_t from = pos_ > kQuoteLimit / 2 ? pos_ - kQuoteLimit / 2 : 0;
    const std::string_view part = text_.substr(from, kQuoteLimit);
    return concat(from > 0 ? "..." : "", part, from + part.size() < text_.size() ? "..." : "",
                  "' (", text_.size(), " characters) '");
  }
  [[nodiscard]] std::size_t position() const { return pos_; }

 private:
  std::string_view text_;
  std::string_view what_;
  std::size_t pos_ = 0;
};

inline AxisList parse_axis_list(Cursor& in) {
  AxisList axes;
  in.expect('(', "'(' after S or P");
  do {
    if (axes.size() == kMaxMeshAxes)
      in.error(detail::concat("')': at most ", kMaxMeshAxes, " axes in one list"));
    axes.push_back(AxisName(in.name("a mesh axis name")));
  } while (in.accept(','));
  in.expect(')', "',' or ')' in an axis list");
  return axes;
}

inline DeviceMesh mesh_from_axes(const StaticVector<MeshAxis, kMaxMeshAxes>& axes) {
  if (MeshCheck c = DeviceMesh::check(axes); !c.ok()) mesh_problem(axes, c);
  switch (axes.size()) {
    case 1: return DeviceMesh{axes[0]};
    case 2: return DeviceMesh{axes[0], axes[1]};
    default: return DeviceMesh{axes[0], axes[1], axes[2]};
  }
}

}  // namespace detail

inline ShardingSpec parse_spec(std::string_view text) {
  detail::Cursor in(text, "sharding spec");
  ShardingSpec spec;
  if (!in.at_end() && in.peek() != '|') {
    do {
      if (spec.rank() == kMaxRank)
        in.error(detail::concat("the end: a spec has at most ", kMaxRank, " dims"));
      if (in.accept('R')) {
        spec.add_dim();
      } else if (in.accept('S')) {
        spec.add_dim(detail::parse_axis_list(in));
      } else {
        in.error("'R' or 'S(...)'");
      }
    } while (in.accept(','));
  }
  if (in.accept('|')) {
    in.expect('P', "'P' after '|'");
    for (const AxisName& a : detail::parse_axis_list(in)) spec.add_partial(a);
  }
  if (!in.at_end()) in.error(spec.is_partial() ? "the end" : "',' or '|P(...)' or the end");
  return spec;
}

// "dp=2,tp=4", "{dp:2, tp:4}" (the printed form), or the shorthand "2x4", whose axes are named x,
// y, z in order (the last one innermost).
inline DeviceMesh parse_mesh(std::string_view text) {
  detail::Cursor in(text, "mesh");
  StaticVector<MeshAxis, kMaxMeshAxes> axes;
  if (in.peek() >= '0' && in.peek() <= '9') {
    constexpr std::string_view kShorthandNames[] = {"x", "y", "z"};
    do {
      if (axes.size() == kMaxMeshAxes)
        in.error(detail::concat("the end: a mesh has at most ", kMaxMeshAxes, " axes"));
      const std::int64_t size = in.integer("an axis size (a positive integer)");
      if (size < 1) in.error("an axis size of at least 1");
      axes.push_back(MeshAxis{AxisName(kShorthandNames[axes.size()]), size});
    } while (in.accept('x'));
    if (!in.at_end()) in.error("'x' or the end");
    return detail::mesh_from_axes(axes);
  }
  const bool braced = in.accept('{');
  do {
    if (axes.size() == kMaxMeshAxes)
      in.error(detail::concat("the end: a mesh has at most ", kMaxMeshAxes, " axes"));
    MeshAxis axis;
    axis.name = AxisName(in.name("an axis name"));
    if (!in.accept(':')) in.expect('=', "':' or '=' after the axis name");
    axis.size = in.integer("the axis size (a positive integer)");
    if (axis.size < 1) in.error("an axis size of at least 1");
    axes.push_back(axis);
  } while (in.accept(','));
  if (braced) in.expect('}', "',' or '}'");
  if (!in.at_end()) in.error("',' or the end");
  return detail::mesh_from_axes(axes);
}

// "8,2048,12288" names the dims d0, d1, ...; "batch=8,seq=2048" names them; "(batch=8, seq=2048)"
// (the printed form) parses too.
inline TensorShape parse_shape(std::string_view text) {
  detail::Cursor in(text, "shape");
  const bool paren = in.accept('(');
  TensorShape shape;
  do {
    if (shape.rank() == kMaxRank)
      in.error(detail::concat("the end: a shape has at most ", kMaxRank, " dims"));
    DimExtent dim;
    if (in.peek() >= '0' && in.peek() <= '9') {
      dim.name = DimName(detail::concat("d", shape.rank()));
    } else {
      dim.name = DimName(in.name("a dim extent or name"));
      if (!in.accept(':')) in.expect('=', "':' or '=' after the dim name");
    }
    dim.extent = in.integer("a dim extent (a positive integer)");
    if (dim.extent < 1) in.error("a dim extent of at least 1");
    shape.push_back(dim);
  } while (in.accept(','));
  if (paren) in.expect(')', "',' or ')'");
  if (!in.at_end()) in.error("',' or the end");
  return shape;
}

}  // namespace carto
