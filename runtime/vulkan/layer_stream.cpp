// Dense layer streaming (memory tiers, issue 14 item 4): the dense FFN tensors of a streamed
// block live in pinned (host-visible) memory, laid out as they sit in a ring slot, and the GPU
// holds two slots, each as large as the largest streamed block. Streamed block j reads slot
// j % 2, so every weight's (slot, offset) is fixed and a step is still recorded once per shape
// and replayed: the copies are part of the recorded step, not host work per token.
//
// Order inside a recorded step (one queue; pipeline barriers are the only synchronisation):
//   step start:            copy block 0 -> slot 0
//   first matmul of block j:
//     transfer -> compute  (block j's copy has landed before its kernels read the slot)
//     compute -> transfer  (block j-1's kernels, the last readers of slot (j+1) % 2, are done)
//     copy block j+1 -> slot (j+1) % 2
// The copy of block j+1 is recorded before block j's kernels and waits only for work recorded
// before it, so it runs while block j (and block j+1's attention) computes: double buffering.
// The hidden state never leaves the GPU; only weights cross the link, once per step (a prompt
// step of up to n_batch tokens reads each streamed byte once for all its tokens).
#include <algorithm>
#include <cstring>

#include "backend_impl.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/demand.hpp"

namespace strata::gpu {

bool backend::impl::load_streamed(const gguf::tensor_info& t, std::uint32_t id) {
  const std::int32_t layer = tiers::layer_of(t.name);
  const auto& want = opt.streamed_layers;
  if (layer < 0 || tiers::classify(t.name, false) != tiers::tensor_kind::dense_ffn ||
      std::find(want.begin(), want.end(), std::uint32_t(layer)) == want.end())
    return false;
  auto it = std::find_if(streams.begin(), streams.end(), [&](const streamed_block& b) { return b.layer == std::uint32_t(layer); });
  if (it == streams.end()) {
    if (!streams.empty() && streams.back().layer > std::uint32_t(layer))
      throw error("layer streaming: '" + std::string(t.name) + "' comes after a tensor of block " +
                  std::to_string(streams.back().layer) + "; streamed blocks must load in order");
    it = streams.emplace(streams.end());
    it->layer = std::uint32_t(layer);
  }
  it->weights.push_back(id);
  weight_entry e{&t, 0, 0, t.data.size()};
  e.stream = std::int32_t(it - streams.begin());
  weights.push_back(e);
  return true;
}

void backend::impl::make_ring(std::uint64_t align, std::uint64_t chunk_limit) {
  if (streams.empty()) {
    if (!opt.streamed_layers.empty())
      throw error("layer streaming: none of the " + std::to_string(opt.streamed_layers.size()) +
                  " blocks asked for has dense FFN tensors (ffn_gate/ffn_up/ffn_down) on this backend");
    return;
  }
  std::uint64_t slot = 0;
  std::uint32_t widest = 0;
  for (streamed_block& b : streams) {
    for (const std::uint32_t id : b.weights) {
      weight_entry& e = weights.at(id);
      e.offset = b.bytes;
      b.bytes += (e.bytes + align - 1) / align * align;
    }
    if (b.bytes > slot) slot = b.bytes, widest = b.layer;
  }
  const std::string what = "the layer-streaming ring (2 slots of " + format_byte_size(slot) + ", the dense FFN of block " +
                           std::to_string(widest) + ")";
  if (slot > chunk_limit)
    throw error(what + ": one slot exceeds the " + format_byte_size(chunk_limit) + " the device '" + ctx.info().name +
                "' can bind at once");
  if (const auto& l = ctx.ledger(); l.budget && l.total() + 2 * slot > l.budget)
    throw error("--gpu-budget " + format_byte_size(l.budget) + " does not hold " + what + " beside the " +
                format_byte_size(l.total()) + " already allocated (weights " + format_byte_size(l.weights) + ", scratch " +
                format_byte_size(l.scratch) + "); raise --gpu-budget, stream fewer blocks or lower -ngl");
  for (std::uint32_t k = 0; k < 2; ++k) {
    ring_chunk[k] = std::uint32_t(chunks.size());
    chunks.emplace_back(ctx, slot, memory_kind::device, "weights (layer-streaming ring slot " + std::to_string(k) + ")");
  }
  for (std::size_t j = 0; j < streams.size(); ++j) {
    streamed_block& b = streams[j];
    b.host = gpu_buffer(ctx, b.bytes, memory_kind::upload, "pinned dense FFN of block " + std::to_string(b.layer));
    for (const std::uint32_t id : b.weights) {
      weight_entry& e = weights.at(id);
      std::memcpy(b.host.mapped() + e.offset, e.info->data.data(), e.bytes);
      e.chunk = ring_chunk[j % 2];
    }
    streaming.host_bytes += b.bytes;
    streaming.bytes_per_step += b.bytes;
  }
  streaming.layers = std::uint32_t(streams.size());
  streaming.ring_bytes = 2 * slot;
}

namespace {
void copy_block(const vk::raii::CommandBuffer& c, const gpu_buffer& from, const gpu_buffer& slot, std::uint64_t bytes) {
  c.copyBuffer(from.handle(), slot.handle(), vk::BufferCopy(0, 0, bytes));
}
}  // namespace

void backend::impl::stream_step_begin() {
  stream_next = 0;
  if (streams.empty()) return;
  copy_block(recording_cmd(), streams[0].host, chunks.at(ring_chunk[0]), streams[0].bytes);
}

void backend::impl::enter_streamed(const weight& w) {
  const std::int32_t b = weights.at(w.id).stream;
  if (b < 0 || std::uint32_t(b) < stream_next) return;
  flush_mats();  // every kernel of the earlier blocks is recorded before the barriers below
  const vk::raii::CommandBuffer& c = recording_cmd();
  for (; stream_next <= std::uint32_t(b); ++stream_next) {
    const std::uint32_t j = stream_next;
    c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                      vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead), {}, {});
    if (j + 1 >= streams.size()) continue;
    // Slot (j+1) % 2 was last read by block j-1 (write-after-read: an execution dependency).
    if (j >= 1)
      c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {}, {}, {}, {});
    copy_block(c, streams[j + 1].host, chunks.at(ring_chunk[(j + 1) % 2]), streams[j + 1].bytes);
  }
}

stream_stats backend::streaming() const { return p_->streaming; }

}  // namespace strata::gpu
