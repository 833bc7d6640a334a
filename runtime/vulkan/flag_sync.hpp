// Flag waits between dispatches instead of pipeline barriers (shaders/flag_sync.glsl says why and
// how): the kernel source rewrite, and where the wait's binding and push-constant word sit.
#pragma once
#include <cstdint>
#include <string>

namespace strata::gpu {

// The wait's target: one word past the push-constant range every kernel's own block fits in
// (pipelines.hpp), so flag-sync pipelines need a device with maxPushConstantsSize >= 132.
inline constexpr std::uint32_t flag_sync_push_offset = 128;
inline constexpr std::uint32_t flag_sync_push_bytes = flag_sync_push_offset + 4;

// `src` (an assembled kernel) rewritten to wait for the dispatches before its level and count
// itself done: main() renamed and wrapped (flag_sync.glsl), the wait's word added to its push
// constants, and every buffer but the weights made coherent (no stale L1 lines of a buffer a
// dispatch still running beside it wrote). Throws naming `label` when the source has no main().
// The counter words (count, timeouts) are bound at `binding`, the slot after the kernel's own.
// Lab knobs: `backoff` iterations of integer work between the waiter's polls; `coherent` false
// leaves the buffers as declared (results may then be wrong).
struct flag_sync_options {
  std::uint32_t backoff = 0;
  bool coherent = true;
};
std::string with_flag_sync(const std::string& src, const std::string& label, std::uint32_t binding,
                           const flag_sync_options& o = {});

}  // namespace strata::gpu
