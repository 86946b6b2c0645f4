// cpu/kernel_checks.hpp — shape checks and index helpers shared by the CPU kernels (internal).
//
// Design note: every kernel validates its views before touching memory and throws carto::Error
// naming the call and the shapes; these helpers keep those messages uniform.
#pragma once

#include <carto/runtime/backend.hpp>
#include <carto/runtime/kernel_checks.hpp>
#include <cstdint>
#include <string_view>

namespace carto::cpu::detail {

// The shared checks (carto/runtime/kernel_checks.hpp), under the names the kernels use.
using kernel_checks::extents_of;
using kernel_checks::last_extent;
using kernel_checks::require_numel;
using kernel_checks::require_same_shape;

}  // namespace carto::cpu::detail
