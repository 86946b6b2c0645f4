// carto/search.hpp — strategy enumeration, the evaluation and pricing of one strategy per op, the
// stated search spaces, the DP and the joint search with its Plan and plan files, in one include.
#pragma once

#include "carto/search/dp.hpp"
#include "carto/search/evaluate.hpp"
#include "carto/search/outer_loop.hpp"
#include "carto/search/plan.hpp"
#include "carto/search/plan_io.hpp"
#include "carto/search/price.hpp"
#include "carto/search/space.hpp"
#include "carto/search/strategy.hpp"
