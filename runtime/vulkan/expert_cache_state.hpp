// The GPU expert cache's bookkeeping (expert_cache.cpp, expert_cache_lookup.cpp): the host's
// per-step scratch, the hand-off and map buffers' ids, the counters, the switches of its forms
// (split per block, the lookup form, CPU misses, prefetch, async admissions) and the admission
// policy both forms share. A base of backend::impl; plain values only: the cached blocks (their
// host copies), the side queue's semaphores and command buffers are impl's, destroyed before its
// device. Private to runtime/vulkan (includes Vulkan).
#pragma once
#include <algorithm>
#include <cstdint>
#include <vector>

#include "backend.hpp"
#include "tier_blocks.hpp"

namespace strata::gpu {

struct expert_cache_state {
  std::uint32_t cache_ids_in = 0, cache_ids_out = 0;  // buffer ids: routed ids to the host, slot ids back
  std::vector<std::uint64_t> cache_seen;              // per expert: the step stamp it was last routed in
  std::vector<std::uint32_t> cache_slot_of, cache_distinct;
  std::vector<vk::BufferCopy> cache_regions[3];
  std::uint64_t cache_stamp = 0;
  expert_cache_stats cache_stats;

  // Router-driven prefetch (expert_cache.cpp; off by default, measured slower on the H200;
  // STRATA_VK_EXPERT_PREFETCH=1 turns it on): the next
  // cached block's router scores of up to cache_pred_tokens tokens, on the GPU and read back at the
  // split, and the side queue's timeline (impl's prefetch_timeline; its last value signalled:
  // prefetch_counter).
  bool expert_prefetch = false;
  static constexpr std::uint32_t cache_pred_tokens = 8;
  std::uint32_t cache_pred_dev = 0, cache_pred_host = 0;  // buffer ids: [token][expert] f32 scores
  std::vector<std::uint32_t> cache_rank, cache_pred_union;  // the host's top-k scratch, the predicted experts
  std::uint64_t prefetch_counter = 0;
  std::uint64_t cache_step = 0;  // steps with cached blocks submitted (stamps the predictions)

  // STRATA_VK_CACHE_CPU_MISSES=F (0 < F <= 1; off by default): short steps of every cached block
  // take the split form, and a block-step whose missed experts are at least F of the distinct experts it routes
  // runs on the CPU instead of uploading them (a large expert is read faster from DRAM by the CPU
  // than over the link by a copy or a kernel). The missed experts whose decayed routing counts
  // beat their victims' are then copied into slots beside the step (admit_cpu_misses), within the
  // lookup form's upload budget per step.
  float cache_cpu_misses = 0;
  // Only steps of at most this many tokens take that split (STRATA_VK_CACHE_CPU_MISS_TOKENS,
  // default 8): longer ones keep the lookup form where the device has it, whose kernels read a
  // missed expert once a step over the link, where the CPU would compute the whole prompt.
  std::uint32_t cache_cpu_miss_tokens = 8;
  bool cache_split_step(std::uint32_t tokens) const noexcept { return cache_cpu_misses > 0 && tokens <= cache_cpu_miss_tokens; }
  std::int32_t cache_split_open = -1;  // while recording a split's expert part: its block (those kernels read slots by slot id)
  // Where the lookup form exists, those short steps keep it and hand each cached block to the host
  // after its router instead (expert_cache_misses.cpp): the host reads the routed ids and either
  // lets the GPU's kernels run (hits from the slots, a few misses over the link) or computes the
  // block's experts on the CPU while the kernels skip every pair (mmvq.glsl PAIR_SKIP). A
  // hand-off like a CPU-expert block's, so a step with them is one submit on the flag-word path.
  std::int32_t cache_handoff_open = -1;  // while recording such a block's experts: its block
  std::uint32_t cache_miss_ids = 0;      // buffer id: per block, the ids the host hands back (bit 31: the CPU's pair)
  std::uint64_t cache_miss_stride = 0;   // bytes a block in it
  // Buffer id: per block, cache_cpu_miss_tokens rows of the CPU's sum (zeros when the GPU computed
  // the block), and per block the rows the CPU wrote since the region was last zeroed.
  std::uint32_t cache_miss_out = 0, cache_miss_cols = 0;
  std::vector<std::uint32_t> cache_miss_dirty;
  std::uint32_t miss_rows() const noexcept { return std::max(cache_cpu_miss_tokens, 1u); }
  std::vector<char> cache_cpu_now;  // per block: the CPU computed it in the step just run
  // The GPU's share of a missed expert in single-token steps of top-1 blocks (the CPU-expert
  // blocks' slice, record_shared_moe): recorded between the hand-off's signal and its wait, the
  // kernels read the first columns of the routed expert from the host copy over the link while the
  // CPU reads the rest from DRAM (mmvq.glsl MISS_ONLY: a pair the slots hold computes nothing),
  // into cache_share_out, added after the CPU's sum. With it every miss goes to the CPU, whose
  // task then starts at the share's columns. STRATA_VK_CACHE_SLICE=P percent (0: off; default
  // miss_slice_default on the flag-word path, where the share overlaps the CPU's work).
  // Llama 4 Scout on the H100 at 12 GiB (1 slot, 64% of block-steps missing; bench/RESULTS.md,
  // session 60): tg64 25.68 t/s without, 27.03 with 20%, 27.68 / 28.20 with 35%, 23.71 with 50%
  // (the link's half then takes longer than the CPU's); at 24 GiB (22% missing) 46.3-46.7 with
  // any of 0, 20, 35. Balanced when the link's share takes as long as the CPU's rest.
  static constexpr std::int32_t miss_slice_default = 35;
  std::int32_t cache_slice_env = -1;
  // Prompt steps' staging (expert_cache_stage.cpp, backend_options::expert_cache_stage): buffer
  // ids of the device-local gate + up and down copies of one block's experts (0: none), and the
  // steps that use it: more than cache_stage_tokens tokens.
  std::uint32_t cache_stage_buf[2] = {0, 0};
  std::uint32_t cache_stage_tokens = 16;
  bool cache_stage_step(std::uint32_t tokens) const noexcept { return cache_stage_buf[0] && tokens > cache_stage_tokens; }
  // While recording: the block whose experts the staging pair holds at this point of the step
  // (record_cache_stage; -1: none). Only that block's kernels bind the pair.
  std::int32_t cache_staged_block = -1;
  std::int32_t cache_share_open = -1;  // while recording a share: its block (PAIR_SKIP + MISS_ONLY, no log)
  std::uint32_t cache_share_out = 0;   // buffer id: one row of the share's combined sum
  std::uint64_t cache_step_admitted = 0;  // bytes admitted in the current step (reset by submit_step)

  // The lookup form (expert_cache_lookup.cpp; cache_lookup: on where the device indexes arrays of
  // storage buffers, STRATA_VK_CACHE_LOOKUP=0 off). The expert matvecs map each routed
  // expert through the block's slot map on the GPU and read a missed one from the block's host
  // copy over PCIe (mmvq.glsl W_CACHED), so a step never splits at a cached block. The down
  // matvec logs the routing; after the step the host admits missed experts whose decayed routing
  // counts beat the SLRU victim's by cache_margin, within an upload budget, and the next step's
  // submit first copies them into their slots and rewrites the changed maps.
  bool cache_lookup = false;
  std::uint32_t cache_map_buf = 0, cache_log_buf = 0, cache_log_host = 0;  // buffer ids
  std::uint64_t cache_map_stride = 0, cache_log_stride = 0;                // bytes a block
  float cache_decay = 0.99f;   // the routing counts' decay a token (STRATA_VK_CACHE_DECAY)
  float cache_margin = 1.0f;   // what an admission's count must beat the victim's by (STRATA_VK_CACHE_MARGIN)
  std::uint64_t cache_admit_bytes = 256ull << 20;      // uploads a step (STRATA_VK_CACHE_ADMIT_MB) ...
  std::uint64_t cache_admit_token_bytes = 2ull << 20;  // ... and a token more of the step
  struct cache_admission {
    std::uint32_t block, expert, slot;
  };
  std::vector<cache_admission> cache_admitted;  // to copy before the next step (or beside it: cache_async)
  // STRATA_VK_CACHE_ASYNC=1 (a side queue and timeline semaphores): an admission's victim leaves the
  // map at the next step's start, its copy runs on the side queue beside that step, and the step
  // after maps it (waiting on impl's cache_timeline for the copies): uploads off the step's chain.
  bool cache_async = false;
  std::vector<cache_admission> cache_inflight;  // copied on the side queue, not yet in the maps
  std::uint64_t cache_copy_value = 0;            // the side queue's last signalled value
  std::vector<std::uint32_t> cache_candidates, cache_counts;

  // The admission policy of both forms (the lookup form's, the split form's CPU misses):
  // cache_candidates, most routed first, each taken into b's SLRU while `admitted` plus its bytes
  // fit `budget` and a slot is free or its count beats the victim's by cache_margin;
  // `placed(e, access result)` follows each admission.
  template <class Placed>
  void admit_candidates(cached_block& b, std::uint64_t& admitted, std::uint64_t budget, Placed&& placed) {
    const std::uint64_t expert_bytes = b.expert_bytes[0] + b.expert_bytes[1] + b.expert_bytes[2];
    std::sort(cache_candidates.begin(), cache_candidates.end(),
              [&](std::uint32_t a, std::uint32_t c) { return b.freq[a] > b.freq[c] || (b.freq[a] == b.freq[c] && a < c); });
    for (const std::uint32_t e : cache_candidates) {
      if (admitted + expert_bytes > budget) break;
      const std::int64_t v = b.cache.would_evict();
      if (v == -2) break;
      if (v >= 0 && !(b.freq[e] > b.freq[std::size_t(v)] + cache_margin)) break;  // later candidates count less
      const auto r = b.cache.access(e);
      cache_stats.evictions += r.evicted >= 0;
      cache_stats.bytes_uploaded += expert_bytes;
      admitted += expert_bytes;
      placed(e, r);
    }
  }
};

}  // namespace strata::gpu
