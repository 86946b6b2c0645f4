// carto/layers/basic.hpp — Linear, LayerNorm, Gelu, Dropout: builders and typed layers.
//
// Design note: every layer exists twice over one implementation. A builder function appends the
// layer's ops to a Graph (run-time shapes: linear(g, x, {...})), and a typed layer (Linear<In,
// OutDim>) names its input and output tensor types for Sequential and calls the builder with the
// type's static shape. Parameters take the dtype of the layer's input. Invariants: Linear maps the
// last dim of (..., in) to (..., out) with W (in, out) and an optional bias (out); LayerNorm
// normalizes the last dim with gamma and beta of its extent; Dropout with probability 0 adds no op
// (no mask).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <tuple>
#include <type_traits>

#include "carto/error.hpp"
#include "carto/graph/graph.hpp"
#include "carto/spec/typed.hpp"

namespace carto {

enum class Bias : std::uint8_t { none, with };

struct LinearSpec {
  DimName out_name{};
  std::int64_t out_features = 1;
  Bias bias = Bias::with;
};

// Y = X·W (+ b): (..., in) -> (..., out).
constexpr TensorId linear(Graph& g, TensorId x, const LinearSpec& spec) {
  const TensorShape xs = g.tensor(x).shape;
  if (xs.rank() < 1 || xs.rank() > 7) {
    detail::fail("carto: linear needs an input of rank 1 to 7; got ", xs);
  }
  const TensorId w = g.parameter({xs.dims()[xs.rank() - 1], {spec.out_name, spec.out_features}},
                                 g.tensor(x).dtype);  // (in, out)
  // "abi,io->abo" for rank 3: leading letters a.., contracted i, new o.
  std::string text{};
  for (std::size_t d = 0; d + 1 < xs.rank(); ++d) text += static_cast<char>('a' + d);
  const std::string lead = text;
  text += "i,io->" + lead + "o";
  TensorId y = g.einsum(text, x, w);  // (..., out)
  if (spec.bias == Bias::with) {
    y = g.bias(y, g.parameter({{spec.out_name, spec.out_features}}, g.tensor(x).dtype));
  }
  return y;
}

// LayerNorm over the last dim, with gamma and beta.
constexpr TensorId layer_norm(Graph& g, TensorId x) {
  const std::size_t dim = g.tensor(x).shape.rank() - 1;  // (the graph's tensor list grows below)
  const DimExtent last = g.tensor(x).shape.dims()[dim];
  const DType dt = g.tensor(x).dtype;
  const TensorId gamma = g.parameter({last}, dt);
  const TensorId beta = g.parameter({last}, dt);
  return g.layernorm(x, gamma, beta, dim);
}

constexpr TensorId gelu(Graph& g, TensorId x) { return g.gelu(x); }

// Probability 0 removes the op: no mask, no FLOPs.
constexpr TensorId dropout(Graph& g, TensorId x, double probability) {
  return probability == 0.0 ? x : g.dropout(x, probability);
}

// ---- typed layers
// --------------------------------------------------------------------------------

namespace detail {

template <class ShapeT, class NewLast>
struct ReplaceLastDim;
template <class... Dims, class NewLast>
struct ReplaceLastDim<Shape<Dims...>, NewLast> {
  template <std::size_t... I>
  static auto make(std::index_sequence<I...>)
      -> Shape<std::tuple_element_t<I, std::tuple<Dims...>>..., NewLast>;
  using type = decltype(make(std::make_index_sequence<sizeof...(Dims) - 1>{}));
};

template <class T>
constexpr TensorShape static_shape_of() {
  static_assert(is_tensor<T>::value,
                "carto: a typed layer's tensor type must be carto::Tensor<...>");
  static_assert(
      T::shape_type::is_static,
      "carto: typed layers need static shapes (every Dim with an extent); use the builder "
      "functions (linear, layer_norm, ...) for shapes known at run time");
  return T::shape_type::static_value();
}

}  // namespace detail

// Linear<Tensor<bf16, Shape<B, S, Dim<"hidden", 768>>>, Dim<"ffn", 3072>>: output (B, S, ffn).
template <class In, class OutDim, Bias B = Bias::with>
struct Linear {
  static_assert(is_tensor<In>::value && In::rank >= 1,
                "carto: Linear<In, OutDim> needs In = Tensor<...>");
  static_assert(is_dim<OutDim>::value && OutDim::is_static,
                "carto: Linear's OutDim must be a Dim with a static extent");
  using input_type = In;
  using output_type =
      Tensor<In::dtype, typename detail::ReplaceLastDim<typename In::shape_type, OutDim>::type>;
  constexpr TensorId build(Graph& g, TensorId x) const {
    return linear(g, x, {.out_name = OutDim::name(), .out_features = OutDim::extent(), .bias = B});
  }
};

template <class T>
struct LayerNorm {
  using input_type = T;
  using output_type = T;
  constexpr TensorId build(Graph& g, TensorId x) const { return layer_norm(g, x); }
};

template <class T>
struct Gelu {
  using input_type = T;
  using output_type = T;
  constexpr TensorId build(Graph& g, TensorId x) const { return gelu(g, x); }
};

template <class T>
struct Dropout {
  using input_type = T;
  using output_type = T;
  double probability = 0.1;
  constexpr TensorId build(Graph& g, TensorId x) const { return dropout(g, x, probability); }
};

}  // namespace carto
