// Decode's MoE router with no level of its own (backend_tuning::router_product, router_product.glsl).
// The router's logits over the FFN norm of x = h + W_o a are (R' h + M a) / rms(x), R' the router
// times the norm's weight and M = R' W_o: both products are built here at load, R' h is recorded
// beside the attention (h is the residual the O projection then adds into in place), M a beside the
// O projection (reading the projection's own int8 input), and the gate/up matvec's top-k adds the
// two parts and applies the 1 / rms from the projection's NORM_OUT block sums. The MoE layer loses
// the router's level and the experts' input quantize's: its O projection writes the norm's codes.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend_impl.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/quant/quantize_rows.hpp"

namespace strata::gpu {
namespace {

struct product_layer {
  std::uint32_t router = 0, o = 0, norm = 0;  // weight ids
};

// out = [M (E x K) | R' (E x H)] for one layer: R' = router x diag(norm), M = R' x W_o (W_o: H rows
// of K, dequantized 16 rows at a time; each M row takes 16 rows' products in one pass over K).
void build_products(const gguf::tensor_info& router, const gguf::tensor_info& o, const gguf::tensor_info& norm,
                    std::vector<float>& out) {
  const std::size_t E = router.ne[1], H = router.ne[0], K = o.ne[0];
  out.assign(E * (K + H), 0.0f);
  float* M = out.data();
  float* R = out.data() + E * K;
  std::vector<float> w(H);
  std::memcpy(w.data(), norm.data.data(), H * 4);
  for (std::size_t e = 0; e < E; ++e) {
    const std::byte* row = router.data.data() + e * router.row_bytes();
    for (std::size_t j = 0; j < H; ++j) {
      float r;
      std::memcpy(&r, row + j * 4, 4);
      R[e * H + j] = r * w[j];
    }
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

}  // namespace

void backend::impl::make_router_products() {
  std::unordered_map<std::string_view, std::uint32_t> by_name;
  for (std::uint32_t i = 0; i < weights.size(); ++i) by_name.emplace(weights[i].info->name, i);
  const auto resident = [&](std::uint32_t id) {
    const weight_entry& e = weights[id];
    return e.host < 0 && e.cache < 0 && e.stream < 0 && e.xstream < 0;
  };
  std::vector<product_layer> layers;
  std::uint32_t widest = 0;
  for (std::uint32_t i = 0; i < weights.size(); ++i) {
    const gguf::tensor_info& r = *weights[i].info;
    if (!r.name.ends_with("ffn_gate_inp.weight") || r.type != gguf::type_id::f32 || r.ne[2] != 1 || r.ne[1] > 256 || r.ne[1] % 4 ||
        !resident(i))
      continue;
    const std::string pre(r.name.substr(0, r.name.size() - std::string_view("ffn_gate_inp.weight").size()));
    const auto o = by_name.find(pre + "attn_output.weight"), nw = by_name.find(pre + "ffn_norm.weight"),
               gate = by_name.find(pre + "ffn_gate_exps.weight");
    if (o == by_name.end() || nw == by_name.end() || gate == by_name.end() || !resident(o->second) || !resident(gate->second))
      continue;
    const gguf::tensor_info &ot = *weights[o->second].info, &nt = *weights[nw->second].info;
    // The O projection is an integer matvec whose rows are the residual's (the parts read its int8 input).
    if (!int8_unit(ot.type) || ot.ne[1] != r.ne[0] || ot.ne[0] % 32 || ot.ne[0] > max_k || r.ne[0] % 32 ||
        nt.type != gguf::type_id::f32 || nt.ne[0] != r.ne[0])
      continue;
    layers.push_back({i, o->second, nw->second});
    widest = std::max(widest, std::uint32_t(r.ne[1]));
  }
  if (layers.empty()) return;
  // Products the --gpu-budget cannot hold beside what is placed are left out: the routers keep their dispatch.
  std::uint64_t bytes = std::uint64_t(router_part_tokens) * 2 * widest * 4;
  for (const product_layer& l : layers) {
    const gguf::tensor_info &r = *weights[l.router].info, &o = *weights[l.o].info;
    bytes += std::uint64_t(r.ne[1]) * (r.ne[0] + o.ne[0]) * 4;
  }
  if (const auto& ledger = ctx.ledger(); ledger.budget && ledger.total() + bytes > ledger.budget) {
    std::fprintf(stderr, "strata: STRATA_VK_ROUTER_PRODUCT: the routers' products (%s) do not fit the GPU budget; the routers keep their dispatch\n",
                 format_byte_size(bytes).c_str());
    return;
  }
  // The products of every layer on the host's threads, each layer's uploaded into its own buffer.
  std::vector<std::vector<float>> host(layers.size());
  std::atomic<std::size_t> next{0};
  const std::size_t n_threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, layers.size());
  {
    std::vector<std::jthread> pool;
    for (std::size_t t = 0; t < n_threads; ++t)
      pool.emplace_back([&] {
        for (std::size_t l; (l = next.fetch_add(1)) < layers.size();)
          build_products(*weights[layers[l].router].info, *weights[layers[l].o].info, *weights[layers[l].norm].info, host[l]);
      });
  }
  router_products.assign(weights.size(), {});
  std::uint64_t largest = 0;
  for (const auto& h : host) largest = std::max<std::uint64_t>(largest, h.size() * 4);
  uploader up(ctx, std::clamp<std::uint64_t>(largest, 64ull << 10, uploader::default_staging_bytes));
  for (std::size_t l = 0; l < layers.size(); ++l) {
    const gguf::tensor_info& r = *weights[layers[l].router].info;
    router_product_t& p = router_products[layers[l].router];
    p.buf = new_buffer(host[l].size() * 4, memory_kind::device, "MoE router products (" + std::string(r.name) + ")");
    p.o_id = layers[l].o;
    p.norm_id = layers[l].norm;
    p.experts = std::uint32_t(r.ne[1]);
    p.hidden = std::uint32_t(r.ne[0]);
    p.k = std::uint32_t(weights[layers[l].o].info->ne[0]);
    up.copy(std::as_bytes(std::span(host[l])), buf(p.buf).handle(), 0);
    std::vector<float>().swap(host[l]);
  }
  up.flush();
  router_product_parts = new_buffer(std::uint64_t(router_part_tokens) * 2 * widest * 4, memory_kind::device, "MoE router product parts");
}

pipeline_request backend::impl::router_product_req(bool q8) {
  pipeline_request r = req("router_product", {}, {{"WG", "128"}}, 4);
  if (q8) r.defines.emplace_back("INPUT_Q8", "1");
  return r;
}

// Decode's MoE layer (moe_ffn): R' h now, beside the attention; then the O projection waiting with
// the FFN norm's first half in its NORM_OUT form (record_norm_out_projection) and M a beside it.
// False: no products for this router or the projection cannot take the form; R' h may then have
// run for nothing (its part is never read), and the router runs as its own dispatch.
bool backend::impl::record_router_product(const weight& router, const tensor& x, const tensor& scratch) {
  if (!router_product_parts || router.id >= router_products.size() || !router_products[router.id].buf || combine ||
      mats.size() != 1 || !mats.back().norm_out || !same(mats.back().norm_out->y, x))
    return false;
  const router_product_t& rp = router_products[router.id];
  const pending_matmul& m = mats.back();
  if (m.w->id != rp.o_id || !m.norm_out->w || m.norm_out->w->id != rp.norm_id || !m.residual || m.norm || m.up ||
      x.rows > router_part_tokens || m.x.rows != x.rows || m.x.cols != rp.k || m.residual->cols != rp.hidden ||
      m.residual->off % 4 || m.residual->stride % 4)
    return false;
  const tensor h = *m.residual, a = m.x;
  const std::uint32_t n = x.rows, E = rp.experts;
  // R' h: part 0. Its write is disjoint from M a's part 1, so no barrier falls between them; M a's
  // tracked write puts the gate/up matvec that reads both behind a barrier that covers both.
  const router_product_pc hp{rp.hidden, E * rp.k / 4, h.off / 4, h.stride / 4, 0, 0, 0, 2 * E};
  binding hb[] = {bind_id(rp.buf, false), bind(h, false), bind(h, false), bind_id(router_product_parts, true)};
  hb[3].disjoint = true;
  dispatch(router_product_req(false), hb, &hp, sizeof hp, E, n);
  const std::uint32_t sl = quantize_input(a, nullptr, 0.0f);  // the projection's own input codes
  if (!record_norm_out_projection(nullptr, x, scratch)) return false;
  const router_product_pc ap{rp.k, 0, 0, max_k / 16, 0, max_k / 32, E, 2 * E};
  const binding ab[] = {bind_id(rp.buf, false), bind_id(xq[sl], false), bind_id(xs[sl], false), bind_id(router_product_parts, true)};
  dispatch(router_product_req(true), ab, &ap, sizeof ap, E, n);
  return true;
}

}  // namespace strata::gpu
