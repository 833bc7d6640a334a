// GPU-cached routed experts (memory tiers, issue 14 item 3): a cached block's expert tensors live
// in host-visible memory and the GPU holds `expert_slots` of its experts in device-local slots
// laid out as the full tensor would be ([slot][expert bytes]), so the expert matvecs run
// unchanged on slot ids instead of expert ids. The step splits after the router's top-k, as for
// the CPU hand-off (cpu_experts.cpp): the host reads the routed ids, asks the block's SLRU
// (tiers::expert_slot_cache) for a slot per distinct expert, records the copies of the missed
// experts and the slot ids into a small command buffer and submits it with the recorded expert
// matvecs and the rest of the step: one fence wait per cached block and step, nothing allocated.
// A step routing more distinct experts than slots (a long prompt) computes that block on the CPU
// (the hand-off's kernels) instead: its uploads would evict experts the same step still reads.
#include <algorithm>
#include <cstring>

#include "backend_impl.hpp"
#include "pinned_copy.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

using namespace detail;

namespace {
int expert_part(std::string_view name) {
  if (name.find("ffn_gate_exps") != std::string_view::npos) return 0;
  if (name.find("ffn_up_exps") != std::string_view::npos) return 1;
  if (name.find("ffn_down_exps") != std::string_view::npos) return 2;
  return -1;
}
}  // namespace

void backend::impl::load_cached(const gguf::tensor_info& t, std::uint32_t layer, std::uint32_t id) {
  const int part = expert_part(t.name);
  if (part < 0 || t.ne[2] < 2 || t.ne[3] != 1)
    throw error("expert cache: tensor '" + std::string(t.name) + "' is not a gate, up or down expert tensor [n_in, n_out, n_expert]");
  const auto E = std::uint32_t(t.ne[2]);
  if (opt.expert_slots > E)
    throw error("--expert-cache " + std::to_string(opt.expert_slots) + ": '" + std::string(t.name) + "' has " +
                std::to_string(E) + " experts; the slots per layer must be 1.." + std::to_string(E));
  auto it = std::find_if(cached.begin(), cached.end(), [&](const cached_block& b) { return b.layer == layer; });
  if (it == cached.end()) it = cached.emplace(cached.end(), layer, E, opt.expert_slots);
  if (it->cache.experts() != E)
    throw error("expert cache: '" + std::string(t.name) + "' has " + std::to_string(E) + " experts, its layer's other expert tensors " +
                std::to_string(it->cache.experts()));
  if (t.data.size() % E) throw error("expert cache: '" + std::string(t.name) + "' is not a whole number of experts");
  const std::uint64_t eb = t.data.size() / E;
  it->weight[part] = id;
  it->expert_bytes[part] = eb;
  weight_entry e{&t, 0, 0, eb * opt.expert_slots};
  e.cache = std::int32_t(it - cached.begin());
  e.cache_cpu = std::int32_t(host->load(t));
  weights.push_back(e);
}

void backend::impl::upload_cached(std::uint32_t max_routed) {
  if (cached.empty()) return;
  std::uint32_t most = 0;
  std::vector<pinned_copy> copies;
  for (cached_block& b : cached) {
    for (int j = 0; j < 3; ++j) {
      if (b.weight[j] == ~0u)
        throw error("expert cache: layer " + std::to_string(b.layer) + " lacks its " + (j == 0 ? "gate" : j == 1 ? "up" : "down") +
                    " expert tensor");
      const weight_entry& e = weights.at(b.weight[j]);
      b.host[j] = gpu_buffer(ctx, e.info->data.size(), memory_kind::upload,
                             "host experts " + std::string(e.info->name));
      copies.push_back({e.info, e.info->data.size(), b.host[j].mapped()});
      cache_stats.host_bytes += e.info->data.size();
      cache_stats.slot_bytes += e.bytes;
    }
    most = std::max(most, b.cache.experts());
  }
  copy_pinned(copies);
  cache_seen.assign(most, 0);
  cache_slot_of.assign(most, 0);
  cache_distinct.reserve(most);
  for (auto& r : cache_regions) r.reserve(most);
  cache_ids_in = new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::readback, "expert cache: routed ids");
  cache_ids_out = new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::upload, "expert cache: slot ids");
  cache_stats.layers = std::uint32_t(cached.size());
  cache_stats.slots = opt.expert_slots;
}

void backend::impl::begin_cached_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x,
                                     const tensor& logits) {
  const std::uint32_t n = x.rows, C = x.cols, E = logits.cols, pairs = n * mp.n_used;
  flush_all();  // everything deferred runs before the split
  // x and the logits to the host too, for a step the CPU computes (more experts than slots).
  record_handoff_in(x, logits);
  // The routed expert ids (top-k's output) to the host, bit for bit: a transfer, not a shader.
  const vk::raii::CommandBuffer& c = recording_cmd();
  c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eTransferRead), {}, {});
  c.copyBuffer(buf(moe_ids).handle(), buf(cache_ids_in).handle(), vk::BufferCopy(0, 0, std::uint64_t(pairs) * 4));
  c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead), {}, {});
  rec.end();

  handoff& h = pending.handoffs.emplace_back();
  const auto cpu_index = [&](const weight* w) { return std::uint32_t(weights.at(w->id).cache_cpu); };
  h.task = {cpu_index(mw.gate_exps), cpu_index(mw.up_exps), cpu_index(mw.down_exps), mp, n, C, E};
  h.cache = weights.at(mw.gate_exps->id).cache;
  h.pairs = pairs;
  auto bufs = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 4));
  h.upload = std::move(bufs[0]);
  h.gpu = std::move(bufs[1]);
  h.cpu = std::move(bufs[2]);
  h.cmd = std::move(bufs[3]);
  rec.resume(h.gpu, "expert cache: slots (host work + submit)");
}

void backend::impl::end_cached_moe(const tensor& out) {
  flush_all();  // the combine into out, here: what follows cannot know which part ran
  for (auto& q : quantized) q.reset();
  rec.end();
  handoff& h = pending.handoffs.back();
  rec.resume(h.cpu, "expert cache: CPU overflow");
  const std::uint32_t C = out.cols;
  const copy_rows_pc po{C, 0, C, out.off, out.stride};
  const binding bo[] = {bind_id(hand_out, false), bind_id(hand_out, false), bind(out, true)};
  dispatch(copy_req(false), bo, &po, sizeof po, div_up(C, wg), out.rows);
  rec.end();
  rec.resume(h.cmd, "expert cache: continue");
}

void backend::impl::run_cached(handoff& h, bool last) {
  cached_block& b = cached.at(std::size_t(h.cache));
  const auto* ids = reinterpret_cast<const std::uint32_t*>(buf(cache_ids_in).mapped());
  const std::uint32_t E = b.cache.experts();
  ++cache_stamp;
  cache_distinct.clear();
  for (std::uint32_t p = 0; p < h.pairs; ++p) {
    const std::uint32_t e = ids[p];
    if (e >= E) throw error("expert cache: the GPU routed expert " + std::to_string(e) + " of " + std::to_string(E));
    if (cache_seen[e] != cache_stamp) {
      cache_seen[e] = cache_stamp;
      cache_distinct.push_back(e);
    }
  }
  if (cache_distinct.size() > b.cache.slots()) {  // the CPU computes this block for this step
    run_handoff_on_cpu(h);
    ++cache_stats.cpu_blocks;
    const vk::CommandBuffer parts[] = {*h.cpu, *h.cmd, last ? output_cmd() : vk::CommandBuffer{}};
    return submit_and_wait(std::span(parts, parts[2] ? 3 : 2));
  }
  b.cache.begin_step();
  for (auto& r : cache_regions) r.clear();
  for (const std::uint32_t e : cache_distinct) {
    const auto r = b.cache.access(e);
    cache_slot_of[e] = r.slot;
    if (r.hit) {
      ++cache_stats.hits;
      continue;
    }
    ++cache_stats.misses;
    cache_stats.evictions += r.evicted >= 0;
    for (int j = 0; j < 3; ++j) {
      const std::uint64_t eb = b.expert_bytes[j];
      cache_regions[j].push_back(vk::BufferCopy(e * eb, weights.at(b.weight[j]).offset + r.slot * eb, eb));
      cache_stats.bytes_uploaded += eb;
    }
  }
  auto* slots = reinterpret_cast<std::uint32_t*>(buf(cache_ids_out).mapped());
  for (std::uint32_t p = 0; p < h.pairs; ++p) slots[p] = cache_slot_of[ids[p]];
  h.upload.reset();
  h.upload.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  for (int j = 0; j < 3; ++j)
    if (!cache_regions[j].empty())
      h.upload.copyBuffer(b.host[j].handle(), chunks.at(weights.at(b.weight[j]).chunk).handle(), cache_regions[j]);
  h.upload.copyBuffer(buf(cache_ids_out).handle(), buf(moe_ids).handle(), vk::BufferCopy(0, 0, std::uint64_t(h.pairs) * 4));
  h.upload.end();
  ++cache_stats.gpu_blocks;
  const vk::CommandBuffer parts[] = {*h.upload, *h.gpu, *h.cmd, last ? output_cmd() : vk::CommandBuffer{}};
  submit_and_wait(std::span(parts, parts[3] ? 4 : 3));
}

}  // namespace strata::gpu
