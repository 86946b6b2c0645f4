// carto/search.hpp — strategy enumeration, the evaluation of one strategy per op, the exact DP, the
// brute-force reference and the joint search with its Plan, in one include.
#pragma once

#include "carto/search/brute_force.hpp"
#include "carto/search/dp.hpp"
#include "carto/search/evaluate.hpp"
#include "carto/search/plan.hpp"
#include "carto/search/strategy.hpp"
