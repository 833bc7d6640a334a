// The last workgroup of a dispatch, for kernels that end with a tail of work over all of their
// outputs (norm_tail.glsl, the router's top-k, moe_combine_tail.glsl): each workgroup counts itself in on a device
// counter once its outputs are written; the one that counts last sees every other workgroup's
// outputs (read them through `coherent` bindings) and puts the counter back to 0 for the next
// dispatch that uses it (the recorder puts a barrier between two dispatches that write it).
// Every invocation of every workgroup must call last_workgroup() (no earlier return).
#if defined(MOE_COMBINE_TAIL)
#define LAST_WG_COUNTER MOE_COMBINE_TAIL
#elif defined(NORM_TAIL)
#define LAST_WG_COUNTER NORM_TAIL
#elif defined(TOPK_TAIL)
#define LAST_WG_COUNTER TOPK_TAIL
#endif
#define TAIL_COHERENT coherent

layout(binding = LAST_WG_COUNTER, std430) coherent buffer LastWgCounter { uint last_wg_counter[]; };
shared bool last_wg_is_last;

bool last_workgroup() {
  memoryBarrierBuffer();  // this workgroup's outputs are visible device-wide before it counts in
  barrier();
  if (gl_LocalInvocationIndex == 0u) {
    const uint groups = gl_NumWorkGroups.x * gl_NumWorkGroups.y * gl_NumWorkGroups.z;
    last_wg_is_last = atomicAdd(last_wg_counter[0], 1u) == groups - 1u;
    if (last_wg_is_last) last_wg_counter[0] = 0u;  // every workgroup has counted in
  }
  barrier();
  if (!last_wg_is_last) return false;
  memoryBarrierBuffer();  // every other workgroup counted in after its outputs: read them now
  return true;
}
