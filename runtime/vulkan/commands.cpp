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
  barriers_ = 0;
  labels_.clear();
  weight_bytes_.clear();
  cmd_->begin(vk::CommandBufferBeginInfo());
  if (after_part) barrier();
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
}

void command_recorder::dispatch(const pipeline& p, std::span<const binding> bindings, const void* push,
                                std::uint32_t push_bytes, std::uint32_t gx, std::uint32_t gy, std::uint32_t gz) {
  // Exactly one buffer per binding slot: a short list once left a kernel's last slots bound to
  // whatever came last (split_k_sum read its partials from its output), silently.
  if (bindings.size() != p.bindings)
    throw error("kernel '" + p.label + "' takes " + std::to_string(p.bindings) + " buffers, got " + std::to_string(bindings.size()));
  if (push_bytes > push_constant_bytes) throw error("kernel '" + p.label + "': push constants too large");
  bool hazard = false;
  for (const auto& b : bindings) {
    if (b.range.id == 0 || b.disjoint) continue;  // read-only constants (weights), disjoint writes
    hazard |= contains(written_, b.range.id) || (b.written && contains(read_, b.range.id));
  }
  const bool lab_skip = !lab_no_barrier_before_.empty() &&
                        std::any_of(lab_no_barrier_before_.begin(), lab_no_barrier_before_.end(),
                                    [&](const std::string& part) { return p.label.find(part) != std::string::npos; });
  if ((hazard || barrier_all_) && !lab_no_barrier_ && !lab_skip) barrier();
  for (const auto& b : bindings) {
    if (b.range.id == 0 || b.disjoint) continue;
    (b.written ? written_ : read_).push_back(b.range.id);
  }
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
  writes[0] = vk::WriteDescriptorSet(vk::DescriptorSet{}, 0, 0, first, vk::DescriptorType::eStorageBuffer, nullptr, &infos[0]);
  for (std::uint32_t i = 1; i < p.bindings; ++i) {
    infos[first + i - 1] = info(bindings[i].range);
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
