// The Vulkan backend's KV cache (per-layer K and V buffers, compressed caches' f16 window rings),
// the step-input buffer laid out in sections, the attention pipelines of the cache's types, and
// what is placed last from the memory that is left: decode routers and f16 weight copies.
#include "backend_impl.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>

#include "strata/core/error.hpp"
#include "strata/turboquant/format.hpp"

namespace strata::gpu {
namespace {

// Bytes of one head vector of a KV side (the CPU's kv_codec layout); throws for a head_dim the
// type cannot store.
std::uint64_t kv_head_bytes(kv::kv_type t, std::uint32_t d) {
  switch (t) {
    case kv::kv_type::f32: return std::uint64_t(d) * 4;
    case kv::kv_type::f16: return std::uint64_t(d) * 2;
    case kv::kv_type::q8_0:
      if (d % 32)
        throw error("KV cache type q8_0 needs a head_dim that is a multiple of 32; this model's head_dim is " +
                    std::to_string(d));
      return std::uint64_t(d) / 32 * 34;
    default:
      try {
        return turboquant::format(d, kv::turboquant_bits(t)).row_bytes();
      } catch (const error&) {
        throw error("KV cache type " + std::string(kv::name_of(t)) + " does not support this model's head_dim " +
                    std::to_string(d) + " (TurboQuant supports multiples of 16 up to 1024, e.g. 64, 80, 96, 128, 256)");
      }
  }
}

}  // namespace

using namespace detail;

kv_state backend::make_kv(const kv::kv_config& cfg) {
  auto& P = *p_;
  const std::uint32_t n_slots = (cfg.n_ctx + cfg.block_size - 1) / cfg.block_size * cfg.block_size;
  const std::uint64_t row = cfg.row_elems();
  // 16 bytes past the last row: attention_qdec reads a code row as the 16-byte words that cover it (QDEC_KVEC).
  const auto padded = [](std::uint64_t b) { return (b + 15) / 16 * 16 + 16; };
  const std::uint64_t k_bytes = padded(std::uint64_t(n_slots) * cfg.n_head_kv * kv_head_bytes(cfg.type_k, cfg.head_dim));
  const std::uint64_t v_bytes = padded(std::uint64_t(n_slots) * cfg.n_head_kv * kv_head_bytes(cfg.type_v, cfg.head_dim));
  const bool compressed = kv::is_compressed(cfg.type_k) || kv::is_compressed(cfg.type_v);
  if (compressed && (cfg.head_dim > 256 || cfg.head_dim % 16))
    throw error("Vulkan compressed KV cache supports head dimensions up to 256 in multiples of 16, the model has " +
                std::to_string(cfg.head_dim));
  kv_state::ring ring;
  ring.rows = compressed && cfg.full_precision_window ? cfg.full_precision_window + std::max<std::uint32_t>(cfg.max_batch, 1) : 0;
  const std::uint64_t ring_side = std::uint64_t(cfg.n_seq) * ring.rows * row * 2;
  const std::uint64_t ring_bytes = ring.rows ? ring_side * (kv::is_compressed(cfg.type_k) + kv::is_compressed(cfg.type_v)) +
                                                   std::uint64_t(cfg.n_seq) * ring.rows * 4
                                             : 0;
  const auto& info = P.ctx.info();
  if (k_bytes > info.max_storage_range || v_bytes > info.max_storage_range)
    throw error("KV cache of " + std::to_string(cfg.n_ctx) + " tokens needs " + gib_text(std::max(k_bytes, v_bytes)) +
                " per layer, more than '" + info.name + "' can bind (" + gib_text(info.max_storage_range) + "); use a smaller -c");
  const std::uint64_t total = (k_bytes + v_bytes + ring_bytes) * cfg.n_layer;
  if (info.device_local_bytes && total + P.stats.weight_bytes > info.device_local_bytes)
    throw error("KV cache of " + std::to_string(cfg.n_ctx) + " tokens needs " + gib_text(total) + " and the weights " +
                gib_text(P.stats.weight_bytes) + ", more than the " + gib_text(info.device_local_bytes) + " of '" + info.name +
                "'; use a smaller -c");
  std::vector<std::uint32_t> k, v;
  for (std::uint32_t l = 0; l < cfg.n_layer; ++l) {
    k.push_back(P.new_buffer(k_bytes, memory_kind::device, "KV cache K, layer " + std::to_string(l)));
    v.push_back(P.new_buffer(v_bytes, memory_kind::device, "KV cache V, layer " + std::to_string(l)));
  }
  if (ring.rows) {  // f16 window rings; tags start at ~0 (no position held)
    const std::vector<std::uint32_t> none(std::size_t(cfg.n_seq) * ring.rows, ~0u);
    uploader up(P.ctx, none.size() * 4);
    for (std::uint32_t l = 0; l < cfg.n_layer; ++l) {
      const std::string ls = ", layer " + std::to_string(l);
      ring.k.push_back(kv::is_compressed(cfg.type_k) ? P.new_buffer(ring_side, memory_kind::device, "KV window ring K" + ls) : 0);
      ring.v.push_back(kv::is_compressed(cfg.type_v) ? P.new_buffer(ring_side, memory_kind::device, "KV window ring V" + ls) : 0);
      ring.tags.push_back(P.new_buffer(none.size() * 4, memory_kind::device, "KV window ring tags" + ls));
      up.copy(std::as_bytes(std::span(none)), P.buf(ring.tags.back()).handle(), 0);
      up.flush();
    }
  }
  // Step buffer: batch inputs plus the block table of every sequence.
  P.max_blocks = n_slots / cfg.block_size;
  const std::uint64_t B = std::max<std::uint32_t>(P.max_rows, 1);
  auto section = [](std::uint64_t& at, std::uint64_t bytes) {
    const std::uint64_t o = at;
    at += (bytes + section_align - 1) / section_align * section_align;
    return o;
  };
  std::uint64_t at = 0;
  P.off_tokens = section(at, B * 4);
  P.off_pos = section(at, B * 4);
  P.off_slots = section(at, B * 4);
  P.off_seq_row = section(at, B * 4);
  P.off_out_rows = section(at, B * 4);
  P.blocks_bytes = std::uint64_t(cfg.n_seq) * P.max_blocks * 4;
  P.off_blocks = section(at, P.blocks_bytes);
  // STRATA_VK_STEP_HOST=1 (lab): in system memory, as before the BAR was preferred.
  const bool step_host = std::getenv("STRATA_VK_STEP_HOST") != nullptr;
  P.step = gpu_buffer(P.ctx, at, step_host ? memory_kind::upload : memory_kind::step, "per-step inputs");
  const auto defs = impl::kv_defs(cfg);
  const auto t1 = std::chrono::steady_clock::now();
  auto split_defs = defs, combine_defs = defs;
  split_defs.emplace_back("SPLIT", "1");
  combine_defs.emplace_back("COMBINE", "1");
  kv_state st(cfg, std::move(k), std::move(v), std::move(ring));
  if (compressed) {
    const auto qd = impl::kvq_defs(st);
    auto qsplit = qd;
    qsplit.emplace_back("SPLIT", "1");
    const pipeline_request reqs[] = {impl::req("kv_store_q", {}, impl::kv_encode_defs(st), 14),
                                     impl::req("attn_prep", {}, impl::kv_encode_defs(st), 14),
                                     impl::req("attention_q", {}, qd, 11),
                                     impl::req("attention_q", {}, qsplit, 11), impl::req("attention", {}, combine_defs, 8)};
    P.pipes.prepare(reqs);
  } else {
    const pipeline_request reqs[] = {impl::req("kv_store", {}, defs, 6), impl::req("attn_prep", {}, defs, 10),
                                     impl::req("attention", {}, defs, 8),
                                     impl::req("attention", {}, split_defs, 8), impl::req("attention", {}, combine_defs, 8)};
    P.pipes.prepare(reqs);
  }
  // Decode routers without their own level (moe_ffn, router_product.cpp): built last, from what the
  // budget leaves once the weights, the KV cache and the scratch are placed.
  if (P.router_product && P.rms_sq[0] && !P.router_product_parts) {
    P.make_router_products();
    if (P.router_product_parts) P.pipes.prepare(std::vector{impl::router_product_req(false), impl::router_product_req(true)});
  }
  P.stats.pipelines_ms += ms_since(t1);
  P.stats.pipelines = std::uint32_t(P.pipes.size());
  P.stats.spirv_compiled = P.pipes.compiler().compiled();
  P.stats.spirv_cached = P.pipes.compiler().cache_hits();
  // f16 copies for prompt steps (f16_copies.cpp): from what is left once everything else is placed.
  P.make_f16_copies();
  return st;
}

}  // namespace strata::gpu
