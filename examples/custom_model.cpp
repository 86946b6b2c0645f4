// custom_model — a model of your own from carto's layer templates: a typed Sequential of two
// transformer-style layers (no residual adds), whose tensor types are checked to chain at compile
// time, whose parameter count is checked by a static_assert against the closed form written below,
// and which is then planned for 8 devices under a memory budget.
//
//   build/examples/custom_model [DEVICES (8)] [MAX_MESH_AXES (2)]
//
// The whole model is one op group (Sequential::graph), a single unit of the DP with many tensors
// live inside it; with 3-axis meshes of 8 devices its search did not finish in 10 minutes here, so
// the default tries the meshes of 1 and 2 axes (a few seconds).
#include <carto/cost/hardware.hpp>
#include <carto/layers.hpp>
#include <carto/search.hpp>
#include <carto/util/units.hpp>
#include <exception>
#include <iostream>
#include <string>

using namespace carto;

// The tensors: a (batch 16, seq 512, hidden 1024) activation in bf16 and the MLP's 4096-wide one.
using B = Dim<"batch", 16>;
using S = Dim<"seq", 512>;
using H = Dim<"hidden", 1024>;
using X = Tensor<DType::bf16, Shape<B, S, H>>;
using F = Tensor<DType::bf16, Shape<B, S, Dim<"ffn", 4096>>>;

// One layer: layernorm, 16-head attention, layernorm, MLP (a Sequential of Sequentials also
// works). Writing Gelu<X> instead of Gelu<F> fails to compile, naming both tensor types.
using Layer = Sequential<LayerNorm<X>, MultiHeadAttention<X, 16>, LayerNorm<X>,
                         Linear<X, Dim<"ffn", 4096>>, Gelu<F>, Linear<F, H>>;
using Model = Sequential<Layer, Layer>;

// Parameters per layer, from the layers' math: two layernorms (γ and β: 2h each), the attention's
// QKV (h·3h + 3h) and projection (h·h + h), the MLP (h·4h + 4h + 4h·h + h) = 12h² + 13h.
constexpr std::int64_t kHidden = 1024;
constexpr std::int64_t kLayerParams = 12 * kHidden * kHidden + 13 * kHidden;
static_assert(Model{}.graph().num_params() == 2 * kLayerParams,
              "the model's parameters are not 2 x (12h^2 + 13h)");

int main(int argc, char** argv) {
  try {
    const Graph model = Model{}.graph();
    std::cout << "custom model: " << model.num_ops() << " ops, " << model.num_params()
              << " parameters (checked at compile time)\n";
    // The graph has a static batch of 16: plan one micro-batch of 16 sequences on 8 GPUs.
    auto make_graph = [](std::int64_t batch) {
      if (batch != 16) throw Error("custom_model's graph has a static batch of 16");
      return Model{}.graph();
    };
    const HardwareProfile hw = find_hardware_profile("h100");  // one node of 8
    const std::int64_t devices = argc > 1 ? std::stoll(argv[1]) : 8;
    const SearchOptions options{.precision = Precision::mixed_bf16,
                                .memory_budget = parse_bytes("2GiB"),
                                .max_mesh_axes = argc > 2 ? std::stoul(argv[2]) : 2};
    const Plan plan = search(make_graph, "custom", 16, devices, hw, options);
    std::cout << plan << "\n";
    std::cout << "predicted step " << plan.step_time_s * 1e3 << " ms, peak "
              << format_bytes(plan.peak_memory_bytes) << " per device (budget 2 GiB)\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "custom_model: " << e.what() << "\n";
    return 2;
  }
}
