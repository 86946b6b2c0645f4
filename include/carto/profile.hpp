// carto/profile.hpp — the symbolic profiler in one include: per-op costs, the step schedule,
// GPT configurations and profile_gpt.
#pragma once

#include "carto/profile/gpt.hpp"
#include "carto/profile/op_cost.hpp"
#include "carto/profile/options.hpp"
#include "carto/profile/schedule.hpp"
