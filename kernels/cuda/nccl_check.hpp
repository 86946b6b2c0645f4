// cuda/nccl_check.hpp — CARTO_NCCL_CHECK: NCCL status codes through carto's one checking helper.
//
// Design note: as CARTO_CUDA_CHECK does for the runtime (cuda_check.hpp), CARTO_NCCL_CHECK runs an
// NCCL call once and, when it does not return ncclSuccess, throws carto::Error naming the call,
// the file and line and ncclGetErrorString's text (carto/error.hpp's CARTO_CHECK_STATUS). Only the
// targets that link NCCL include this header.
#pragma once

#include <nccl.h>

#include <carto/error.hpp>
#include <string>

namespace carto::cuda {

inline std::string describe_nccl(ncclResult_t status) {
  const char* text = ncclGetErrorString(status);
  return text != nullptr ? std::string(text) : std::string("unknown NCCL status");
}

}  // namespace carto::cuda

#define CARTO_NCCL_CHECK(call) CARTO_CHECK_STATUS(call, ncclSuccess, ::carto::cuda::describe_nccl)
