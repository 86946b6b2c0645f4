// carto/spec.hpp — the sharding-spec core in one include.
#pragma once

#include "carto/error.hpp"
#include "carto/spec/dtype.hpp"
#include "carto/spec/enumerate.hpp"
#include "carto/spec/layout.hpp"
#include "carto/spec/mesh.hpp"
#include "carto/spec/shape.hpp"
#include "carto/spec/sharding.hpp"
#include "carto/spec/text.hpp"
#include "carto/spec/typed.hpp"
