// A hand-off's meeting point inside one submitted step (runtime/vulkan/handoff_poll.cpp): the GPU
// tells the host that the part before hand-off `index` is done (SIGNAL), then spins until the
// host says its CPU work is in the result buffer (WAIT). Done words live in host memory (the GPU
// writes, the host polls); the step's tag and the go words live in device-local memory the host
// maps (the BAR): the H200's L2 kept a stale copy of a go word in host memory for as long as the
// GPU polled it, whereas the host's writes through the BAR land where the GPU reads. Word 0 of
// Go holds the step's tag (written before the submit); hand-off i's words sit on their own
// 64-byte lines at 16 * (1 + i). Tags change every step, so a word left from an earlier step
// never matches. The spin is bounded: after `max_spins` x 1024 reads the kernel gives up and
// raises Done word 1, which the host turns into an error instead of a hang.
layout(local_size_x = 1) in;
layout(binding = 1, std430) coherent volatile buffer Done { uint done[]; };
layout(binding = 2, std430) coherent volatile buffer Go { uint go[]; };
// zero: 0, pushed, so no compiler can prove the polled address the same every iteration and
// read it once. (llvmpipe caps a shader's loop iterations, so on lavapipe the wait gives up
// early: the backend's start-up probe sees that and keeps the timeline path there.)
layout(push_constant) uniform Params { uint index, max_spins, zero; } p;

void main() {
  const uint tag = go[0];
  const uint at = 16u * (1u + p.index);
#ifdef SIGNAL
  memoryBarrierBuffer();
  done[at] = tag;
  memoryBarrierBuffer();
#else
  for (uint i = 0u; i < p.max_spins; ++i)
    for (uint j = 0u; j < 1024u; ++j)
      if (go[at + (j & p.zero)] == tag) {
        memoryBarrierBuffer();
        return;
      }
  done[1] = 1u;
#endif
}
