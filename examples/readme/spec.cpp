// README "The spec API in brief": a sharded tensor checked at compile time, the same algebra on
// values at run time.
#include <carto/spec.hpp>
#include <iostream>
using namespace carto;

// Compile time: misuse is a static_assert with a readable message.
using X = Tensor<DType::bf16, Shape<Dim<"batch", 8>, Dim<"seq", 1024>, Dim<"hidden", 768>>>;
using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
constexpr Sharded<X, M, Spec<Shard<"dp">, Replicate, Shard<"tp">>> x{};
static_assert(x.local_shape().extent(TensorDim{2}) == 192);

int main() {
  // Run time: the same algebra on values, with errors that name the tensor, dim, sizes and spec.
  const TensorShape shape = parse_shape("batch=8,seq=1024,hidden=768");
  const DeviceMesh mesh = parse_mesh("dp=2,tp=4");
  const ShardingSpec spec = parse_spec("S(dp),R,S(tp)");
  check_spec(shape, spec, mesh, "activation");  // throws carto::Error when invalid
  const Slice mine = device_slice(shape, spec, mesh, /*device=*/5);
  for (std::size_t d = 0; d < mine.offset.size(); ++d)  // device 5 = (dp 1, tp 1)
    std::cout << "dim " << d << ": [" << mine.offset[d] << ", " << mine.offset[d] + mine.extent[d]
              << ")\n";
  for (const ShardingSpec& s : enumerate_specs(shape, mesh, {.partial = PartialSpecs::include}))
    std::cout << s << " -> " << local_shape(shape, s, mesh) << "\n";
}
