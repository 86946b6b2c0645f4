// expect: Sequential: a layer's output tensor type differs from the next layer's input tensor type
// Linear<X, ffn> outputs (batch, ffn) but Gelu<X> takes (batch, hidden): the composition is refused
// and the error's instantiation context shows detail::MismatchedLayers<output type, input type>.
#include <carto/layers/basic.hpp>
#include <carto/layers/sequential.hpp>

using X = carto::Tensor<carto::DType::bf16,
                        carto::Shape<carto::Dim<"batch", 4>, carto::Dim<"hidden", 8>>>;
using Y =
    carto::Tensor<carto::DType::bf16, carto::Shape<carto::Dim<"batch", 4>, carto::Dim<"ffn", 16>>>;

int main() {
  [[maybe_unused]] carto::Sequential<carto::Linear<X, carto::Dim<"ffn", 16>>, carto::Gelu<Y>> ok{};
#ifdef CARTO_MISUSE
  [[maybe_unused]] carto::Sequential<carto::Linear<X, carto::Dim<"ffn", 16>>, carto::Gelu<X>> bad{};
#endif
  return 0;
}
