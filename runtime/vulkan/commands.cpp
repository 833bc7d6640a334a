#include "commands.hpp"

#include <algorithm>
#include <array>

#include "strata/core/error.hpp"

namespace strata::gpu {
namespace {
bool contains(const std::vector<std::uint32_t>& v, std::uint32_t id) { return std::find(v.begin(), v.end(), id) != v.end(); }
}  // namespace

void command_recorder::begin(const vk::raii::CommandBuffer& cmd, vk::QueryPool queries, std::uint32_t query_capacity,
                             std::uint32_t first_query, bool after_part) {
  cmd_ = &cmd;
  queries_ = queries;
  query_capacity_ = query_capacity;
  first_query_ = first_query;
  written_.clear();
  read_.clear();
  barriers_ = chains_ = 0;
  forget_chain();
  next_slot_ = 1;
  labels_.clear();
  weight_bytes_.clear();
  cmd_->begin(vk::CommandBufferBeginInfo());
  if (after_part) barrier();
  if (chain_.buffer) {
    // The counters start at 0 in every recording (so a recorded part must not run twice in one
    // step: its done words would still be set): after the kernels submitted before it (an earlier
    // step's, or this step's layers before its output part) have counted on them. Slot 0: done.
    const vk::MemoryBarrier before(vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite,
                                   vk::AccessFlagBits::eTransferWrite);
    cmd_->pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {}, before, {}, {});
    cmd_->fillBuffer(chain_.buffer, chain_.offset, chain_stride_, 1u);
    cmd_->fillBuffer(chain_.buffer, chain_.offset + chain_stride_, chain_.bytes - chain_stride_, 0u);
    const vk::MemoryBarrier after(vk::AccessFlagBits::eTransferWrite,
                                  vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
    cmd_->pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {}, after, {}, {});
  }
  if (queries_) {
    cmd_->resetQueryPool(queries_, first_query_, query_capacity_);
    cmd_->writeTimestamp(vk::PipelineStageFlagBits::eComputeShader, queries_, first_query_);
  }
}

void command_recorder::barrier() {
  const vk::MemoryBarrier mb(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
  cmd_->pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eComputeShader, {}, mb, {}, {});
  written_.clear();
  read_.clear();
  ++barriers_;
  forget_chain();
}

void command_recorder::forget_chain() {
  chained_written_.clear();
  chained_read_.clear();
  level_size_ = chain_prev_ = level_wait_ = last_wait_ = 0;
}

buffer_range command_recorder::chain_slot(std::uint32_t slot) const noexcept {
  return {chain_.buffer, chain_.offset + std::uint64_t(slot) * chain_stride_, chain_stride_, 0};
}

void command_recorder::dispatch(const pipeline& p, std::span<const binding> bindings, const void* push,
                                std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy, std::uint32_t gz) {
  // Exactly one buffer per binding slot: a short list once left a kernel's last slots bound to
  // whatever came last (split_k_sum read its partials from its output), silently.
  const std::uint32_t own = p.chain_at ? 2 : 0;  // the chain's slots, bound here
  if (p.chain_at && p.chain_at + own != p.bindings)
    throw error("kernel '" + p.label + "': its level-chain slots must be its last two bindings");
  if (p.chain_at && !chain_.buffer)
    throw error("kernel '" + p.label + "' waits in a level chain, but the recorder has no chain counters");
  if (bindings.size() + own != p.bindings)
    throw error("kernel '" + p.label + "' takes " + std::to_string(p.bindings - own) + " buffers, got " +
                std::to_string(bindings.size()));
  if (push_bytes > push_constant_bytes) throw error("kernel '" + p.label + "': push constants too large");
  // Hazards with the current level (the dispatches since the last barrier or chain), and with the
  // kernels before it that a chain's waiters know have finished but other dispatches do not.
  const auto hazard_with = [&](const std::vector<std::uint32_t>& written, const std::vector<std::uint32_t>& read) {
    bool h = false;
    for (const auto& b : bindings) {
      if (b.range.id == 0 || b.disjoint) continue;  // read-only constants (weights), disjoint writes
      h |= contains(written, b.range.id) || (b.written && contains(read, b.range.id));
    }
    return h;
  };
  const bool in_level = hazard_with(written_, read_), before_level = hazard_with(chained_written_, chained_read_);
  const bool lab_skip = !lab_no_barrier_before_.empty() &&
                        std::any_of(lab_no_barrier_before_.begin(), lab_no_barrier_before_.end(),
                                    [&](const std::string& part) { return p.label.find(part) != std::string::npos; });
  std::uint32_t wait_slot = 0;
  const bool may_chain = p.chain_at && !barrier_all_ && !queries_;
  if ((in_level || before_level || barrier_all_) && !lab_no_barrier_ && !lab_skip) {
    if (in_level && may_chain && chain_prev_ && level_size_ == 1) {
      // A new level that waits for the one kernel of the last, which itself ran after every kernel
      // before it had finished: those stay tracked for the dispatches that do not wait.
      wait_slot = level_wait_ = chain_prev_;
      ++chains_;
      chained_written_.insert(chained_written_.end(), written_.begin(), written_.end());
      chained_read_.insert(chained_read_.end(), read_.begin(), read_.end());
      written_.clear();
      read_.clear();
      level_size_ = 0;
    } else if (!in_level && may_chain && level_wait_) {
      wait_slot = level_wait_;  // beside the level's kernels, waiting for the kernel they wait for
    } else {
      barrier();
    }
  }
  last_wait_ = wait_slot;
  for (const auto& b : bindings) {
    if (b.range.id == 0 || b.disjoint) continue;
    (b.written ? written_ : read_).push_back(b.range.id);
  }
  ++level_size_;
  std::uint32_t signal_slot = 0;
  bool waitable = false;
  if (p.chain_at) {
    const auto sink = std::uint32_t(chain_.bytes / chain_stride_) - 1;  // the slots run out: one none waits on
    signal_slot = next_slot_ < sink ? next_slot_++ : sink;
    waitable = signal_slot != sink;
  }
  chain_prev_ = level_size_ == 1 && waitable ? signal_slot : 0;
  cmd_->bindPipeline(vk::PipelineBindPoint::eCompute, *p.handle);
  constexpr std::uint32_t max_bindings = 20;  // with binding 0's second source, within maxPushDescriptors (>= 32)
  if (p.bindings > max_bindings - 1 || bindings.empty()) throw error("kernel '" + p.label + "': bad binding count");
  std::array<vk::DescriptorBufferInfo, max_bindings> infos;
  std::array<vk::WriteDescriptorSet, max_bindings> writes;
  const auto info = [](const buffer_range& r) { return vk::DescriptorBufferInfo(r.buffer, r.offset, r.bytes ? r.bytes : VK_WHOLE_SIZE); };
  // Binding 0's descriptors first (two where the kernel reads two weight sources), then one each.
  const std::uint32_t first = p.weight_sources == 2 ? 2 : 1;
  infos[0] = info(bindings[0].range);
  if (first == 2) {
    if (!bindings[0].alt.buffer) throw error("kernel '" + p.label + "' reads two weight sources; binding 0 has one");
    infos[1] = info(bindings[0].alt);
  }
  const auto range_of = [&](std::uint32_t i) {
    return !p.chain_at || i < p.chain_at ? bindings[i].range : chain_slot(i == p.chain_at ? signal_slot : wait_slot);
  };
  writes[0] = vk::WriteDescriptorSet(vk::DescriptorSet{}, 0, 0, first, vk::DescriptorType::eStorageBuffer, nullptr, &infos[0]);
  for (std::uint32_t i = 1; i < p.bindings; ++i) {
    infos[first + i - 1] = info(range_of(i));
    writes[i] = vk::WriteDescriptorSet(vk::DescriptorSet{}, i, 0, 1, vk::DescriptorType::eStorageBuffer, nullptr, &infos[first + i - 1]);
  }
  cmd_->pushDescriptorSetKHR(vk::PipelineBindPoint::eCompute, *p.layout, 0,
                             vk::ArrayProxy<const vk::WriteDescriptorSet>(p.bindings, writes.data()));
  if (push_bytes)
    cmd_->pushConstants<std::uint8_t>(*p.layout, vk::ShaderStageFlagBits::eCompute, 0,
                                      vk::ArrayProxy<const std::uint8_t>(push_bytes, static_cast<const std::uint8_t*>(push)));
  cmd_->dispatch(gx, gy, gz);
  labels_.push_back(p.label);
  std::uint64_t wb = 0;
  for (const auto& b : bindings)
    if (b.weights) wb += b.range.bytes;  // (a second source's bytes are read only on a miss: not counted)
  weight_bytes_.push_back(wb);
  if (queries_) {
    if (labels_.size() + 1 > query_capacity_) throw error("profiling: too many dispatches for the query pool");
    cmd_->writeTimestamp(vk::PipelineStageFlagBits::eComputeShader, queries_, first_query_ + std::uint32_t(labels_.size()));
    barrier();
  }
}

void command_recorder::resume(const vk::raii::CommandBuffer& cmd, const std::string& label) {
  cmd_ = &cmd;
  cmd_->begin(vk::CommandBufferBeginInfo());
  if (queries_) {
    labels_.push_back(label);
    weight_bytes_.push_back(0);
    if (labels_.size() + 1 > query_capacity_) throw error("profiling: too many dispatches for the query pool");
    cmd_->writeTimestamp(vk::PipelineStageFlagBits::eTopOfPipe, queries_, first_query_ + std::uint32_t(labels_.size()));
  }
  // Earlier submits' shader writes and transfers (the expert cache's uploads) before any use here,
  // and the host's writes of the hand-off's result: a part submitted before the host wrote them
  // (the timeline path, handoff_submit.cpp) gets no host-write guarantee from its submit; the
  // host's signal it waits on orders them, and HOST_WRITE here makes them visible.
  const vk::MemoryBarrier mb(vk::AccessFlagBits::eShaderWrite | vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eHostWrite,
                             vk::AccessFlagBits::eShaderRead | vk::AccessFlagBits::eShaderWrite);
  cmd_->pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader | vk::PipelineStageFlagBits::eTransfer |
                            vk::PipelineStageFlagBits::eHost,
                        vk::PipelineStageFlagBits::eComputeShader, {}, mb, {}, {});
  written_.clear();
  read_.clear();
  ++barriers_;  // a level of its own: the hand-off's work lies between
  forget_chain();
}

void command_recorder::end() {
  const vk::MemoryBarrier mb(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eHostRead);
  cmd_->pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eHost, {}, mb, {}, {});
  cmd_->end();
}

void run_once(const context& ctx, const std::function<void(command_recorder&)>& record, const std::string& what) {
  const vk::raii::CommandPool pool(ctx.device(), vk::CommandPoolCreateInfo({}, ctx.queue_family()));
  vk::raii::CommandBuffers cmds(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
  command_recorder rec;
  rec.begin(cmds[0]);
  record(rec);
  rec.end();
  const vk::raii::Fence fence(ctx.device(), vk::FenceCreateInfo());
  const vk::CommandBuffer c = *cmds[0];
  ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
  if (ctx.device().waitForFences(*fence, VK_TRUE, ~0ull) != vk::Result::eSuccess)
    throw error(what + " on '" + ctx.info().name + "' did not finish");
}

}  // namespace strata::gpu
