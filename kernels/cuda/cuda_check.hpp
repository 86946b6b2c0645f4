// cuda/cuda_check.hpp — one way to check CUDA, cuBLAS(Lt) and NCCL status codes.
//
// Design note: every runtime, cuBLAS and NCCL call goes through CARTO_CUDA_CHECK /
// CARTO_CUBLAS_CHECK / CARTO_NCCL_CHECK (carto/error.hpp's CARTO_CHECK_STATUS: the call runs once,
// a failure throws carto::Error naming the call, the file and line and the library's message),
// and every kernel launch is followed by CARTO_CUDA_CHECK_LAUNCH(), which reads the launch's error
// (bad geometry, too much shared memory) at once instead of at the next synchronizing call. The
// describe functions live in cuda_check.cu so that this header needs only the runtime's types.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <carto/error.hpp>
#include <string>

namespace carto::cuda {

std::string describe_cuda(cudaError_t status);
std::string describe_cublas(cublasStatus_t status);

}  // namespace carto::cuda

#define CARTO_CUDA_CHECK(call) CARTO_CHECK_STATUS(call, cudaSuccess, ::carto::cuda::describe_cuda)
#define CARTO_CUBLAS_CHECK(call) \
  CARTO_CHECK_STATUS(call, CUBLAS_STATUS_SUCCESS, ::carto::cuda::describe_cublas)
// After every <<<...>>> launch.
#define CARTO_CUDA_CHECK_LAUNCH() CARTO_CUDA_CHECK(cudaGetLastError())
