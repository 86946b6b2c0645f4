// carto/profile/gpt.hpp — profile_gpt: the profile of one GPT training step from a GptConfig.
//
// Design note: profile_gpt(config, options) = profile_graph(build_gpt(config, options), options);
// both are defined beside the GPT builder in carto/layers/gpt.hpp (Gpt<Config>::profile needs
// them there); this header is where users of the profiler look for them.
#pragma once

#include "carto/layers/gpt.hpp"
#include "carto/profile/schedule.hpp"
