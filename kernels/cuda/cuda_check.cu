// cuda/cuda_check.cu — the text of CUDA runtime and cuBLAS status codes (cuda_check.hpp).
//
// Design note: a message names the status's symbol and the library's sentence for it, e.g.
// "cudaErrorMemoryAllocation: out of memory", so that a failure reads the same in a log whatever
// the locale or library version; cuBLAS's strings come from cublasGetStatusName/String (cuBLAS
// 11.4+), which cover the cuBLASLt statuses too (cuBLASLt returns cublasStatus_t).
#include <string>

#include "cuda/cuda_check.hpp"

namespace carto::cuda {

std::string describe_cuda(cudaError_t status) {
  std::string text = cudaGetErrorName(status);
  text += ": ";
  text += cudaGetErrorString(status);
  return text;
}

std::string describe_cublas(cublasStatus_t status) {
  std::string text = cublasGetStatusName(status);
  text += ": ";
  text += cublasGetStatusString(status);
  return text;
}

}  // namespace carto::cuda
