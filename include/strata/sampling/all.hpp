// Sampling module umbrella: llama.cpp-compatible samplers over a logits row (chain.hpp is the
// entry point) and the stop conditions of a generation request.
#pragma once
#include "strata/sampling/candidates.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/sampling/dist.hpp"
#include "strata/sampling/greedy.hpp"
#include "strata/sampling/logit_bias.hpp"
#include "strata/sampling/logprobs.hpp"
#include "strata/sampling/min_p.hpp"
#include "strata/sampling/penalties.hpp"
#include "strata/sampling/rng.hpp"
#include "strata/sampling/sampler_params.hpp"
#include "strata/sampling/softmax.hpp"
#include "strata/sampling/stop.hpp"
#include "strata/sampling/temperature.hpp"
#include "strata/sampling/top_k.hpp"
#include "strata/sampling/top_p.hpp"
