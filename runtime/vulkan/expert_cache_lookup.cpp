// GPU-cached experts read through a slot map on the GPU (the lookup form; issue 14 item 3).
// The split form (expert_cache.cpp) stops the step after each cached block's router, so the host
// can map the routed ids to slots and upload the misses: one host round trip a cached block and
// step, ~90 us each on the H200, 48 of them a token on qwen3-30b-a3b. Here the expert matvecs map
// the ids themselves: each cached block has a map on the GPU ([0] the host copy's gate-to-up
// offset, [1 + e] expert e's slot or -1), and a workgroup whose expert has no slot reads it from
// the block's host copy of every expert over PCIe (mmvq.glsl W_CACHED, binding 0's second
// source). The step is recorded once and replayed like an all-GPU step.
// The cache still learns: the down matvec logs each pair's expert, the layers' part copies the
// logs to the host, and after the step the host counts the routing (decayed per token) and
// admits missed experts whose count beats the SLRU victim's by a margin, within an upload
// budget. The next step's submit first copies the admitted experts into their slots and
// rewrites the changed maps (cache_update_cmd), so no kernel ever reads a slot while it changes.
// Placement never changes the math: slot or host copy, the bytes are the expert's.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>

#include "backend_impl.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

using namespace detail;

float env_float(const char* name, float fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const float f = std::strtof(v, &end);
  if (*end || !std::isfinite(f) || f < 0) throw error(std::string(name) + "='" + v + "': expected a number >= 0");
  return f;
}

void backend::impl::cache_moved(cached_block& b, std::uint32_t e, std::uint32_t slot, std::int32_t evicted) {
  if (b.map.empty()) return;
  if (evicted >= 0) b.map.at(1 + std::size_t(evicted)) = -1;
  b.map.at(1 + std::size_t(e)) = std::int32_t(slot);
  b.map_dirty = true;
}

namespace {
// A lookup block's expert e as the GPU sees it now: in a slot (its map entry), else read from host memory.
bool mapped(const cached_block& b, std::uint32_t e) { return b.map.at(1 + std::size_t(e)) >= 0; }
}  // namespace

void backend::impl::init_cache_lookup(std::uint32_t max_routed) {
  cache_lookup = ctx.info().storage_array_indexing;
  if (const char* v = std::getenv("STRATA_VK_CACHE_LOOKUP")) cache_lookup = cache_lookup && std::string_view(v) != "0";
  if (!cache_lookup) return;
  const std::uint64_t align = std::max<std::uint64_t>(ctx.info().min_storage_align, 4);
  const auto aligned = [&](std::uint64_t v) { return (v + align - 1) / align * align; };
  std::uint32_t most = 0;
  bool any = false;
  for (cached_block& b : cached) {
    // The kernels address a binding with 32-bit byte offsets, and a binding must start aligned.
    const std::uint64_t limit = std::min<std::uint64_t>(ctx.info().max_storage_range, 0xFFFFFFFFull);
    b.lookup = b.host_gate_up.size() <= limit && b.host_down.size() <= limit && b.up_at % align == 0 &&
               b.up_at <= 0x7FFFFFFFull;
    any |= b.lookup;
    most = std::max(most, b.cache.experts());
  }
  if (!any) {
    cache_lookup = false;
    return;
  }
  cache_stats.lookup = true;
  cache_map_stride = aligned((std::uint64_t(most) + 1) * 4);
  cache_log_stride = aligned(std::uint64_t(std::max(max_routed, 1u)) * 4);
  cache_map_buf = new_buffer(cached.size() * cache_map_stride, memory_kind::device, "expert cache: slot maps");
  cache_log_buf = new_buffer(cached.size() * cache_log_stride, memory_kind::device, "expert cache: routing logs");
  cache_log_host = new_buffer(cached.size() * cache_log_stride, memory_kind::readback, "expert cache: routing logs to the host");
  cache_counts.assign(most, 0);
  cache_candidates.reserve(most);
  auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 2));
  cache_update = std::move(cmds[0]);
  cache_side = std::move(cmds[1]);
  // On by default where decode's misses go to the CPU (expert_cache_misses.cpp): an admitted
  // expert there is large (Scout's 70.8 MB: ~2 ms over PCIe), and the step's chain should not wait for it.
  // Not where a block keeps the split form: its run_cached would take an expert whose copy is in flight for a hit.
  bool async = cache_cpu_misses > 0 && std::all_of(cached.begin(), cached.end(), [](const cached_block& b) { return b.lookup; });
  if (const char* v = std::getenv("STRATA_VK_CACHE_ASYNC")) async = std::string_view(v) == "1";
  if (async && ctx.side_queue() && ctx.info().timeline) {
    cache_async = true;
    const vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
    cache_timeline = vk::raii::Semaphore(ctx.device(), vk::SemaphoreCreateInfo({}, &type));
  }
  // The slots start empty and fill with the first experts routed (within the budget): on the H200
  // (session 53) slots that started with each block's first experts held mostly cold ones, which
  // the counts then had to beat one admission at a time.
  for (cached_block& b : cached) {
    b.map.assign(std::size_t(b.cache.experts()) + 1, -1);
    b.map[0] = std::int32_t(b.up_at);
    b.freq.assign(b.cache.experts(), 0.0f);
    b.map_dirty = true;
  }
  if (const vk::CommandBuffer c = cache_update_cmd()) submit_and_wait(std::span(&c, 1));
}

bool backend::impl::cache_lookup_block(const weight& gate) const {
  const std::int32_t c = weights.at(gate.id).cache;
  return cache_lookup && c >= 0 && cached.at(std::size_t(c)).lookup;
}

void backend::impl::note_cache_lookup(const weight& gate, std::uint32_t pairs) {
  const std::int32_t c = weights.at(gate.id).cache;
  if (pairs * 4ull > cache_log_stride) throw error("expert cache: a step of " + std::to_string(pairs) + " routed pairs exceeds the log's " +
                                                   std::to_string(cache_log_stride / 4));
  pending.lookups.emplace_back(c, pairs);
}

bool backend::impl::is_down_experts(const weight& w) const {
  const std::int32_t c = weights.at(w.id).cache;
  return c >= 0 && cached.at(std::size_t(c)).weight[2] == w.id;
}

void backend::impl::add_cache_lookup(pipeline_request& r, std::vector<binding>& b, const weight& w, const weight* up, bool log) const {
  const std::int32_t c = weights.at(w.id).cache;
  if (!cache_lookup || c < 0 || !cached.at(std::size_t(c)).lookup || c == cache_split_open) return;
  if (c == cache_handoff_open) r.defines.emplace_back("PAIR_SKIP", "1");  // expert_cache_misses.cpp
  if (c == cache_share_open) {  // the share of a miss (expert_cache_misses.cpp): the after part logs the routing
    r.defines.insert(r.defines.end(), {{"PAIR_SKIP", "1"}, {"MISS_ONLY", "1"}});
    log = false;
  }
  const cached_block& cb = cached.at(std::size_t(c));
  const int part = cb.weight[0] == w.id ? 0 : cb.weight[1] == w.id ? 1 : 2;
  const gpu_buffer& host = cb.host(part);
  // The host copy laid out as the tensor (gate and up one range where the SwiGLU reads both).
  const std::uint64_t off = up ? 0 : cb.host_offset(part);
  const std::uint64_t bytes = up ? host.size() : part == 0 ? cb.up_at : host.size() - off;
  // A staged prompt step (expert_cache_stage.cpp): this block's experts are in the staging pair,
  // laid out as its host copy, so a miss reads device memory there.
  const bool staged = c == cache_staged_block;
  b.at(0).alt = buffer_range{staged ? buf(cache_stage_buf[part == 2 ? 1 : 0]).handle() : host.handle(), off, bytes, 0};
  r.defines.emplace_back("W_SOURCES", "2");
  r.defines.emplace_back("W_CACHED", std::to_string(b.size()));
  const std::uint64_t map_bytes = (std::uint64_t(cb.cache.experts()) + 1) * 4;
  b.push_back({{buf(cache_map_buf).handle(), std::uint64_t(c) * cache_map_stride, map_bytes, cache_map_buf}, false});
  if (log) {
    r.defines.emplace_back("CACHE_LOG", "1");
    // Written where nothing else of the step reads or writes: no barrier for it.
    b.push_back({{buf(cache_log_buf).handle(), std::uint64_t(c) * cache_log_stride, cache_log_stride, cache_log_buf}, true, false, true});
  }
}

void backend::impl::record_cache_log_copy() {
  if (pending.lookups.empty()) return;
  const vk::raii::CommandBuffer& c = recording_cmd();
  c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eTransferRead), {}, {});
  std::vector<vk::BufferCopy> regions;
  regions.reserve(pending.lookups.size());
  for (const auto& [block, pairs] : pending.lookups)
    regions.emplace_back(std::uint64_t(block) * cache_log_stride, std::uint64_t(block) * cache_log_stride, std::uint64_t(pairs) * 4);
  c.copyBuffer(buf(cache_log_buf).handle(), buf(cache_log_host).handle(), regions);
  c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead), {}, {});
}

void backend::impl::after_cache_lookup(const recorded_step& s) {
  const auto* logs = reinterpret_cast<const std::int32_t*>(buf(cache_log_host).mapped());
  const float decay = std::pow(cache_decay, float(std::max(batch_tokens, 1u)));
  const std::uint64_t budget = cache_admit_budget();
  std::uint64_t admitted = 0;
  for (const auto& [block, pairs] : s.lookups) {
    cached_block& b = cached.at(std::size_t(block));
    const std::int32_t* ids = logs + std::uint64_t(block) * (cache_log_stride / 4);
    const std::uint32_t E = b.cache.experts();
    const std::uint64_t expert_bytes = b.expert_bytes[0] + b.expert_bytes[1] + b.expert_bytes[2];
    ++cache_stamp;
    cache_distinct.clear();
    for (std::uint32_t p = 0; p < pairs; ++p) {
      const std::int32_t e = ids[p];
      if (e < 0 || std::uint32_t(e) >= E)
        throw error("expert cache: blk." + std::to_string(b.layer) + " logged expert " + std::to_string(e) + " of " + std::to_string(E) +
                    " for pair " + std::to_string(p));
      if (cache_seen[std::size_t(e)] != cache_stamp) {
        cache_seen[std::size_t(e)] = cache_stamp;
        cache_distinct.push_back(std::uint32_t(e));
        cache_counts[std::size_t(e)] = 0;
      }
      ++cache_counts[std::size_t(e)];
    }
    for (float& f : b.freq) f *= decay;
    b.cache.begin_step();  // this step's experts are not evicted by its own admissions
    cache_candidates.clear();
    // The CPU computed this block-step (expert_cache_misses.cpp): its misses crossed no link.
    const bool on_cpu = !cache_cpu_now.empty() && std::exchange(cache_cpu_now.at(std::size_t(block)), char(0));
    if (s.staged) {  // every expert copied into the staging pair: no miss crossed the link in a kernel
      ++cache_stats.staged_blocks;
      cache_stats.staged_bytes += b.host_gate_up.size() + b.host_down.size();
    }
    for (const std::uint32_t e : cache_distinct) {
      b.freq[e] += float(cache_counts[e]);
      if (mapped(b, e)) {
        b.cache.access(e);
        ++cache_stats.hits;
      } else {
        ++cache_stats.misses;
        if (!on_cpu && !s.staged) cache_stats.host_read_bytes += expert_bytes;
        if (!b.cache.resident(e)) cache_candidates.push_back(e);  // else its copy is in flight (cache_async)
      }
    }
    cache_stats.gpu_blocks += !on_cpu;
    ++cache_stats.lookup_blocks;
    admit_candidates(b, admitted, budget, [&](std::uint32_t e, const tiers::expert_slot_cache::result& r) {
      if (cache_async) {  // the victim leaves the map now; e enters once its copy beside the next step is done
        if (r.evicted >= 0) b.map.at(1 + std::size_t(r.evicted)) = -1;
        b.map_dirty = true;
      } else {
        cache_moved(b, e, r.slot, r.evicted);
      }
      cache_admitted.push_back({std::uint32_t(block), e, r.slot});
    });
  }
}

// Each admitted expert's gate, up and down from its block's host copy into its slot.
void backend::impl::record_admission_copies(const vk::raii::CommandBuffer& c) const {
  for (const cache_admission& a : cache_admitted) {
    const cached_block& b = cached.at(a.block);
    for (int j = 0; j < 3; ++j) {
      const std::uint64_t eb = b.expert_bytes[j];
      const weight_entry& w = weights.at(b.weight[j]);
      c.copyBuffer(b.host(j).handle(), chunks.at(w.chunk).handle(), vk::BufferCopy(b.host_offset(j) + a.expert * eb, w.offset + a.slot * eb, eb));
    }
  }
}

vk::CommandBuffer backend::impl::cache_update_cmd() {
  if (!cache_lookup) return {};
  // cache_async: the copies done beside the last step enter the maps (where the expert still holds that slot).
  for (const cache_admission& a : cache_inflight) {
    cached_block& b = cached.at(a.block);
    if (b.cache.resident(a.expert) && b.cache.slot_of(a.expert) == a.slot) cache_moved(b, a.expert, a.slot, -1);
  }
  const bool dirty = std::any_of(cached.begin(), cached.end(), [](const cached_block& b) { return b.lookup && b.map_dirty; });
  if ((cache_async || cache_admitted.empty()) && !dirty) return {};
  const vk::raii::CommandBuffer& c = cache_update;
  c.reset();
  c.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  // After every earlier read of the slots and maps (the steps before), before the next step's.
  c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer,
                    {}, vk::MemoryBarrier(vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eTransferWrite),
                    {}, {});
  if (!cache_async) {
    record_admission_copies(c);
    cache_admitted.clear();
  }
  for (std::uint32_t i = 0; i < cached.size(); ++i) {
    cached_block& b = cached[i];
    if (!b.lookup || !b.map_dirty) continue;
    c.updateBuffer(buf(cache_map_buf).handle(), std::uint64_t(i) * cache_map_stride,
                   vk::ArrayProxy<const std::int32_t>(std::uint32_t(b.map.size()), b.map.data()));
    b.map_dirty = false;
  }
  c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer,
                    {}, vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eTransferRead),
                    {}, {});
  c.end();
  return *c;
}

// cache_async: the admissions' copies on the side queue, beside the step just submitted, whose
// maps no longer name their slots' victims. The next step's submit waits on cache_timeline.
void backend::impl::submit_cache_copies() {
  cache_inflight.clear();
  if (!cache_async || cache_admitted.empty()) return;
  // The side queue's last copies are done (the step just submitted waited on them), so its buffer is free.
  const vk::raii::CommandBuffer& c = cache_side;
  c.reset();
  c.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  // After the last copies into the same slots (an expert evicted while in flight).
  c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eTransferWrite), {}, {});
  record_admission_copies(c);
  c.end();
  const std::uint64_t signal = cache_copy_value + 1;
  const vk::Semaphore sem = *cache_timeline;
  const vk::CommandBuffer cb = *c;
  const vk::TimelineSemaphoreSubmitInfo values(0u, nullptr, 1u, &signal);
  vk::SubmitInfo si(0u, nullptr, nullptr, 1u, &cb, 1u, &sem);
  si.pNext = &values;
  ctx.side_queue()->submit(si);
  cache_copy_value = signal;
  cache_inflight.swap(cache_admitted);
  cache_admitted.clear();
}

}  // namespace strata::gpu
