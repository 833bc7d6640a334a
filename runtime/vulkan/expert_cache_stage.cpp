// Prompt steps of the expert cache's lookup form with large experts (issue 14): the kernels read
// a missed expert from the block's host copy over PCIe themselves, and the grouped prompt kernels
// do that at a fraction of the link's rate (Llama 4 Scout at 12 GiB on the H100: ~15 GB/s of miss
// reads, pp512 ~140 t/s, where the CPU-expert layout's ring copies reach ~380; bench/RESULTS.md
// sessions 59-60). Here a step of more than cache_stage_tokens tokens copies each cached block's
// experts whole (gate + up, down: the host copy's bytes and layout) into a device-local staging
// pair before the block's expert kernels, and those kernels bind the staging pair where they would
// bind the host copy (add_cache_lookup): hits still read the slots, misses read device memory.
// A long prompt step routes nearly every expert of a block anyway (Scout's 512-token steps read
// ~97% of them over the link), so a whole copy at the link's copy rate costs less than the
// kernels' reads; the copy waits for the block before's kernels (one staging pair) and the
// block's kernels wait for it. The bytes the kernels read are the host copy's, so the results are
// the lookup form's, bit for bit.
#include <algorithm>
#include <cstdlib>
#include <string>
#include <string_view>

#include "backend_impl.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

void backend::impl::init_cache_stage() {
  bool on = opt.expert_cache_stage;
  if (const char* v = std::getenv("STRATA_VK_CACHE_STAGE")) on = std::string_view(v) == "1";
  if (const char* v = std::getenv("STRATA_VK_CACHE_STAGE_TOKENS")) cache_stage_tokens = std::uint32_t(std::max(0, std::atoi(v)));
  if (!on || !cache_lookup || cached.empty() || max_rows <= cache_stage_tokens) return;  // no step long enough
  std::uint64_t gate_up = 0, down = 0;
  for (const cached_block& b : cached) {
    if (!b.lookup) continue;  // its kernels read slots by slot id: never staged
    gate_up = std::max<std::uint64_t>(gate_up, b.host_gate_up.size());
    down = std::max<std::uint64_t>(down, b.host_down.size());
  }
  if (!gate_up || !down) return;
  const std::uint64_t limit = std::min<std::uint64_t>(ctx.info().max_storage_range, ctx.info().max_allocation);
  if (std::max(gate_up, down) > limit)
    throw error("expert cache staging: a block's experts (" + format_byte_size(std::max(gate_up, down)) + ") exceed the " +
                format_byte_size(limit) + " the device '" + ctx.info().name + "' can bind at once; turn it off (STRATA_VK_CACHE_STAGE=0)");
  if (const auto& l = ctx.ledger(); l.budget && l.total() + gate_up + down > l.budget)
    throw error("--gpu-budget " + format_byte_size(l.budget) + " does not hold the expert cache's prompt staging (" +
                format_byte_size(gate_up + down) + ") beside the " + format_byte_size(l.total()) +
                " already allocated; raise --gpu-budget, give fewer slots (-ngl with --expert-cache N) or turn the staging "
                "off (STRATA_VK_CACHE_STAGE=0)");
  cache_stage_buf[0] = new_buffer(gate_up, memory_kind::device, "expert cache: prompt staging (gate + up of a block)");
  cache_stage_buf[1] = new_buffer(down, memory_kind::device, "expert cache: prompt staging (down of a block)");
  cache_stats.stage_bytes = gate_up + down;
  cache_stats.stage_tokens = cache_stage_tokens;
}

void backend::impl::record_cache_stage(const weight& gate) {
  const cached_block& b = cached.at(std::size_t(weights.at(gate.id).cache));
  flush_all();  // what is deferred runs before the copies (it may read the staging pair no more)
  const vk::raii::CommandBuffer& c = recording_cmd();
  // After every earlier kernel (the block before read the pair), before this block's kernels.
  c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer,
                    vk::PipelineStageFlagBits::eTransfer, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite,
                                      vk::AccessFlagBits::eTransferWrite),
                    {}, {});
  c.copyBuffer(b.host_gate_up.handle(), buf(cache_stage_buf[0]).handle(), vk::BufferCopy(0, 0, b.host_gate_up.size()));
  c.copyBuffer(b.host_down.handle(), buf(cache_stage_buf[1]).handle(), vk::BufferCopy(0, 0, b.host_down.size()));
  c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead), {}, {});
  pending.staged = true;
  cache_staged_block = weights.at(gate.id).cache;
}

}  // namespace strata::gpu
