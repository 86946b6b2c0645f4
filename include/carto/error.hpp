// carto/error.hpp — the one error type of the library and the one checking helper.
//
// Design note: library code throws carto::Error; examples and tools catch it and print what().
// Every message names what was wrong and what would be right. The same helper checks status codes
// of CUDA, cuBLAS, NCCL and MPI calls (each backend passes its own "describe" function), so a
// failed call reads "<call> failed at <file>:<line>: <description>" whatever library it came from.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace carto {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {

template <class... Parts>
std::string concat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

// Not constexpr on purpose: a constexpr function that reaches it at compile time stops compilation
// at this call, and at run time it throws.
template <class... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(concat(std::forward<Parts>(parts)...));
}

template <class... Parts>
[[noreturn]] void fail_at(const char* file, int line, Parts&&... parts) {
  throw Error(concat(std::forward<Parts>(parts)..., " (", file, ":", line, ")"));
}

}  // namespace detail

// Checks a status code returned by a C API. `ok` is the success value; `describe` turns a status
// into text (cudaGetErrorString, ncclGetErrorString, MPI_Error_string wrapped in a lambda, ...).
template <class Status, class Describe>
void check_status(Status status, Status ok, const char* call, const char* file, int line,
                  Describe&& describe) {
  if (status != ok) {
    detail::fail(call, " failed at ", file, ":", line, ": ", describe(status), " (status ",
                 static_cast<long long>(status), ")");
  }
}

}  // namespace carto

// CARTO_CHECK(condition, message parts...): throws carto::Error naming the condition, the message
// and the source location when the condition is false.
#define CARTO_CHECK(condition, ...)                                             \
  do {                                                                          \
    if (!(condition)) {                                                         \
      ::carto::detail::fail_at(__FILE__, __LINE__,                              \
                               "check '" #condition "' failed: ", __VA_ARGS__); \
    }                                                                           \
  } while (false)

// CARTO_CHECK_STATUS(call, ok, describe): runs `call` once and checks its status code.
#define CARTO_CHECK_STATUS(call, ok, describe) \
  ::carto::check_status((call), (ok), #call, __FILE__, __LINE__, (describe))
