// Helpers shared by the cost-model tests.
#pragma once

#include <algorithm>
#include <carto/error.hpp>
#include <cmath>
#include <string>

namespace carto::test {

// The message of the carto::Error that f() throws, or "(no error)".
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

// Costs here are sums of at most a few dozen positive doubles (one division, one multiplication
// and one addition per term); two evaluations of the same sum in different orders or forms differ
// by at most (terms · 2^-53) relative, so 1e-12 relative separates rounding from a real difference
// (the smallest real differences in these tests are ~1e-3 relative).
inline constexpr double kRel = 1e-12;
inline bool close(double a, double b) {
  return std::fabs(a - b) <= kRel * std::max(std::fabs(a), std::fabs(b));
}
inline bool leq(double a, double b) { return a <= b + kRel * std::fabs(b); }

}  // namespace carto::test
