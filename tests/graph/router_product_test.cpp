// strata/graph/router_product.hpp: the products R' = router · diag(w) and M = R' · W_o against a
// float64 reference on random weights (K != H, so a swapped dimension cannot pass), and the
// identity they serve: router · rmsnorm(h + W_o a) = (R' h + M a) / rms(h + W_o a).
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "strata/graph/router_product.hpp"
#include "strata/quant/quantize_rows.hpp"
#include "support/error_of.hpp"

using namespace strata;

namespace router_product_test {

gguf::tensor_info info(const char* name, gguf::type_id t, std::uint64_t ne0, std::uint64_t ne1, const std::vector<std::byte>& bytes) {
  gguf::tensor_info ti;
  ti.name = name;
  ti.type = t;
  ti.n_dims = ne1 > 1 ? 2 : 1;
  ti.ne = {ne0, ne1, 1, 1};
  ti.nbytes = bytes.size();
  ti.data = bytes;
  return ti;
}

std::vector<std::byte> as_bytes(const std::vector<float>& v) {
  std::vector<std::byte> b(v.size() * 4);
  std::memcpy(b.data(), v.data(), b.size());
  return b;
}

}  // namespace router_product_test

TEST_CASE("router products: R' and M against float64 on random weights, and the logits they give") {
  using namespace router_product_test;
  constexpr std::size_t E = 8, H = 64, K = 96;  // experts, residual width, the O projection's input width
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> router(E * H), norm(H), wo(H * K), h(H), a(K);
  for (auto* v : {&router, &norm, &wo, &h, &a})
    for (auto& x : *v) x = nd(rng);
  for (auto& x : norm) x = 1.0f + 0.25f * x;
  const auto rb = as_bytes(router), nb = as_bytes(norm);
  std::vector<std::byte> ob(H * quant::row_bytes(gguf::type_id::q8_0, K));
  quant::quantize_rows(gguf::type_id::q8_0, wo.data(), H, K, {}, ob.data());
  std::vector<float> wq(H * K);  // the O projection as the engine sees it
  quant::dequantize_rows(gguf::type_id::q8_0, ob.data(), H * K, wq.data());
  const auto ri = info("blk.0.ffn_gate_inp.weight", gguf::type_id::f32, H, E, rb);
  const auto ni = info("blk.0.ffn_norm.weight", gguf::type_id::f32, H, 1, nb);
  const auto oi = info("blk.0.attn_output.weight", gguf::type_id::q8_0, K, H, ob);
  std::vector<float> out;
  graph::build_router_products(ri, oi, ni, out);
  REQUIRE(out.size() == E * (K + H));
  double err = 0, ref_sq = 0;
  for (std::size_t e = 0; e < E; ++e) {
    for (std::size_t k = 0; k < K; ++k) {
      double m = 0;
      for (std::size_t j = 0; j < H; ++j) m += double(router[e * H + j]) * norm[j] * wq[j * K + k];
      err += (out[e * K + k] - m) * (out[e * K + k] - m);
      ref_sq += m * m;
    }
    for (std::size_t j = 0; j < H; ++j) CHECK(out[E * K + e * H + j] == doctest::Approx(double(router[e * H + j]) * norm[j]).epsilon(1e-6));
  }
  CHECK(err / ref_sq < 1e-12);
  // The logits: the router over rmsnorm(x) directly, and from the two parts and x's rms.
  std::vector<double> x(H);
  double ss = 0;
  for (std::size_t j = 0; j < H; ++j) {
    x[j] = h[j];
    for (std::size_t k = 0; k < K; ++k) x[j] += double(wq[j * K + k]) * a[k];
    ss += x[j] * x[j];
  }
  const double eps = 1e-6, rs = 1.0 / std::sqrt(ss / H + eps);
  for (std::size_t e = 0; e < E; ++e) {
    double direct = 0, parts = 0;
    for (std::size_t j = 0; j < H; ++j) direct += double(router[e * H + j]) * x[j] * rs * norm[j];
    for (std::size_t j = 0; j < H; ++j) parts += double(out[E * K + e * H + j]) * h[j];
    for (std::size_t k = 0; k < K; ++k) parts += double(out[e * K + k]) * a[k];
    CHECK(parts * rs == doctest::Approx(direct).epsilon(1e-5));
  }
}

TEST_CASE("router products: tensors that do not fit together are refused, naming them") {
  using namespace router_product_test;
  const std::vector<float> r(8 * 64, 1.0f), n(32, 1.0f), o(64 * 96, 1.0f);
  const auto rb = as_bytes(r), nb = as_bytes(n), ob = as_bytes(o);
  std::vector<float> out;
  const auto msg = test::error_of([&] {
    graph::build_router_products(info("blk.3.ffn_gate_inp.weight", gguf::type_id::f32, 64, 8, rb),
                                 info("blk.3.attn_output.weight", gguf::type_id::f32, 96, 64, ob),
                                 info("blk.3.ffn_norm.weight", gguf::type_id::f32, 32, 1, nb), out);
  });
  CHECK(msg.find("blk.3.ffn_norm.weight") != std::string::npos);
  CHECK(msg.find("do not fit") != std::string::npos);
}
