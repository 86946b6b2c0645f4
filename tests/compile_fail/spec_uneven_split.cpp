// expect: UnevenSplit<true, 1, 100, 8>(.|\n)*a static tensor dim does not divide evenly into its shards
#include <carto/spec.hpp>
using namespace carto;
using X = Tensor<DType::bf16, Shape<Dim<"batch", 8>, Dim<"hidden", 100>>>;
using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
#ifdef CARTO_MISUSE
constexpr Sharded<X, M, Spec<Replicate, Shard<"tp", "dp">>> x{};
#else
constexpr Sharded<X, M, Spec<Shard<"tp", "dp">, Replicate>> x{};
#endif
int main() { return static_cast<int>(x.local_bytes() == 0); }
