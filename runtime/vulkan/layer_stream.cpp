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
//
// The per-phase choice (backend_options::stream_cpu_tokens): a step of at most that many tokens
// (decode) copies nothing into the ring and computes each streamed FFN on the CPU instead, where
// the weights live (cpu_ffn.hpp): at the gate's matmul the FFN norm's rows go to the host and the
// step splits (as the MoE hand-off does, cpu_experts.cpp), the CPU runs gate, up, SwiGLU and
// down, and at the down's matmul the result comes back; the SwiGLU between is not recorded.
//
// The link in those steps (backend_options::stream_link_layers): a few streamed blocks are still
// copied into the ring and computed by the GPU, slot by rank among them (link % 2), while the CPU
// computes the others. Each copy rides the hand-offs of CPU-computed blocks after the linked
// block two ranks back (the slot's last reader) and before its own (tiers/link_schedule.hpp),
// recorded as each hand-off's `share`: between the part before and the CPU's work, so on the
// flag-word path the GPU runs it while the host computes (on the others it precedes the CPU's
// work: correct, not beside it). The share's barrier orders the copy after the slot's last
// reads, and the next part's first barrier (command_recorder::resume) the kernels after the copy.
#include <algorithm>
#include <cstring>

#include "backend_impl.hpp"
#include "ring_chain.hpp"
#include "pinned_copy.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/tiers/demand.hpp"
#include "strata/tiers/link_schedule.hpp"

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
  const std::string_view n = t.name;
  const int part = n.find("ffn_gate") != n.npos ? 0 : n.find("ffn_up") != n.npos ? 1 : n.find("ffn_down") != n.npos ? 2 : -1;
  if (part < 0 || it->part[part] != ~0u)
    throw error("layer streaming: '" + std::string(n) + "' is not the block's one ffn_gate, ffn_up or ffn_down");
  it->part[part] = id;
  const auto& link = opt.stream_link_layers;
  if (opt.stream_cpu_tokens && std::find(link.begin(), link.end(), std::uint32_t(layer)) == link.end()) {  // the CPU's view too, for the decode phase
    if (!ffn_host) ffn_host = std::make_unique<cpu_ffn>(opt.cpu_threads);
    it->cpu[part] = ffn_host->load(t);
  }
  weight_entry e{&t, 0, 0, t.data.size()};
  e.stream = std::int32_t(it - streams.begin());
  weights.push_back(e);
  return true;
}

void backend::impl::make_ring(std::uint64_t align, std::uint64_t chunk_limit, std::uint32_t max_tokens) {
  if (streams.empty()) {
    if (!opt.streamed_layers.empty())
      throw error("layer streaming: none of the " + std::to_string(opt.streamed_layers.size()) +
                  " blocks asked for has dense FFN tensors (ffn_gate/ffn_up/ffn_down) on this backend");
    return;
  }
  std::uint64_t slot = 0;
  std::uint32_t widest = 0;
  for (streamed_block& b : streams) {
    for (int j = 0; j < 3; ++j)
      if (b.part[j] == ~0u)
        throw error("layer streaming: block " + std::to_string(b.layer) + " lacks its " +
                    (j == 0 ? "ffn_gate" : j == 1 ? "ffn_up" : "ffn_down") + " tensor");
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
  std::vector<pinned_copy> copies;
  for (std::size_t j = 0; j < streams.size(); ++j) {
    streamed_block& b = streams[j];
    b.host = gpu_buffer(ctx, b.bytes, memory_kind::upload, "pinned dense FFN of block " + std::to_string(b.layer));
    for (const std::uint32_t id : b.weights) {
      weight_entry& e = weights.at(id);
      copies.push_back({e.info, e.bytes, b.host.mapped() + e.offset});
      e.chunk = ring_chunk[j % 2];
    }
    streaming.host_bytes += b.bytes;
    streaming.bytes_per_step += b.bytes;
  }
  copy_pinned(copies);
  plan_link_copies(align);
  streaming.layers = std::uint32_t(streams.size());
  streaming.ring_bytes = 2 * slot;
  if (opt.stream_cpu_tokens) {  // the decode phase's hand-off buffers: up to stream_cpu_tokens rows
    ffn_rows = std::min(opt.stream_cpu_tokens, max_tokens);
    const auto cols = std::uint32_t(weights.at(streams[0].part[0]).info->ne[0]);
    ffn_in = new_buffer(std::uint64_t(ffn_rows) * cols * 4, memory_kind::readback, "dense FFN hand-off to the CPU");
    // A region per streamed block (handoff::out_slot): the parts of one step never read one region twice.
    ffn_out = new_buffer(std::uint64_t(ffn_rows) * cols * 4 * streams.size(), handoff_out_kind(), "dense FFN hand-off from the CPU");
    ffn_host->reserve(ffn_rows);
    streaming.cpu_tokens = opt.stream_cpu_tokens;
  }
}

void backend::impl::plan_link_copies(std::uint64_t align) {
  const auto& want = opt.stream_link_layers;
  if (want.empty()) return;
  if (!opt.stream_cpu_tokens)
    throw error("--stream-link: no step computes the streamed FFNs on the CPU (every step streams them), so the link has "
                "nothing to run beside");
  for (const std::uint32_t il : want)
    if (std::none_of(streams.begin(), streams.end(), [&](const streamed_block& b) { return b.layer == il; }))
      throw error("--stream-link: block " + std::to_string(il) + " is not one whose dense FFN streams on this backend");
  std::vector<tiers::link_block> blocks;
  std::int32_t rank = 0;
  for (streamed_block& b : streams) {
    const bool link = std::find(want.begin(), want.end(), b.layer) != want.end();
    blocks.push_back({b.bytes, link, double(b.bytes) * opt.stream_link_ratio});
    if (!link) continue;
    b.link = rank++;
    ++streaming.link_layers;
    streaming.link_bytes_per_step += b.bytes;
  }
  const auto pieces = tiers::schedule_link_copies(blocks, align);
  for (std::size_t j = 0; j < streams.size(); ++j)
    for (const tiers::link_piece& q : pieces[j]) streams[j].carries.push_back({q.block, q.offset, q.bytes});
}

vk::raii::CommandBuffer backend::impl::record_link_copies(const streamed_block& b) {
  vk::raii::CommandBuffer c = new_command_buffer();
  c.begin(vk::CommandBufferBeginInfo());
  // The slot's last readers (the linked block two back, in an earlier part) before the copy.
  c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {}, {}, {}, {});
  for (const streamed_block::copy_piece& p : b.carries) {
    const streamed_block& to = streams.at(p.block);
    c.copyBuffer(to.host.handle(), chunks.at(ring_chunk[to.link % 2]).handle(), vk::BufferCopy(p.offset, p.offset, p.bytes));
  }
  c.end();
  return c;
}

void backend::impl::record_ring_copy(const ring_copy& r) {
  recording_cmd().copyBuffer(r.from.handle(), r.slot.handle(), vk::BufferCopy(0, 0, r.bytes));
}

void backend::impl::stream_step_begin() {
  stream_next = 0;
  ffn_open = -1;
  if (streams.empty() || stream_on_cpu()) return;
  record_ring_copy({streams[0].host, chunks.at(ring_chunk[0]), streams[0].bytes});
}

void backend::impl::enter_streamed(const weight& w) {
  const std::int32_t b = weights.at(w.id).stream;
  if (b < 0 || std::uint32_t(b) < stream_next) return;
  advance_ring(stream_next, std::uint32_t(b), std::uint32_t(streams.size()), [&](std::uint32_t j) {
    return ring_copy{streams[j].host, chunks.at(ring_chunk[j % 2]), streams[j].bytes};
  });
}

void backend::impl::record_cpu_ffn(const weight& w, const tensor& x, const tensor& y) {
  const auto index = std::uint32_t(weights.at(w.id).stream);
  const streamed_block& b = streams.at(index);
  const std::uint32_t n = x.rows, C = x.cols;
  if (w.id == b.part[0]) {  // gate: x to the host, the step continues after the CPU's FFN
    if (ffn_open >= 0) throw error("layer streaming: '" + std::string(w.name) + "' before the previous block's ffn_down");
    if (n > ffn_rows || std::uint64_t(n) * C * 4 > buf(ffn_in).size())
      throw error("layer streaming: a step of " + std::to_string(n) + " rows x " + std::to_string(C) +
                  " exceeds the CPU FFN hand-off (" + std::to_string(ffn_rows) + " rows)");
    prepare({x}, {});
    const copy_rows_pc px{C, x.off, x.stride, 0, C};
    const binding bx[] = {bind(x, false), bind(x, false), bind_id(ffn_in, true)};
    dispatch(copy_req(false), bx, &px, sizeof px, detail::div_up(C, detail::wg), n);
    rec.end();
    handoff& h = pending.handoffs.emplace_back();
    h.ffn = std::int32_t(index);
    h.out_slot = index;
    h.task.gate = b.cpu[0], h.task.up = b.cpu[1], h.task.down = b.cpu[2];
    h.task.rows = n, h.task.cols = C;
    if (!b.carries.empty()) h.share = record_link_copies(b);
    h.cmd = new_command_buffer();
    rec.resume(h.cmd, "cpu dense FFN (hand-off: host work + submit)");
    ffn_open = std::int32_t(index);
    return;
  }
  if (ffn_open != std::int32_t(index))
    throw error("layer streaming: '" + std::string(w.name) + "' without its block's ffn_gate first");
  if (w.id == b.part[1]) return;  // computed with the gate
  prepare({}, {y});  // down: the CPU's result into y
  const copy_rows_pc po{y.cols, index * ffn_rows * y.cols, y.cols, y.off, y.stride};
  const binding bo[] = {bind_id(ffn_out, false), bind_id(ffn_out, false), bind(y, true)};
  dispatch(copy_req(false), bo, &po, sizeof po, detail::div_up(y.cols, detail::wg), y.rows);
  ffn_open = -1;
}

void backend::impl::run_cpu_ffn(const handoff& h) {
  ffn_host->run(h.task.gate, h.task.up, h.task.down, h.task.rows, h.task.cols,
                reinterpret_cast<const float*>(buf(ffn_in).mapped()),
                reinterpret_cast<float*>(buf(ffn_out).mapped()) + std::size_t(h.out_slot) * ffn_rows * h.task.cols);
}

stream_stats backend::streaming() const { return p_->streaming; }

}  // namespace strata::gpu
