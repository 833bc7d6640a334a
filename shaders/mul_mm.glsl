// Quantized matrix x many tokens (prefill): Y[t][n] = sum_k X[t][k] W[n][k], tiled: a workgroup
// computes BM weight rows x BN tokens, stepping K by BK; each step dequantizes its weight tile
// (any format, through dequant_row16) and its activation tile into shared memory once, so a weight
// element is read from memory once per BN tokens instead of once per token.
// COOPMAT: the tile product runs on tensor cores (VK_NV_cooperative_matrix, f16 x f16 -> f32,
// 16x16x16 per subgroup op); otherwise each thread accumulates a TM x TN block in f32 (the
// portable path, tested on lavapipe). MMA2 (with COOPMAT): larger, double-buffered tiles.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer X4 { vec4 x4[]; };
layout(binding = 2, std430) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint x_off, x_stride, y_off, y_stride;
#ifdef SPLIT_K
  uint k_chunk, part_stride;  // K elements per workgroup z (a multiple of BK); floats between partials
#endif
} p;

#if !defined(MMA2)
// NARROW (portable path): 32 x 32 tiles for matrices of few rows (an MoE router's f32 rows, kept
// off the f16 tensor cores); with SPLIT_K each workgroup z multiplies one K range into its own
// partial product (split_k_sum.glsl adds them), so 128 rows x a prompt still fill the GPU.
#ifdef NARROW
const uint BM = 32, BN = 32, BK = 32;
#else
const uint BM = 64, BN = 64, BK = 32;
#endif
#ifdef COOPMAT
shared float16_t ws[BM * BK];  // [n][k]
shared float16_t xs[BN * BK];  // [t][k]
shared float cs[BN * BM];      // staging of the result tile for bounds-checked stores
#else
shared float ws[BM][BK + 1];
shared float xs[BN][BK + 1];
#ifdef NARROW
const uint TM = 2, TN = 4;  // per thread: TM rows x TN tokens (32*32 / 128 threads = 8)
#else
const uint TM = 4, TN = 8;  // per thread: TM rows x TN tokens (64*64 / 128 threads = 32)
#endif
#endif
#if defined(SPLIT_K) && defined(COOPMAT)
#error "mul_mm: SPLIT_K is the portable path's (mul_mm_f16.glsl splits the tensor-core GEMM)"
#endif

void main() {
  w_set_rows(p.row_bytes);
  const uint n0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN, tid = gl_LocalInvocationID.x;
#ifdef COOPMAT
  // Subgroup s (of 4, 32 lanes each) owns token rows [16s, 16s+16) and all BM weight columns.
  const uint mt = 16 * gl_SubgroupID;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[4];
  [[unroll]] for (uint j = 0; j < 4; ++j) acc[j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
#else
  const uint tr = (tid % (BM / TM)) * TM, tt = (tid / (BM / TM)) * TN;
  float acc[TM][TN];
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] = 0.0;
#endif

#ifdef SPLIT_K
  const uint k_begin = gl_WorkGroupID.z * p.k_chunk, k_end = min(p.K, k_begin + p.k_chunk);
  const uint y_base = gl_WorkGroupID.z * p.part_stride;
#else
  const uint k_begin = 0, k_end = p.K, y_base = 0;
#endif
  for (uint k0 = k_begin; k0 < k_end; k0 += BK) {
    // Weight tile: BM rows x BK = BM * (BK/16) parts of 16.
    for (uint q = tid; q < BM * (BK / 16); q += WG) {
      const uint r = q / (BK / 16), c = (k0 / 16) + q % (BK / 16);
      float v[16];
      if (n0 + r < p.N) dequant_row16((n0 + r) * p.row_bytes, c, v);
      else for (uint i = 0; i < 16; ++i) v[i] = 0.0;
      const uint kk = 16 * (q % (BK / 16));
      [[unroll]] for (uint i = 0; i < 16; ++i) {
#ifdef COOPMAT
        ws[r * BK + kk + i] = float16_t(v[i]);
#else
        ws[r][kk + i] = v[i];
#endif
      }
    }
    // Activation tile: BN tokens x BK, as vec4.
    for (uint q = tid; q < BN * (BK / 4); q += WG) {
      const uint t = q / (BK / 4), kk = 4 * (q % (BK / 4));
      vec4 v = vec4(0.0);
      if (t0 + t < p.n_tok) v = x4[(p.x_off + (t0 + t) * p.x_stride + k0 + kk) >> 2];
#ifdef COOPMAT
      xs[t * BK + kk] = float16_t(v.x);
      xs[t * BK + kk + 1] = float16_t(v.y);
      xs[t * BK + kk + 2] = float16_t(v.z);
      xs[t * BK + kk + 3] = float16_t(v.w);
#else
      xs[t][kk] = v.x;
      xs[t][kk + 1] = v.y;
      xs[t][kk + 2] = v.z;
      xs[t][kk + 3] = v.w;
#endif
    }
    barrier();
#ifdef COOPMAT
    [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
      coopMatLoadNV(a, xs, mt * BK + kk, BK, false);  // X rows (tokens) x k
      [[unroll]] for (uint j = 0; j < 4; ++j) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b;
        coopMatLoadNV(b, ws, (16 * j) * BK + kk, BK, true);  // k x W rows: column-major view of [n][k]
        acc[j] = coopMatMulAddNV(a, b, acc[j]);
      }
    }
#else
    [[unroll]] for (uint kk = 0; kk < BK; ++kk) {
      float wv[TM], xv[TN];
      [[unroll]] for (uint i = 0; i < TM; ++i) wv[i] = ws[tr + i][kk];
      [[unroll]] for (uint j = 0; j < TN; ++j) xv[j] = xs[tt + j][kk];
      [[unroll]] for (uint i = 0; i < TM; ++i)
        [[unroll]] for (uint j = 0; j < TN; ++j) acc[i][j] += wv[i] * xv[j];
    }
#endif
    barrier();
  }

#ifdef COOPMAT
  [[unroll]] for (uint j = 0; j < 4; ++j) coopMatStoreNV(acc[j], cs, mt * BM + 16 * j, BM, false);
  barrier();
  for (uint q = tid; q < BN * BM; q += WG) {
    const uint t = q / BM, r = q % BM;
    if (t0 + t < p.n_tok && n0 + r < p.N) y[p.y_off + (t0 + t) * p.y_stride + n0 + r] = cs[q];
  }
#else
  [[unroll]] for (uint i = 0; i < TM; ++i)
    [[unroll]] for (uint j = 0; j < TN; ++j)
      if (n0 + tr + i < p.N && t0 + tt + j < p.n_tok) y[y_base + p.y_off + (t0 + tt + j) * p.y_stride + n0 + tr + i] = acc[i][j];
#endif
}
#elif defined(MMA2)
// Tensor-core tiles, second generation: BM weight rows x BN tokens per workgroup, each warp a
// WM x WN block of 16x16 accumulators (tokens x weights), weight and activation tiles in f16
// shared memory double-buffered over BK = 32 (the next tile is dequantized while the warps
// multiply the current one), results stored straight from the accumulators when the tile is
// whole and through a per-warp 16x16 staging square at the edges. Tiles are written 8 halves
// (one uvec4) at a time, rows padded to 5 uvec4 so neighbouring rows start in other banks.
const uint BK = 32;
const uint RS = BK / 8 + 1;  // row stride in uvec4
const uint WARPS_M = BM / WM, WARPS_N = BN / WN;
const uint TI = WN / 16, TJ = WM / 16;  // accumulator tiles per warp: tokens x weights
shared uvec4 ws[2][BM * RS];  // [n][k] as f16 pairs
shared uvec4 xs[2][BN * RS];  // [t][k]
shared float stage[WG / 32][256];

uvec4 pack8(vec4 a, vec4 b) {
  return uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
}

void load_tiles(uint buf, uint n0, uint t0, uint k0) {
  const uint tid = gl_LocalInvocationID.x;
  for (uint q = tid; q < BM * (BK / 16); q += WG) {
    const uint r = q / (BK / 16), c = q % (BK / 16), part = k0 / 16 + c;
    float v[16];
    if (n0 + r < p.N) dequant_row16((n0 + r) * p.row_bytes, part, v);
    else for (uint i = 0; i < 16; ++i) v[i] = 0.0;
    ws[buf][r * RS + 2 * c] = pack8(vec4(v[0], v[1], v[2], v[3]), vec4(v[4], v[5], v[6], v[7]));
    ws[buf][r * RS + 2 * c + 1] = pack8(vec4(v[8], v[9], v[10], v[11]), vec4(v[12], v[13], v[14], v[15]));
  }
  for (uint q = tid; q < BN * (BK / 8); q += WG) {
    const uint t = q / (BK / 8), c = q % (BK / 8);
    vec4 a = vec4(0.0), b = vec4(0.0);
    if (t0 + t < p.n_tok) {
      const uint xo = (p.x_off + (t0 + t) * p.x_stride + k0 + 8 * c) >> 2;
      a = x4[xo];
      b = x4[xo + 1];
    }
    xs[buf][t * RS + c] = pack8(a, b);
  }
}

void main() {
  w_set_rows(p.row_bytes);
  const uint n0 = gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN;
  const uint warp = gl_SubgroupID;
  const uint wn = (warp % WARPS_M) * WM, wt = (warp / WARPS_M) * WN;  // weight / token offsets
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[TI][TJ];
  [[unroll]] for (uint i = 0; i < TI; ++i)
    [[unroll]] for (uint j = 0; j < TJ; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);

  load_tiles(0, n0, t0, 0);
  barrier();
  uint buf = 0;
  for (uint k0 = 0; k0 < p.K; k0 += BK) {
    if (k0 + BK < p.K) load_tiles(buf ^ 1u, n0, t0, k0 + BK);  // overlaps the products below
    [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[TI], b[TJ];
      // Offsets and strides in uvec4 (8 halves) of the shared arrays.
      [[unroll]] for (uint i = 0; i < TI; ++i) coopMatLoadNV(a[i], xs[buf], (wt + 16 * i) * RS + kk / 8, RS, false);
      [[unroll]] for (uint j = 0; j < TJ; ++j) coopMatLoadNV(b[j], ws[buf], (wn + 16 * j) * RS + kk / 8, RS, true);
      [[unroll]] for (uint i = 0; i < TI; ++i)
        [[unroll]] for (uint j = 0; j < TJ; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
    }
    barrier();  // the next buffer is complete, and nobody still reads this one
    buf ^= 1u;
  }

  const bool whole = n0 + BM <= p.N && t0 + BN <= p.n_tok && p.y_off % 4 == 0 && p.y_stride % 4 == 0;
  [[unroll]] for (uint i = 0; i < TI; ++i)
    [[unroll]] for (uint j = 0; j < TJ; ++j) {
      const uint t = t0 + wt + 16 * i, n = n0 + wn + 16 * j;
      if (whole) {
        coopMatStoreNV(acc[i][j], y, p.y_off + t * p.y_stride + n, p.y_stride, false);
      } else {
        coopMatStoreNV(acc[i][j], stage[warp], 0, 16, false);
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint e = gl_SubgroupInvocationID; e < 256; e += 32) {
          const uint tt = t + e / 16, nn = n + e % 16;
          if (tt < p.n_tok && nn < p.N) y[p.y_off + tt * p.y_stride + nn] = stage[warp][e];
        }
        subgroupBarrier();
      }
    }
}
#endif
