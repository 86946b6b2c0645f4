// expect: the Spec's rank differs from the tensor's rank
#include <carto/spec.hpp>
using namespace carto;
using X = Tensor<DType::bf16, Shape<Dim<"batch", 8>, Dim<"seq", 16>, Dim<"hidden", 64>>>;
using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
#ifdef CARTO_MISUSE
constexpr Sharded<X, M, Spec<Shard<"dp">, Shard<"tp">>> x{};
#else
constexpr Sharded<X, M, Spec<Shard<"dp">, Replicate, Shard<"tp">>> x{};
#endif
int main() { return static_cast<int>(x.local_bytes() == 0); }
