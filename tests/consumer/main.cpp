// Uses the installed headers: a compile-time checked sharding and a parsed one must agree.
#include <carto/spec.hpp>
#include <iostream>

int main() {
  using namespace carto;
  using X = Tensor<DType::bf16, Shape<Dim<"batch", 8>, Dim<"hidden", 768>>>;
  using M = Mesh<Axis<"dp", 2>, Axis<"tp", 4>>;
  constexpr Sharded<X, M, Spec<Shard<"dp">, Shard<"tp">>> x{};
  static_assert(x.local_shape().extent(TensorDim{1}) == 192);
  const TensorShape parsed = local_shape(parse_shape("batch=8,hidden=768"),
                                         parse_spec("S(dp),S(tp)"), parse_mesh("dp=2,tp=4"));
  if (!(parsed == x.local_shape())) {
    std::cout << "carto consumer: local shapes differ\n";
    return 1;
  }
  std::cout << "carto consumer: the spec program agrees\n";
  return 0;
}
