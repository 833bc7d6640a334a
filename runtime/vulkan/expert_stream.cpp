// Routed experts streamed for prefill (memory tiers, issue 14; the design's per-phase rule:
// "prefill favours uploading weights to the GPU once per batch; decode favours computing cold
// weights where they live"). A block whose routed experts the CPU computes (cpu_experts.cpp)
// keeps that hand-off for steps of at most expert_cpu_tokens tokens; in longer steps its expert
// tensors (every expert, in the GPU row layout, from a pinned host copy) are copied into a ring
// of two device-local slots inside the recorded step and the GPU's MoE kernels (the grouped
// prefill path) read them there. The hidden state never leaves the GPU in such a step.
//
// Ring items are half a block: gate + up (slot 0; the first kernels read both) and down
// (slot 1). Item i lives in slot i % 2, so every tensor has a fixed (slot, offset) and the step
// is recorded once per shape. The chain is layer_stream.cpp's, one item ahead:
//   step start:                  copy item 0 -> slot 0
//   before item j's first kernel:
//     transfer -> compute  (item j's copy has landed)
//     compute -> transfer  (item j-1, the last reader of slot (j+1) % 2, is done)
//     copy item j+1 -> slot (j+1) % 2
// so down's copy runs under the gate/up kernels and the next block's gate/up under this block's
// down, combine and every block up to the next streamed one. Why not a slot per block (2 x the
// block, layer_stream's granularity): on qwen3-30b-a3b that is 780 MB of a 12 GiB budget, two
// more blocks' experts pushed to the CPU (decode ~7% slower); half-block items cost one block
// (391 MB) and keep the link busy in the link-bound case (each copy starts as soon as the kernel
// before it has its own copy, which the link delivered first). Pipeline barriers are global, so
// a finer ring (a slot per tensor, or three) would not overlap more: an item's barrier waits for
// every copy recorded before it.
#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "backend_impl.hpp"
#include "ring_chain.hpp"
#include "pinned_copy.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

void backend::impl::load_xstream(const gguf::tensor_info& t, std::uint32_t layer, std::uint32_t id) {
  const std::string_view n = t.name;
  const int part = n.find("ffn_gate_exps") != n.npos ? 0 : n.find("ffn_up_exps") != n.npos ? 1
                   : n.find("ffn_down_exps") != n.npos                                       ? 2
                                                                                              : -1;
  auto it = std::find_if(xstreams.begin(), xstreams.end(), [&](const xstream_block& b) { return b.layer == layer; });
  if (it == xstreams.end()) {
    it = xstreams.emplace(xstreams.end());
    it->layer = layer;
  }
  if (part < 0 || it->part[part] != ~0u)
    throw error("expert streaming: '" + std::string(n) + "' is not the block's one ffn_gate_exps, ffn_up_exps or ffn_down_exps");
  it->part[part] = id;
  weight_entry& e = weights.at(id);
  e.bytes = t.data.size();
  e.xstream = 0;  // its block's index is set by make_xring, once the blocks are in order
}

void backend::impl::make_xring(std::uint64_t align, std::uint64_t chunk_limit) {
  if (xstreams.empty()) {
    if (!opt.streamed_expert_layers.empty())
      throw error("expert streaming: none of the " + std::to_string(opt.streamed_expert_layers.size()) +
                  " blocks asked for has routed experts the CPU computes on this backend");
    return;
  }
  std::sort(xstreams.begin(), xstreams.end(), [](const xstream_block& a, const xstream_block& b) { return a.layer < b.layer; });
  const auto place = [&](std::uint64_t b) { return (b + align - 1) / align * align; };
  std::uint64_t slot[2] = {0, 0};
  std::uint32_t widest[2] = {0, 0};
  for (std::size_t j = 0; j < xstreams.size(); ++j) {
    xstream_block& b = xstreams[j];
    for (int p = 0; p < 3; ++p) {
      if (b.part[p] == ~0u)
        throw error("expert streaming: block " + std::to_string(b.layer) + " lacks its " +
                    (p == 0 ? "ffn_gate_exps" : p == 1 ? "ffn_up_exps" : "ffn_down_exps") + " tensor");
      weights.at(b.part[p]).xstream = std::int32_t(j);
    }
    weight_entry& g = weights.at(b.part[0]);
    weight_entry& u = weights.at(b.part[1]);
    weight_entry& d = weights.at(b.part[2]);
    g.offset = 0;
    u.offset = place(g.bytes);
    d.offset = 0;
    b.bytes[0] = u.offset + place(u.bytes);
    b.bytes[1] = place(d.bytes);
    for (int k = 0; k < 2; ++k)
      if (b.bytes[k] > slot[k]) slot[k] = b.bytes[k], widest[k] = b.layer;
  }
  const std::string what = "the expert-streaming ring (slots of " + format_byte_size(slot[0]) + ": ffn_gate_exps + ffn_up_exps of block " +
                           std::to_string(widest[0]) + ", and " + format_byte_size(slot[1]) + ": ffn_down_exps of block " +
                           std::to_string(widest[1]) + ")";
  if (std::max(slot[0], slot[1]) > chunk_limit)
    throw error(what + ": a slot exceeds the " + format_byte_size(chunk_limit) + " the device '" + ctx.info().name +
                "' can bind at once");
  if (const auto& l = ctx.ledger(); l.budget && l.total() + slot[0] + slot[1] > l.budget)
    throw error("--gpu-budget " + format_byte_size(l.budget) + " does not hold " + what + " beside the " +
                format_byte_size(l.total()) + " already allocated (weights " + format_byte_size(l.weights) + ", scratch " +
                format_byte_size(l.scratch) + "); raise --gpu-budget, keep the experts on the CPU (--no-stream-experts) "
                "or move more of them there");
  for (std::uint32_t k = 0; k < 2; ++k) {
    xring_chunk[k] = std::uint32_t(chunks.size());
    chunks.emplace_back(ctx, slot[k], memory_kind::device, "weights (expert-streaming ring slot " + std::to_string(k) + ")");
  }
  std::vector<pinned_copy> copies;
  for (xstream_block& b : xstreams) {
    for (int k = 0; k < 2; ++k)
      b.host[k] = gpu_buffer(ctx, b.bytes[k], memory_kind::upload,
                             std::string(k ? "pinned ffn_down_exps" : "pinned ffn_gate_exps + ffn_up_exps") + " of block " +
                                 std::to_string(b.layer));
    for (int p = 0; p < 3; ++p) {
      weight_entry& e = weights.at(b.part[p]);
      const int k = p == 2 ? 1 : 0;
      copies.push_back({e.info, e.bytes, b.host[k].mapped() + e.offset});
      e.chunk = xring_chunk[k];
    }
    xstreaming.host_bytes += b.bytes[0] + b.bytes[1];
    xstreaming.bytes_per_step += b.bytes[0] + b.bytes[1];
  }
  copy_pinned(copies);
  xstreaming.layers = std::uint32_t(xstreams.size());
  xstreaming.ring_bytes = slot[0] + slot[1];
  xstreaming.cpu_tokens = opt.expert_cpu_tokens;
  if (const char* v = std::getenv("STRATA_VK_XSTREAM_ZC")) xstream_zero_copy = std::string_view(v) == "1";
  if (const char* v = std::getenv("STRATA_VK_GPU_SHARE")) gpu_share_env = std::max(0, std::atoi(v));
  if (const char* v = std::getenv("STRATA_VK_GPU_SLICE")) gpu_slice_env = std::clamp(std::atoi(v), 0, 100);
  // Direct reads repeat an expert's bytes for every chunk of its pairs. A small expert's repeats
  // hit the GPU's L2 (qwen3-30b-a3b's 0.9 MB slabs a tensor: direct +43% against the ring at
  // 12 GiB, session 22); a large one's cross PCIe again (Llama 4 Scout's 23.6 MB slabs under the
  // skewed router at 12 GiB on the H100: pp512 204 direct, 381 through the ring, session 59).
  std::uint64_t slab = 0;
  for (const xstream_block& b : xstreams)
    for (const std::uint32_t id : b.part) {
      const weight_entry& e = weights.at(id);
      slab = std::max<std::uint64_t>(slab, e.bytes / std::max<std::uint64_t>(1, std::uint64_t(e.info->ne[2])));
    }
  if (slab > xstream_direct_slab_limit) xstream_direct_tokens = 0;
  if (const char* v = std::getenv("STRATA_VK_XSTREAM_DIRECT_TOKENS")) xstream_direct_tokens = std::uint32_t(std::max(0, std::atoi(v)));
}

void backend::impl::xstream_step_begin() {
  xstream_next = 0;
  if (xstreams.empty() || experts_on_cpu() || xstream_direct()) return;
  record_ring_copy({xstreams[0].host[0], chunks.at(xring_chunk[0]), xstreams[0].bytes[0]});
}

void backend::impl::enter_expert(const weight& w) {
  const weight_entry& e = weights.at(w.id);
  if (e.xstream < 0 || xstream_direct()) return;
  const auto block = std::uint32_t(e.xstream);
  const std::uint32_t item = 2 * block + (w.id == xstreams[block].part[2] ? 1u : 0u);
  if (item < xstream_next) return;
  advance_ring(xstream_next, item, std::uint32_t(2 * xstreams.size()), [&](std::uint32_t j) {
    const xstream_block& b = xstreams[j / 2];
    return ring_copy{b.host[j % 2], chunks.at(xring_chunk[j % 2]), b.bytes[j % 2]};
  });
}

stream_stats backend::expert_streaming() const { return p_->xstreaming; }

}  // namespace strata::gpu
