// carto/search.hpp — strategy enumeration and the evaluation of one strategy per op, in one include.
#pragma once

#include "carto/search/evaluate.hpp"
#include "carto/search/strategy.hpp"
