// The domains the spec tests sweep: meshes of 1-3 axes (up to 8 devices) and tensors of rank 1-4,
// some with extents that no split divides, so that enumeration must skip specs.
#pragma once

#include <carto/spec.hpp>
#include <vector>

namespace carto::testing {

inline std::vector<DeviceMesh> small_meshes() {
  return {
      parse_mesh("x=1"),         parse_mesh("x=2"),       parse_mesh("x=4"),
      parse_mesh("x=8"),         parse_mesh("dp=2,tp=2"), parse_mesh("dp=2,tp=4"),
      parse_mesh("dp=4,tp=2"),   parse_mesh("a=1,b=3"),   parse_mesh("pp=2,dp=2,tp=2"),
      parse_mesh("a=1,b=2,c=4"),
  };
}

inline std::vector<TensorShape> small_shapes() {
  return {
      parse_shape("n=8"),
      parse_shape("n=6"),
      parse_shape("n=1"),
      parse_shape("r=4,c=6"),
      parse_shape("r=8,c=2"),
      parse_shape("b=2,s=4,h=8"),
      parse_shape("b=3,s=4,h=2"),
      parse_shape("a=2,b=2,c=4,d=8"),
      parse_shape("a=2,b=3,c=2,d=4"),
  };
}

}  // namespace carto::testing
