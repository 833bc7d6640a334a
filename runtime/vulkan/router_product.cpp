// Decode's MoE router with no level of its own (backend_tuning::router_product, router_product.glsl).
// The router's logits over the FFN norm of x = h + W_o a are (R' h + M a) / rms(x), R' the router
// times the norm's weight and M = R' W_o: both products are built here at load, R' h is recorded
// beside the attention (h is the residual the O projection then adds into in place), M a beside the
// O projection (reading the projection's own int8 input), and the gate/up matvec's top-k adds the
// two parts and applies the 1 / rms from the projection's NORM_OUT block sums. The MoE layer loses
// the router's level and the experts' input quantize's: its O projection writes the norm's codes.
#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "backend_impl.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/graph/router_product.hpp"

namespace strata::gpu {
namespace {

struct product_layer {
  std::uint32_t router = 0, o = 0, norm = 0;  // weight ids
};

}  // namespace

void backend::impl::make_router_products() {
  std::unordered_map<std::string_view, std::uint32_t> by_name;
  for (std::uint32_t i = 0; i < weights.size(); ++i) by_name.emplace(weights[i].info->name, i);
  const auto resident = [&](std::uint32_t id) { return impl::resident(weights[id]); };
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
    if (o == by_name.end() || nw == by_name.end() || gate == by_name.end() || !resident(o->second)) continue;
    // GPU-cached experts read through their slot maps run the resident experts' decode path.
    if (!resident(gate->second) && !(weights[gate->second].cache >= 0 && cache_lookup)) continue;
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
  // The products on the host's threads, a layer each, uploaded a round of layers at a time (host memory: one
  // round's products, not the model's), each layer's into its own buffer.
  router_products.assign(weights.size(), {});
  const std::size_t n_threads = std::clamp<std::size_t>(std::thread::hardware_concurrency(), 1, layers.size());
  std::vector<std::vector<float>> host(n_threads);
  uploader up(ctx, uploader::default_staging_bytes);
  for (std::size_t first = 0; first < layers.size(); first += n_threads) {
    const std::size_t round = std::min(n_threads, layers.size() - first);
    {
      std::vector<std::jthread> pool;
      for (std::size_t t = 0; t < round; ++t)
        pool.emplace_back([&, t] {
          const product_layer& l = layers[first + t];
          graph::build_router_products(*weights[l.router].info, *weights[l.o].info, *weights[l.norm].info, host[t]);
        });
    }
    for (std::size_t t = 0; t < round; ++t) {
      const product_layer& l = layers[first + t];
      const gguf::tensor_info& r = *weights[l.router].info;
      router_product_t& p = router_products[l.router];
      p.buf = new_buffer(host[t].size() * 4, memory_kind::device, "MoE router products (" + std::string(r.name) + ")");
      p.o_id = l.o;
      p.norm_id = l.norm;
      p.experts = std::uint32_t(r.ne[1]);
      p.hidden = std::uint32_t(r.ne[0]);
      p.k = std::uint32_t(weights[l.o].info->ne[0]);
      up.copy(std::as_bytes(std::span(host[t])), buf(p.buf).handle(), 0);
    }
    up.flush();  // the round's host copies are reused by the next
  }
  router_product_parts = new_buffer(std::uint64_t(router_part_tokens) * 2 * widest * 4, memory_kind::device, "MoE router product parts");
}

pipeline_request kernel_variants::router_product_req(bool q8) {
  pipeline_request r = req("router_product", {}, {{"WG", "128"}}, 4);
  if (q8) r.defines.emplace_back("INPUT_Q8", "1");
  return r;
}

// Decode's MoE layer (moe_ffn): R' h now, beside the attention; then the O projection waiting with
// the FFN norm's first half in its NORM_OUT form (record_norm_out_projection) and M a beside it.
// False: no products for this router, or the projection cannot take the form (then nothing is
// recorded here, except where a projection that owns whole blocks is recorded by record_matmul
// without NORM_OUT after all: R' h then ran for nothing, its part never read).
bool backend::impl::record_router_product(const weight& router, const tensor& x, const tensor& scratch) {
  const pending_matmul* waiting = norm_out_projection(x);
  if (!waiting || !router_product_parts || router.id >= router_products.size() || !router_products[router.id].buf) return false;
  const router_product_t& rp = router_products[router.id];
  const pending_matmul& m = *waiting;
  if (m.w->id != rp.o_id || !m.norm_out->w || m.norm_out->w->id != rp.norm_id || !m.residual || m.norm || m.up ||
      x.rows > router_part_tokens || m.x.rows != x.rows || m.x.cols != rp.k || m.residual->cols != rp.hidden ||
      m.residual->off % 4 || m.residual->stride % 4 || (m.norm_out_by_tails && !block_tail_projection_req(m, scratch)))
    return false;
  const tensor h = *m.residual, a = m.x;
  const std::uint32_t n = x.rows, E = rp.experts;
  // R' h (part 0) before the projection adds into h in place: that write puts a barrier after it,
  // and the gate/up matvec reading both parts waits behind M a's.
  const router_product_pc hp{.K = rp.hidden, .w_off = E * rp.k / 4, .x_off = h.off / 4, .x_stride = h.stride / 4,
                             .s_off = 0, .s_stride = 0, .out_off = 0, .out_stride = 2 * E};
  const binding hb[] = {bind_id(rp.buf, false), bind(h, false), bind(h, false), bind_id(router_product_parts, true)};
  dispatch(router_product_req(false), hb, &hp, sizeof hp, E, n);
  const std::uint32_t sl = quantize_input(a, nullptr, 0.0f);  // the projection's own input codes
  if (!record_norm_out_projection(nullptr, x, scratch)) return false;
  const router_product_pc ap{.K = rp.k, .w_off = 0, .x_off = 0, .x_stride = max_k / 16, .s_off = 0, .s_stride = max_k / 32,
                             .out_off = E, .out_stride = 2 * E};
  const binding ab[] = {bind_id(rp.buf, false), bind_id(xq[sl], false), bind_id(xs[sl], false), bind_id(router_product_parts, true)};
  dispatch(router_product_req(true), ab, &ap, sizeof ap, E, n);
  return true;
}

}  // namespace strata::gpu
