// Misses on the CPU in the lookup form's short steps (issue 14; expert_cache_state.hpp). A large
// expert (Llama 4 Scout: 70.8 MB) is read faster from DRAM by the CPU's threads than over PCIe by
// the GPU's kernels, so a decode step whose routed experts miss the slots should compute that
// block on the CPU. The split form (expert_cache.cpp) does it with a submit and a fence wait at
// every cached block and step: on the H100, Scout at 24 GiB ran at 44.7 t/s against 71 predicted
// (session 58), ~150 us a block of round trips. Here such a block is a hand-off like a CPU-expert
// block's (cpu_experts.cpp), so the step is one submit on the flag-word path:
//   part i: ... the router's top-k, x and the logits to hand_in, the routed ids to cache_ids_in;
//   host:   reads the ids; when the misses are at least cache_cpu_misses of the distinct experts,
//           runs the block's experts on the CPU into the block's region of cache_miss_out and
//           hands back every id with bit 31 set, else hands back the ids as they are (zeroing its
//           region if the CPU wrote it last);
//   cmd:    the host's ids into moe_ids, the lookup form's kernels (mmvq.glsl W_CACHED with
//           PAIR_SKIP: a marked pair reads no weight and sums to zero), the combine, + the region.
// Admissions stay the lookup form's: the down matvec logs every pair's expert (marked or not), and
// after the step the host admits missed experts within the budget, copied beside the next step
// on the side queue where there is one (cache_async).
// The GPU's share (single-token steps of top-1 blocks, expert_cache_state.hpp cache_slice_env):
//   share:  between the hand-off's signal and its wait, the routed expert's first S intermediate
//           columns from the host copy (MISS_ONLY: nothing where a slot holds it) into
//           cache_share_out, while the host decides and the CPU computes columns S.. of a miss;
//   cmd:    as above, then + cache_share_out (zeros where the expert was a hit).
// Correct whatever the host decides, because with a share it sends every miss to the CPU.
#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend_impl.hpp"
#include "scoped_value.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

using namespace detail;

namespace {
constexpr std::uint32_t cpu_pair_bit = 0x80000000u;  // mmvq.glsl PAIR_SKIP
}

void backend::impl::init_miss_handoffs(std::uint32_t max_routed) {
  if (!(cache_cpu_misses > 0) || !cache_lookup) return;
  // Blocks' regions apart by more than a GPU cache line: one submit reads every block's region in
  // turn, and a line cached by an earlier block's read of a region beside its own would hand a
  // later block the ids of the step before (on the H100 a decode of 2-token steps went wrong with
  // 16-byte regions; session 15 saw the same with shared hand-off results).
  const std::uint64_t align = std::max<std::uint64_t>(ctx.info().min_storage_align, 256);
  cache_miss_stride = (std::uint64_t(std::max(max_routed, 1u)) * 4 + align - 1) / align * align;
  // Host-cached, as hand_out: the GPU reads each block's region once, after the host wrote it.
  cache_miss_ids = new_buffer(cached.size() * cache_miss_stride, handoff_out_kind(), "expert cache: ids handed back");
  // The CPU's sums: a block's own region of the rows a hand-off step has (no other hand-off writes
  // it), zero until the CPU first computes the block.
  std::uint64_t cols = 0;
  for (const cached_block& b : cached) cols = std::max<std::uint64_t>(cols, weights.at(b.weight[0]).info->ne[0]);
  cache_miss_out = new_buffer(cached.size() * miss_rows() * cols * 4, handoff_out_kind(), "expert cache: the CPU's sums");
  std::memset(buf(cache_miss_out).mapped(), 0, buf(cache_miss_out).size());
  cache_miss_cols = std::uint32_t(cols);
  cache_miss_dirty.assign(cached.size(), 0);
  cache_cpu_now.assign(cached.size(), 0);
  cache_stats.miss_handoff = true;
  if (const char* v = std::getenv("STRATA_VK_CACHE_SLICE")) cache_slice_env = std::clamp(std::atoi(v), 0, 99);
  if (miss_slice_percent() > 0) {
    cache_share_out = new_buffer(cols * 4, memory_kind::device, "expert cache: the GPU's share of a miss");
    // Said at start-up where some block takes a share: top-1 blocks (a step's pairs no more than
    // its rows) whose cut falls inside the experts (backend::reserve clears it again where the
    // flag-word probe fails).
    const auto idx = [&](std::uint32_t id) { return std::uint32_t(weights.at(id).cache_cpu); };
    const bool any = std::any_of(cached.begin(), cached.end(), [&](const cached_block& b) {
      return slice_cols(std::uint32_t(weights.at(b.weight[0]).info->ne[1]),
                        host->slice_align(idx(b.weight[0]), idx(b.weight[1]), idx(b.weight[2])), miss_slice_percent());
    });
    if (max_routed <= max_rows && any) cache_stats.miss_slice_percent = std::uint32_t(miss_slice_percent());
  }
}

std::int32_t backend::impl::miss_slice_percent() const noexcept {
  // As the CPU-expert blocks' top-1 slice (slice_percent), its overlap needs the flag-word path.
  return cache_slice_env >= 0 ? cache_slice_env : handoff_poll ? miss_slice_default : 0;
}

std::uint32_t backend::impl::miss_share_cols(const moe_weights& mw, const graph::moe_params& mp, std::uint32_t rows) const {
  // One pair: a miss is all the CPU computes, so the share's columns and the CPU's cover it.
  if (!cache_share_out || rows != 1 || mp.n_used != 1) return 0;
  const weight &g = *mw.gate_exps, &u = *mw.up_exps, &d = *mw.down_exps;
  if (!adjacent(g, u)) return 0;
  const auto idx = [&](const weight& w) { return std::uint32_t(weights.at(w.id).cache_cpu); };
  return slice_cols(std::uint32_t(g.ne[1]), host->slice_align(idx(g), idx(u), idx(d)), miss_slice_percent());
}

void backend::impl::record_miss_share(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                                      const moe_scratch& s, std::uint32_t S) {
  const std::uint32_t C = x.cols, E = logits.cols;
  const tensor g = s.gate.first_rows(1).first_cols(S), sum{cache_share_out, 0, 1, C, C};
  prepare({x}, {g, s.y.first_rows(1), s.xin.first_rows(1), sum});
  // One pair (miss_share_cols: top-1 blocks, one token): its id and weight are the step's at moe_ids 0.
  const scoped_value open(cache_share_open, weights.at(mw.gate_exps->id).cache);
  record_routed_columns(mw, mp, x, s, E, 1, S, S, sum);
  flush_all();
  // The input's int8 rows stay valid for the part after (the same rows); the share's narrow
  // intermediate must not stand for the part after's full one.
  for (auto& q : quantized)
    if (q && q->x.buf == g.buf) q.reset();
}

void backend::impl::begin_miss_handoff(const moe_weights& mw, const graph::moe_params& mp, const tensor& x, const tensor& logits,
                                       const moe_scratch& s) {
  const std::uint32_t n = x.rows, C = x.cols, E = logits.cols, pairs = n * mp.n_used;
  const std::int32_t block = weights.at(mw.gate_exps->id).cache;
  if (std::uint64_t(pairs) * 4 > cache_miss_stride)
    throw error("expert cache: a step of " + std::to_string(pairs) + " routed pairs exceeds the hand-off's " +
                std::to_string(cache_miss_stride / 4));
  if (n > miss_rows() || C != cache_miss_cols)
    throw error("internal: an expert-cache hand-off of " + std::to_string(n) + " x " + std::to_string(C) + " rows, its buffers hold " +
                std::to_string(miss_rows()) + " x " + std::to_string(cache_miss_cols));
  flush_all();  // everything deferred runs before the hand-off
  record_handoff_in(x, logits);
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
  h.cache = block;
  h.miss_handoff = true;
  h.pairs = pairs;
  if (const std::uint32_t S = miss_share_cols(mw, mp, n)) {
    h.task.ff_begin = S;  // the CPU's columns; the share has the first S
    h.share = new_command_buffer();
    rec.resume(h.share, "expert cache: the GPU's share of a miss (beside the host's work)");
    record_miss_share(mw, mp, x, logits, s, S);
    rec.end();
  }
  h.cmd = new_command_buffer();
  rec.resume(h.cmd, "expert cache: misses on the CPU (host work + submit)");
  // The host's ids into moe_ids, after the host wrote them (and after the part before read the old ones).
  const vk::raii::CommandBuffer& r = recording_cmd();
  r.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eHost,
                    vk::PipelineStageFlagBits::eTransfer, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eHostWrite |
                                          vk::AccessFlagBits::eTransferRead,
                                      vk::AccessFlagBits::eTransferRead | vk::AccessFlagBits::eTransferWrite),
                    {}, {});
  r.copyBuffer(buf(cache_miss_ids).handle(), buf(moe_ids).handle(),
               vk::BufferCopy(std::uint64_t(block) * cache_miss_stride, 0, std::uint64_t(pairs) * 4));
  r.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead), {}, {});
  cache_handoff_open = block;  // the expert kernels recorded next take PAIR_SKIP (add_cache_lookup)
}

void backend::impl::end_miss_handoff(const tensor& out) {
  flush_all();  // the combine of the GPU's pairs into out, here: the CPU's sum is added after it
  for (auto& q : quantized) q.reset();
  const std::uint32_t C = out.cols;
  prepare({out}, {out});
  const copy_rows_pc po{C, std::uint32_t(cache_handoff_open) * miss_rows() * C, C, out.off, out.stride};
  const binding bo[] = {bind_id(cache_miss_out, false), bind_id(cache_miss_out, false), bind(out, true)};
  dispatch(copy_req(false, true), bo, &po, sizeof po, div_up(C, wg), out.rows);
  if (*pending.handoffs.back().share) {  // + the GPU's share of a miss (zeros after a hit)
    prepare({out}, {out});
    const copy_rows_pc ps{C, 0, C, out.off, out.stride};
    const binding bs[] = {bind_id(cache_share_out, false), bind_id(cache_share_out, false), bind(out, true)};
    dispatch(copy_req(false, true), bs, &ps, sizeof ps, div_up(C, wg), out.rows);
  }
  cache_handoff_open = -1;
}

void backend::impl::run_miss_handoff(handoff& h) {
  cached_block& b = cached.at(std::size_t(h.cache));
  const std::uint32_t* ids = read_routed(h, b);
  std::uint32_t missed = 0;
  for (const std::uint32_t e : cache_distinct) missed += b.map.at(1 + std::size_t(e)) < 0;  // the map the GPU reads in this step
  auto* back = reinterpret_cast<std::uint32_t*>(buf(cache_miss_ids).mapped() + std::uint64_t(h.cache) * cache_miss_stride);
  float* sum = reinterpret_cast<float*>(buf(cache_miss_out).mapped()) + std::size_t(h.cache) * miss_rows() * cache_miss_cols;
  std::uint32_t& dirty = cache_miss_dirty.at(std::size_t(h.cache));
  // With the GPU's share (task.ff_begin: its columns) every miss is the CPU's: the share computed
  // the first columns of a missed expert and the kernels after it must skip the pair.
  if (missed && (h.task.ff_begin || float(missed) >= cache_cpu_misses * float(cache_distinct.size()))) {
    dirty = std::max(dirty, h.task.rows);  // before the CPU writes: a throw mid-way leaves it marked
    const auto* in = reinterpret_cast<const float*>(buf(hand_in).mapped());
    host->run(h.task, in, in + std::size_t(max_rows) * hand_cols, sum);
    for (std::uint32_t p = 0; p < h.pairs; ++p) back[p] = ids[p] | cpu_pair_bit;
    ++cache_stats.cpu_blocks;
    ++cache_stats.miss_cpu_blocks;
    if (h.task.ff_begin) {  // the share read its columns of each missed expert over the link
      ++cache_stats.share_blocks;
      std::uint64_t expert = 0;
      for (int j = 0; j < 3; ++j) expert += b.expert_bytes[j];
      const std::uint64_t F = weights.at(b.weight[0]).info->ne[1];
      cache_stats.host_read_bytes += std::uint64_t(missed) * expert * h.task.ff_begin / F;
    }
    cache_cpu_now.at(std::size_t(h.cache)) = 1;
    return;
  }
  std::memcpy(back, ids, std::size_t(h.pairs) * 4);
  if (dirty) {
    std::fill(sum, sum + std::size_t(dirty) * cache_miss_cols, 0.0f);
    dirty = 0;
  }
}

}  // namespace strata::gpu
