// The MoE router's logits split around the O projection (the Vulkan backend's router product,
// runtime/vulkan/router_product.cpp): with x = h + W_o a the FFN norm's input (h the residual, a
// the attention's output) and rmsnorm(x) = x / rms(x) ⊙ w,
//   router · rmsnorm(x) = (R' h + M a) / rms(x),   R' = router · diag(w),   M = R' · W_o,
// so the logits need neither x nor its norm before the O projection has run: R' h can be computed
// before it and M a beside it, the 1 / rms once x's sum of squares is known.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/gguf/tensor_info.hpp"
#include "strata/quant/quantize_rows.hpp"

namespace strata::graph {

// out = [M (E rows of K) | R' (E rows of H)] in float for one layer's f32 router (ne {H, E}), FFN
// norm weight (f32, H) and O projection (any format, ne {K, H}). W_o is dequantized 16 rows at a
// time; each M row takes four rows' products in one pass over K.
inline void build_router_products(const gguf::tensor_info& router, const gguf::tensor_info& o, const gguf::tensor_info& norm,
                                  std::vector<float>& out) {
  const std::size_t E = router.ne[1], H = router.ne[0], K = o.ne[0];
  if (router.type != gguf::type_id::f32 || norm.type != gguf::type_id::f32 || norm.ne[0] != H || o.ne[1] != H)
    throw error("router products: router '" + std::string(router.name) + "' (f32 {H, E}), norm '" + std::string(norm.name) +
                "' (f32 {H}) and O projection '" + std::string(o.name) + "' ({K, H}) do not fit together");
  out.assign(E * (K + H), 0.0f);
  float* M = out.data();
  float* R = out.data() + E * K;
  std::vector<float> w(H);
  std::memcpy(w.data(), norm.data.data(), H * 4);
  for (std::size_t e = 0; e < E; ++e) {
    std::memcpy(R + e * H, router.data.data() + e * router.row_bytes(), H * 4);
    for (std::size_t j = 0; j < H; ++j) R[e * H + j] *= w[j];
  }
  constexpr std::size_t rows = 16;
  std::vector<float> wo(rows * K);
  for (std::size_t j0 = 0; j0 < H; j0 += rows) {
    const std::size_t nr = std::min(rows, H - j0);
    for (std::size_t j = 0; j < nr; ++j) quant::dequantize_rows(o.type, o.data.data() + (j0 + j) * o.row_bytes(), K, wo.data() + j * K);
    for (std::size_t e = 0; e < E; ++e) {
      float* m = M + e * K;
      const float* r = R + e * H + j0;
      std::size_t j = 0;
      for (; j + 4 <= nr; j += 4) {
        const float r0 = r[j], r1 = r[j + 1], r2 = r[j + 2], r3 = r[j + 3];
        const float *w0 = wo.data() + j * K, *w1 = w0 + K, *w2 = w1 + K, *w3 = w2 + K;
        for (std::size_t k = 0; k < K; ++k) m[k] += (r0 * w0[k] + r1 * w1[k]) + (r2 * w2[k] + r3 * w3[k]);
      }
      for (; j < nr; ++j)
        for (std::size_t k = 0; k < K; ++k) m[k] += r[j] * wo[j * K + k];
    }
  }
}

}  // namespace strata::graph
