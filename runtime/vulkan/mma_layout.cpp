#include "mma_layout.hpp"

#include <array>
#include <cstring>

#include "commands.hpp"
#include "context.hpp"
#include "memory.hpp"
#include "pipelines.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

std::optional<mma_layout> probe_mma_layout(const context& ctx, pipeline_registry& pipes) {
  const pipeline& pl = pipes.get({"mma_layout", std::nullopt, {{"WG", "32"}, {"COOPMAT", "1"}}, 1});
  gpu_buffer out(ctx, 257 * 4, memory_kind::readback, "cooperative-matrix layout probe");
  const vk::raii::CommandPool pool(ctx.device(), vk::CommandPoolCreateInfo({}, ctx.queue_family()));
  vk::raii::CommandBuffers cmds(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
  command_recorder rec;
  rec.begin(cmds[0]);
  const binding b[] = {{{out.handle(), 0, out.size(), 0}, true}};
  rec.dispatch(pl, b, nullptr, 0, 1);
  rec.end();
  const vk::raii::Fence fence(ctx.device(), vk::FenceCreateInfo());
  const vk::CommandBuffer c = *cmds[0];
  ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
  if (ctx.device().waitForFences(*fence, VK_TRUE, ~0ull) != vk::Result::eSuccess)
    throw error("cooperative-matrix layout probe on '" + ctx.info().name + "' did not finish");
  std::array<std::uint32_t, 257> v{};
  std::memcpy(v.data(), out.mapped(), sizeof v);
  if (v[256] != 8) return std::nullopt;
  std::array<int, 8> dr{}, dc{};
  std::array<bool, 256> seen{};
  bool quad = true;
  for (std::uint32_t lane = 0; lane < 32; ++lane)
    for (std::uint32_t e = 0; e < 8; ++e) {
      const std::uint32_t p = v[lane * 8 + e], p0 = v[lane * 8];
      if (p >= 256 || seen[p]) return std::nullopt;
      seen[p] = true;
      const int r = int(p / 16) - int(p0 / 16), col = int(p % 16) - int(p0 % 16);
      if (e == 0) quad = quad && p0 / 16 == lane / 4 && p0 % 16 == 2 * (lane % 4);
      if (lane == 0) dr[e] = r, dc[e] = col;
      else if (dr[e] != r || dc[e] != col) return std::nullopt;
    }
  mma_layout l;
  l.quad = quad && dr == std::array<int, 8>{0, 0, 0, 0, 8, 8, 8, 8} && dc == std::array<int, 8>{0, 1, 8, 9, 0, 1, 8, 9};
  for (std::uint32_t e = 0; e < 8; ++e) {
    l.row_offsets += (e ? "," : "") + std::to_string(dr[e]);
    l.col_offsets += (e ? "," : "") + std::to_string(dc[e]);
  }
  return l;
}

}  // namespace strata::gpu
