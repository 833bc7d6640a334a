// Tensor-core rate probe (vk_matvec_bench --mma-probe): every warp multiply-accumulates register
// operands ITERS times for one cooperative-matrix shape (MM x NN x KK, f16 inputs, f32 or, with
// ACC16, f16 accumulators), four independent accumulators deep, so the time is the shape's raw
// throughput on this device and driver: what a GEMM built on that shape can at best reach.
layout(local_size_x = WG) in;
layout(binding = 0, std430) writeonly buffer Y { float y[]; };
layout(binding = 1, std430) readonly buffer X { float16_t x[]; };
layout(push_constant) uniform Params { uint iters; } p;
#ifdef ACC16
#define ACC fcoopmatNV<16, gl_ScopeSubgroup, MM, NN>
#else
#define ACC fcoopmatNV<32, gl_ScopeSubgroup, MM, NN>
#endif

void main() {
  fcoopmatNV<16, gl_ScopeSubgroup, MM, KK> a;
  fcoopmatNV<16, gl_ScopeSubgroup, KK, NN> b;
  coopMatLoadNV(a, x, 0, KK, false);
  coopMatLoadNV(b, x, MM * KK, NN, false);
  ACC c[4];
  for (uint j = 0; j < 4; ++j) c[j] = ACC(0.0);
  for (uint i = 0; i < p.iters; ++i)
    for (uint j = 0; j < 4; ++j) c[j] = coopMatMulAddNV(a, b, c[j]);
  const uint warp = gl_WorkGroupID.x * (WG / 32) + gl_SubgroupID;
#ifdef ACC16
  fcoopmatNV<32, gl_ScopeSubgroup, MM, NN> o = fcoopmatNV<32, gl_ScopeSubgroup, MM, NN>(c[0] + c[1] + c[2] + c[3]);
#else
  ACC o = c[0] + c[1] + c[2] + c[3];
#endif
  coopMatStoreNV(o, y, warp * MM * NN, NN, false);
}
