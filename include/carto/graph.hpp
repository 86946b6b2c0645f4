// carto/graph.hpp — the op IR in one include.
#pragma once

#include "carto/graph/einsum.hpp"
#include "carto/graph/graph.hpp"
