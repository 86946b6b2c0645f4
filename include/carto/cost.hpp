// carto/cost.hpp — the cost model in one include: hardware profiles, the compute roofline,
// collective costs and shortest-path resharding.
#pragma once

#include "carto/cost/collectives.hpp"
#include "carto/cost/hardware.hpp"
#include "carto/cost/reshard.hpp"
