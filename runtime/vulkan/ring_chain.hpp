// backend::impl::advance_ring, the one template of the two streaming rings' chain
// (layer_stream.cpp, expert_stream.cpp): private to runtime/vulkan.
#pragma once
#include <cstdint>

#include "backend_impl.hpp"

namespace strata::gpu {

template <class CopyOf>
void backend::impl::advance_ring(std::uint32_t& next, std::uint32_t upto, std::uint32_t items, CopyOf copy_of) {
  flush_mats();  // every kernel of the earlier items is recorded before the barriers below
  const vk::raii::CommandBuffer& c = recording_cmd();
  for (; next <= upto; ++next) {
    const std::uint32_t j = next;
    c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eComputeShader, {},
                      vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eShaderRead), {}, {});
    if (j + 1 >= items) continue;
    if (j >= 1)  // write-after-read on slot (j+1) % 2: an execution dependency
      c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {}, {}, {}, {});
    record_ring_copy(copy_of(j + 1));
  }
}

}  // namespace strata::gpu
