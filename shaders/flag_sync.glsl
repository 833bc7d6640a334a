// Flag waits instead of pipeline barriers between a decode step's dispatches (STRATA_VK_FLAG_SYNC;
// runtime/vulkan/flag_sync.hpp appends this file and renames the kernel's main() to
// strata_kernel_main()). A pipeline barrier drains the GPU and launches the next grid only after,
// ~2.7 us a dependent level on the H200; a decode step has ~290 of them (qwen3-30b-a3b). Here the
// recorder puts no barrier between dispatches: each workgroup's first invocation spins until the
// step's counter reaches strata_sync_wait, the workgroups of every dispatch recorded before its
// level, and each workgroup adds one when all its invocations are done. The next grid is then
// already resident while the previous one drains.
// Why this cannot deadlock: a queue launches one grid's workgroups only after every workgroup of
// the grids before it has launched, so every workgroup a waiter counts on is resident or done.
// A spin is still bounded: past FLAG_SYNC_SPINS polls the workgroup counts a timeout (the host
// reads it after the step and fails the step) and goes on.
layout(binding = FLAG_SYNC_BINDING, std430) coherent volatile buffer StrataSync {
  uint strata_sync_count;
  uint strata_sync_timeouts;
};
shared uint strata_sync_done;
const uint FLAG_SYNC_SPINS = 1u << 20;

void main() {
  if (gl_LocalInvocationIndex == 0) {
    strata_sync_done = 0;
    const uint expected = p.strata_sync_wait;
    uint x = expected;
    for (uint spins = 0; strata_sync_count < expected; ++spins) {
      if (spins == FLAG_SYNC_SPINS) {
        atomicAdd(strata_sync_timeouts, 1u);
        break;
      }
      for (uint i = 0; i < FLAG_SYNC_BACKOFF; ++i) x = x * 1664525u + 1013904223u;  // fewer polls of the hot word
    }
    if (x == 0x9e3779b9u && expected == 0x9e3779b9u) strata_sync_done = 1;  // keeps the backoff's work
  }
  memoryBarrier();
  barrier();
  strata_kernel_main();
  // Every invocation's writes are visible device-wide before it counts itself; the last one of the
  // workgroup counts the workgroup. No barrier: invocations that returned early must not meet one.
  memoryBarrier();
  if (atomicAdd(strata_sync_done, 1u) + 1 == gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z) {
    memoryBarrier();
    atomicAdd(strata_sync_count, 1u);
  }
}
