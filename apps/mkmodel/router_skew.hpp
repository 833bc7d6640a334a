// `strata-mkmodel --router skewed`: router rows scaled so that top-k routing is skewed the way a
// trained model's is, instead of the near-uniform routing of random weights (the worst case for
// an expert cache). The target shape is the planner's routing prior (strata/tiers/routing_prior.hpp:
// one published measurement of Qwen3-30B-A3B, scaled by the expert count).
// What weights alone cannot give: temporal locality (consecutive tokens reusing experts) comes
// from hidden states, not from the router, so it is not modelled here.
#pragma once
#include <cstdint>
#include <vector>

namespace strata::mkmodel {

// Target share of the routing mass per popularity rank (sums to 1): tiers::routing_shares.
std::vector<double> skewed_router_shares(std::uint32_t n_expert, std::uint32_t k);

// Row scales by popularity rank such that, for router inputs whose projections on the rows are
// independent and equally spread (isotropic hidden states), the rank-r expert's top-k selection
// rate matches k x its target share. Fitted by Monte Carlo with fixed seeds (same numbers every
// run); once per model, as every MoE layer has the same n and k.
std::vector<float> skewed_router_rank_scales(std::uint32_t n_expert, std::uint32_t k);

// The rank scales given to one layer's experts in an order shuffled by `seed`.
std::vector<float> scales_for_layer(const std::vector<float>& rank_scales, std::uint64_t seed);

// Top-k selection counts of `tokens` draws of independent N(0, scale_e^2) logits (the model the
// fit assumes); exposed for tests.
std::vector<double> simulate_router(const std::vector<float>& scales, std::uint32_t k, std::uint32_t tokens,
                                    std::uint64_t seed);

}  // namespace strata::mkmodel
