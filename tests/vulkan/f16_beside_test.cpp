// The f16 copy a norm or SwiGLU writes beside its output (rms_norm.glsl / elementwise.glsl
// F16_OUT, the backend's f16_beside) on any device, lavapipe included: the f32 output is the
// plain kernel's bit for bit, and the f16 rows are what copy_rows TO_F16 makes of it (the copy
// dispatch they replace before the tensor-core matmuls), at h_stride halves from h_off, nothing
// outside them written.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "vulkan/vk_harness.hpp"

#ifdef STRATA_HAS_VULKAN
#include "../../runtime/vulkan/commands.hpp"
#include "../../runtime/vulkan/context.hpp"
#include "../../runtime/vulkan/memory.hpp"
#include "../../runtime/vulkan/pipelines.hpp"
#include "../../runtime/vulkan/push_constants.hpp"
#endif

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

constexpr std::uint32_t rows = 5, cols = 1040, stride = 1056, h_off = 16, h_stride = 1048;  // halves
constexpr std::uint32_t sentinel = 0xDEADBEEFu, out_words = (h_off + rows * h_stride) / 2 + 8;

struct rig {
  gpu::context ctx{-1};
  gpu::pipeline_registry pipes{ctx, {}};
  vk::raii::CommandPool pool{ctx.device(), vk::CommandPoolCreateInfo(vk::CommandPoolCreateFlagBits::eResetCommandBuffer, ctx.queue_family())};

  gpu::gpu_buffer buffer(const std::vector<float>& v, const char* name) {
    gpu::gpu_buffer b(ctx, v.size() * 4, gpu::memory_kind::readback, name);
    std::memcpy(b.mapped(), v.data(), v.size() * 4);
    return b;
  }
  // f16 rows' room (out_words), every word the sentinel.
  gpu::gpu_buffer f16_rows(const char* name) {
    gpu::gpu_buffer b(ctx, out_words * 4, gpu::memory_kind::readback, name);
    const std::vector<std::uint32_t> fill(out_words, sentinel);
    std::memcpy(b.mapped(), fill.data(), out_words * 4);
    return b;
  }
  // One dispatch of `r` over `b` (binding i = b[i]).
  void run(const gpu::pipeline_request& r, const std::vector<gpu::binding>& b, const void* pc, std::uint32_t pc_bytes,
           std::uint32_t gx, std::uint32_t gy) {
    auto cmds = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1));
    gpu::command_recorder rec;
    rec.begin(cmds[0]);
    rec.dispatch(pipes.get(r), b, pc, pc_bytes, gx, gy);
    rec.end();
    vk::raii::Fence fence(ctx.device(), vk::FenceCreateInfo());
    const vk::CommandBuffer c = *cmds[0];
    ctx.queue().submit(vk::SubmitInfo({}, {}, c), *fence);
    REQUIRE(ctx.device().waitForFences(*fence, VK_TRUE, UINT64_MAX) == vk::Result::eSuccess);
  }
};

gpu::binding whole(const gpu::gpu_buffer& b, std::uint32_t id, bool written) { return {{b.handle(), 0, b.size(), id}, written}; }

std::vector<std::uint32_t> words(const gpu::gpu_buffer& b) {
  std::vector<std::uint32_t> w(b.size() / 4);
  std::memcpy(w.data(), b.mapped(), b.size());
  return w;
}

// copy_rows TO_F16 of the plain kernel's y (rows `stride` floats apart) against the F16_OUT rows.
void check_f16_rows(rig& g, const gpu::gpu_buffer& y, const gpu::gpu_buffer& yh) {
  const auto want = g.f16_rows("copy_rows f16");
  const gpu::copy_rows_pc pc{cols, 0, stride, h_off / 8, h_stride / 8};  // TO_F16: destination in uvec4 of 8 halves
  g.run({"copy_rows", std::nullopt, {{"WG", "128"}, {"TO_F16", "1"}}, 3}, {whole(y, 1, false), whole(y, 1, false), whole(want, 2, true)},
        &pc, sizeof pc, (cols / 8 + 127) / 128, rows);
  const auto a = words(want), b = words(yh);
  REQUIRE(a.size() == b.size());
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < a.size(); ++i) wrong += a[i] != b[i];
  CHECK(wrong == 0);
}

TEST_CASE("vulkan f16 beside: rms_norm F16_OUT writes the f32 rows bit for bit and copy_rows' f16 of them") {
  if (!vkt::available()) return;
  rig g;
  std::mt19937 rng(11);
  const auto x = vkt::normal_floats(std::size_t(rows) * stride, rng);
  auto w = vkt::normal_floats(cols, rng, 0.3f);
  const auto xb = g.buffer(x, "x"), wb = g.buffer(w, "norm weight");
  const std::vector<float> zero(std::size_t(rows) * stride, 0.0f);
  // 512 threads: a row in one batch a thread, kept in registers; 128: more than one, loaded twice.
  for (const char* wg : {"512", "128"}) {
    CAPTURE(wg);
    const auto y_plain = g.buffer(zero, "y plain"), y_f16 = g.buffer(zero, "y f16");
    const auto yh = g.f16_rows("y as f16");
    gpu::rms_norm_pc pc{cols, 0, stride, 0, stride, 1e-5f, rows};
    g.run({"rms_norm", std::nullopt, {{"WG", wg}, {"HAS_NORM_WEIGHT", "1"}}, 4},
          {whole(wb, 3, false), whole(xb, 1, false), whole(y_plain, 2, true), whole(wb, 3, false)}, &pc, sizeof pc, rows, 1);
    pc.h_off = h_off;
    pc.h_stride = h_stride;
    g.run({"rms_norm", std::nullopt, {{"WG", wg}, {"HAS_NORM_WEIGHT", "1"}, {"F16_OUT", "1"}}, 5},
          {whole(wb, 3, false), whole(xb, 1, false), whole(y_f16, 2, true), whole(wb, 3, false), whole(yh, 4, true)}, &pc,
          sizeof pc, rows, 1);
    CHECK(words(y_plain) == words(y_f16));
    check_f16_rows(g, y_plain, yh);
  }
}

TEST_CASE("vulkan f16 beside: SwiGLU F16_OUT (in place over the gate) writes the f32 rows bit for bit and copy_rows' f16 of them") {
  if (!vkt::available()) return;
  rig g;
  std::mt19937 rng(12);
  const auto gate = vkt::normal_floats(std::size_t(rows) * stride, rng), up = vkt::normal_floats(std::size_t(rows) * stride, rng);
  const auto ub = g.buffer(up, "up"), plain = g.buffer(gate, "gate -> out, plain"), fused = g.buffer(gate, "gate -> out, f16");
  const auto oh = g.f16_rows("out as f16");

  gpu::elementwise_pc pc{cols, 0, stride, 0, stride, 0, stride};
  g.run({"elementwise", std::nullopt, {{"OP_SWIGLU", "1"}}, 4},
        {whole(plain, 1, true), whole(plain, 1, true), whole(ub, 2, false), whole(plain, 1, true)}, &pc, sizeof pc, (cols + 127) / 128, rows);
  pc.h_off = h_off;
  pc.h_stride = h_stride;
  g.run({"elementwise", std::nullopt, {{"OP_SWIGLU", "1"}, {"F16_OUT", "1"}}, 5},
        {whole(fused, 1, true), whole(fused, 1, true), whole(ub, 2, false), whole(fused, 1, true), whole(oh, 4, true)}, &pc,
        sizeof pc, (cols / 2 + 127) / 128, rows);
  CHECK(words(plain) == words(fused));
  check_f16_rows(g, plain, oh);
}

#endif

}  // namespace
