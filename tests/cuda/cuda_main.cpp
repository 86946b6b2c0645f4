// The main of every CUDA test executable (Catch2 v2, CATCH_CONFIG_RUNNER): without a CUDA device it
// prints one line and returns 77, which CTest reports as skipped (SKIP_RETURN_CODE 77), so a
// machine without a GPU runs `ctest -L cuda` to the end with every test skipped and none failed.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#include <cstdio>
#include <cuda/cuda_backend.hpp>

int main(int argc, char** argv) {
  if (carto::cuda::device_count() == 0) {
    std::puts("no CUDA device found; skipping");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
