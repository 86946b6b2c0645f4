// carto/layers/sequential.hpp — a typed chain of layers, composed with Boost.Hana.
//
// Design note: Sequential<L1, L2, ..., Ln> holds one object of each layer type (a hana::tuple) and
// builds them in order, each on the previous one's output. A layer type names input_type and
// output_type (carto::Tensor types with static shapes) and has `TensorId build(Graph&, TensorId)
// const`. Adjacent layers must agree: L(i)::output_type == L(i+1)::input_type, checked at compile
// time through detail::MismatchedLayers<Out, In>, whose static_assert shows both tensor types in
// the instantiation context of the error.
#pragma once

#include <boost/hana/at.hpp>
#include <boost/hana/drop_back.hpp>
#include <boost/hana/drop_front.hpp>
#include <boost/hana/fold_left.hpp>
#include <boost/hana/tuple.hpp>
#include <boost/hana/type.hpp>
#include <boost/hana/zip.hpp>
#include <cstddef>
#include <type_traits>
#include <utility>

#include "carto/graph/graph.hpp"
#include "carto/layers/basic.hpp"
#include "carto/profile/options.hpp"
#include "carto/profile/schedule.hpp"

namespace carto {

template <class L>
concept TypedLayer = requires(const L& layer, Graph& g, TensorId x) {
  typename L::input_type;
  typename L::output_type;
  { layer.build(g, x) } -> std::same_as<TensorId>;
};

namespace detail {

template <class Out, class In>
struct MismatchedLayers {
  static_assert(std::is_same_v<Out, In>,
                "carto: Sequential: a layer's output tensor type differs from the next layer's "
                "input tensor type; see MismatchedLayers<output type, next input type> here");
  static constexpr bool ok = std::is_same_v<Out, In>;
};

template <class... Layers>
consteval bool chain_matches() {
  namespace hana = boost::hana;
  constexpr auto types = hana::tuple_t<Layers...>;
  if constexpr (sizeof...(Layers) < 2) {
    return true;
  } else {
    constexpr auto pairs = hana::zip(hana::drop_back(types), hana::drop_front(types));
    return hana::fold_left(pairs, true, [](bool acc, auto pair) {
      using Out = typename decltype(+hana::at_c<0>(pair))::type::output_type;
      using In = typename decltype(+hana::at_c<1>(pair))::type::input_type;
      return MismatchedLayers<Out, In>::ok && acc;
    });
  }
}

}  // namespace detail

template <class... Layers>
class Sequential {
  static_assert(sizeof...(Layers) >= 1, "carto: Sequential needs at least one layer");
  static_assert((TypedLayer<Layers> && ...),
                "carto: every Sequential argument must be a typed layer (input_type, output_type, "
                "build(Graph&, TensorId) const)");
  // Instantiates detail::MismatchedLayers<Out, In> for every adjacent pair (its message names
  // both).
  static_assert(detail::chain_matches<Layers...>(),
                "carto: Sequential: adjacent layers' tensor types differ");

 public:
  using input_type =
      typename decltype(+boost::hana::at_c<0>(boost::hana::tuple_t<Layers...>))::type::input_type;
  using output_type = typename decltype(+boost::hana::at_c<sizeof...(Layers) - 1>(
      boost::hana::tuple_t<Layers...>))::type::output_type;

  constexpr Sequential() = default;
  constexpr explicit Sequential(Layers... layers) : layers_(std::move(layers)...) {}

  // Appends every layer's ops to g, starting from x; returns the last output.
  constexpr TensorId build(Graph& g, TensorId x) const {
    return boost::hana::fold_left(
        layers_, x, [&g](TensorId in, const auto& layer) { return layer.build(g, in); });
  }

  // The graph of the chain on a fresh input of input_type (not differentiated).
  [[nodiscard]] constexpr Graph graph() const {
    Graph g;
    const TensorId x = g.input(detail::static_shape_of<input_type>(), input_type::dtype);
    g.begin_group("sequential", GroupKind::layer);
    g.set_result(build(g, x));
    g.end_group();
    return g;
  }
  [[nodiscard]] constexpr ModelProfile profile(const ProfileOptions& options = {}) const {
    const Graph g = graph();
    return profile_graph(g, options);
  }

 private:
  boost::hana::tuple<Layers...> layers_;
};

}  // namespace carto
