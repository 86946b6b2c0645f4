// The backend of the CUDA kernel tests: the generic test bodies (tests/kernels/kernel_support.hpp)
// run on one CudaBackend on device 0, constructed on first use (after cuda_main.cpp found a device)
// and shared by every test case of the executable.
#include <cuda/cuda_backend.hpp>

#include "kernels/kernel_support.hpp"

namespace carto::test {

Backend& test_backend() {
  static cuda::CudaBackend backend;
  return backend;
}

std::string_view test_backend_name() { return "cuda"; }

}  // namespace carto::test
