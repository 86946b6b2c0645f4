// The backend of the CPU kernel tests: the generic test bodies (kernel_support.hpp) run on one
// CpuBackend, constructed on first use and shared by every test case of the executable.
#include <cpu/cpu_backend.hpp>

#include "kernels/kernel_support.hpp"

namespace carto::test {

Backend& test_backend() {
  static cpu::CpuBackend backend;
  return backend;
}

std::string_view test_backend_name() { return "cpu"; }

}  // namespace carto::test
