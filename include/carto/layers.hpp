// carto/layers.hpp — the layer templates in one include.
#pragma once

#include "carto/layers/attention.hpp"
#include "carto/layers/basic.hpp"
#include "carto/layers/embedding.hpp"
#include "carto/layers/gpt.hpp"
#include "carto/layers/llama.hpp"
#include "carto/layers/sequential.hpp"
#include "carto/layers/transformer.hpp"
