// Begins a region whose float code is compiled without contraction into fused multiply-add
// (no include guard: included in pairs with fp_exact_pop.hpp, like Eigen's
// DisableStupidWarnings.h). ggml's reference quantizers round every product before adding;
// GCC in GNU mode (-ffp-contract=fast) and clang (=on) fuse a·b + c when FMA is enabled,
// which flips codes and changes quantized bytes. Only quantizers sit inside such regions.
#if defined(__clang__)
#pragma float_control(push)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
// MSVC needs nothing: it contracts only under /fp:fast or /fp:contract.
