// A MoE layer's router products on the GPU (backend_tuning::router_product; built and recorded in
// router_product.cpp, the math in strata/graph/router_product.hpp).
#pragma once
#include <cstdint>

namespace strata::gpu {

struct router_product_t {
  std::uint32_t buf = 0;                          // buffer id: M's rows (E x k), then R''s (E x hidden); 0: none
  std::uint32_t o_id = 0, norm_id = 0;            // the weights it was built from (checked where it is used)
  std::uint32_t experts = 0, hidden = 0, k = 0;   // E, the residual's width, the O projection's input width
};

}  // namespace strata::gpu
