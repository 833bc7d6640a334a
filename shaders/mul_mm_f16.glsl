// Prefill GEMM on tensor cores over f16 weights: Y[t][n] = sum_k X[t][k] W[n][k], W in plain f16
// rows (an F16 model's matrix, or a quantized one dequant_f16.glsl expanded into scratch), X f32.
// A workgroup owns BM weight rows x BN tokens, each warp WM x WN of them as 16x16 f32
// accumulators (VK_NV_cooperative_matrix, f16 x f16 -> f32). K advances BK at a time through two
// shared buffers: the next step's tiles are read from memory into registers before this step's
// products are issued and stored to the other buffer after them, so memory latency hides behind
// the tensor cores with one barrier per step. Shared rows are padded by 16 bytes so the fragment
// loads of neighbouring rows fall into different banks. Every loop but K's is unrolled: an array of
// cooperative matrices indexed in a loop the compiler keeps would live in local memory (measured:
// 30 instead of 380 TFLOP/s of the same multiply-adds).
// QW: W in its own format (one with an MM_SMALL unit, quant/*.glsl HAS_MMS_UNIT): thread r < BM
// loads row r's raw 64-element unit (a step ahead, every other step when BK is 32) and expands the
// step's 32 or 64 elements to f16 as it stashes them, so no f16 copy of the weights is written and
// read back (dequant_f16.glsl), and a tile costs a quarter to a half of the bytes. QW2: two
// threads per row (r and r + BM) each load and expand 16 of the step's 32 elements
// (mms_load2/mms_expand2), so every thread of a 2 x BM workgroup shares the expansion.
// TOK_FAST: workgroup x walks token tiles, so the workgroups that read one weight tile run
// together and share it in L2. SPLIT_K: workgroup z multiplies K range [z k_chunk, (z+1) k_chunk)
// into its own partial product at y_off + z part_stride (split_k_sum.glsl adds them up), so a
// matmul with few tiles (K/V projections, batches of 16-64 tokens) still fills every SM.
// SWIGLU (WM 32, 16x16 products, no SPLIT_K): gate, up and the SwiGLU in one GEMM. The N = 2F
// weight rows interleave in groups of 32: 16 rows of gate, then the same 16 rows of up (QW: bound
// as one range, up up_off bytes after gate; f16: one part's rows expanded into the scratch, gate's
// then up's), so a warp's fragment j = 0 holds gate sums and j = 1 up's for the same 16 outputs. The store writes silu(gate) * up as f32 into y (F columns) and
// as f16 into yh (rows h_stride halves apart from h_off, both even): the down matmul's input.
// The host splits the rows into parts (row0) small enough that a weight tile is still in L2
// when its next token tile reads it: gate and up together span twice the rows of either.
#extension GL_EXT_control_flow_attributes : require
layout(local_size_x = WG) in;
#ifdef X_F16
layout(binding = 1, std430) readonly buffer XH { uvec4 xh[]; };  // activations already f16 (copy_rows TO_F16)
#else
layout(binding = 1, std430) readonly buffer X4 { vec4 x4[]; };
#endif
layout(binding = 2, std430) writeonly buffer Y { float y[]; };
#ifdef SWIGLU
layout(binding = 3, std430) writeonly buffer YH { uint yh[]; };  // f16 pairs
#endif
#ifdef RESIDUAL
layout(binding = 3, std430) readonly buffer R { float res[]; };  // y = r + W x (r may be y itself)
#endif
layout(push_constant) uniform Params {
  uint K, N, n_tok;
  uint w_off;              // in uvec4 (8 halves): row 0 of W; rows are K halves apart
  uint x_off, x_stride;    // in floats (multiples of 4); X_F16: in halves (multiples of 8)
  uint y_off, y_stride;    // in floats
  uint row_bytes;          // QW: bytes per weight row (w_off is then in bytes)
  uint k_chunk, part_stride;  // SPLIT_K: K elements per workgroup z (a multiple of 64), floats between partials
  uint up_off, h_off, h_stride;  // SWIGLU: bytes from gate to up; yh's rows, in halves
  uint row0;                     // SWIGLU: the first (interleaved) row of this dispatch's part
  uint r_off, r_stride;          // RESIDUAL: the rows added to the product, in floats
} p;

const uint RS = BK / 8 + 1;  // shared row stride in uvec4
const uint WARPS_M = BM / WM;
// MMA_N: weights per accumulator tile, 16 (16x16x16 products) or 8 (16x8x16: the H100's
// register-only probe ran them at 556 against 382 TFLOP/s).
#ifndef MMA_N
#define MMA_N 16
#endif
#if defined(SWIGLU) && (WM != 32 || MMA_N != 16 || defined(SPLIT_K))
#error "mul_mm_f16 SWIGLU: 32-row warp tiles of 16x16 products, K not split"
#endif
#if defined(RESIDUAL) && (defined(SWIGLU) || defined(SPLIT_K))
#error "mul_mm_f16 RESIDUAL: a plain unsplit product (split_k_sum adds a split one's)"
#endif
const uint TI = WN / 16, TJ = WM / MMA_N;  // accumulator tiles per warp: tokens x weights
const uint W_VECS = BM * (BK / 8), X_VECS = BN * (BK / 8);  // uvec4 per tile
const uint W_PER = (W_VECS + WG - 1) / WG, X_PER = (X_VECS + WG - 1) / WG;
#ifdef QW
#if (BK != 32 && BK != 64) || BM > WG
#error "mul_mm_f16 QW: a step is half or all of a 64-element unit (BK 32 or 64) per weight row, one row per thread (BM <= WG)"
#endif
#ifdef QW2
#if 2 * BM > WG
#error "mul_mm_f16 QW2: two threads per weight row (2 BM <= WG)"
#endif
mms_raw2 wq;  // this thread's part of its row's unit for the next stash
#else
mms_raw wq;  // this thread's row's unit for the next stash
#endif
bool wq_live = false;
uint wq_unit = 0;
#else
uvec4 wr[W_PER];
#endif
const uint TILE = (BM + BN) * RS;  // one buffer: weight rows, then token rows
#if 2 * (BM + BN) * (BK / 8 + 1) * 16 > 49152
#error "mul_mm_f16: two tiles of (BM + BN) x BK halves need more than 48 KiB of shared memory"
#endif
shared uvec4 sh[2 * TILE];

#ifdef X_F16
uvec4 xr[X_PER];
#else
vec4 xr[2 * X_PER];
#endif

#ifdef QW
// Byte offset of weight row r within the bound range (SWIGLU: interleaved gate / up rows).
uint w_row_base(uint r) {
#ifdef SWIGLU
  return ((r >> 5) * 16 + (r & 15u)) * p.row_bytes + ((r & 16u) != 0 ? p.up_off : 0u);
#else
  return r * p.row_bytes;
#endif
}
#else
// uvec4 offset of f16 weight row r. SWIGLU: the bound rows hold one part, gate rows row0 / 2 ..
// then up's same rows, up_off bytes after them (the scratch, record_mm3_swiglu).
uint w_row_vec(uint r) {
#ifdef SWIGLU
  return ((r >> 5) * 16 + (r & 15u) - p.row0 / 2) * (p.K / 8) + ((r & 16u) != 0 ? p.up_off / 16 : 0u);
#else
  return r * (p.K / 8);
#endif
}
#endif

void fetch(uint n0, uint t0, uint k0) {
  const uint tid = gl_LocalInvocationID.x;
#ifdef QW
  if (k0 % 64 == 0) {  // BK 32: the unit loaded for the first half serves the second
    wq_unit = k0 / 64;
#ifdef QW2
    const uint r = tid % BM;
    wq_live = tid < 2 * BM && n0 + r < p.N;
    if (wq_live) wq = mms_load2(p.w_off + w_row_base(n0 + r), wq_unit, tid / BM);
#else
    wq_live = tid < BM && n0 + tid < p.N;
    if (wq_live) wq = mms_load(p.w_off + w_row_base(n0 + tid), wq_unit);
#endif
  }
#else
  [[unroll]] for (uint i = 0; i < W_PER; ++i) {
    const uint q = tid + i * WG, r = q / (BK / 8), c = q % (BK / 8);
    wr[i] = uvec4(0);
    if (q < W_VECS && n0 + r < p.N) wr[i] = w128[p.w_off + w_row_vec(n0 + r) + k0 / 8 + c];
  }
#endif
#ifdef X_F16
  [[unroll]] for (uint i = 0; i < X_PER; ++i) {
    const uint q = tid + i * WG, t = q / (BK / 8), c = q % (BK / 8);
    xr[i] = uvec4(0);
    if (q < X_VECS && t0 + t < p.n_tok) xr[i] = xh[(p.x_off + (t0 + t) * p.x_stride + k0) / 8 + c];
  }
#else
  [[unroll]] for (uint i = 0; i < X_PER; ++i) {
    const uint q = tid + i * WG, t = q / (BK / 8), c = q % (BK / 8);
    xr[2 * i] = vec4(0.0);
    xr[2 * i + 1] = vec4(0.0);
    if (q < X_VECS && t0 + t < p.n_tok) {
      const uint xo = (p.x_off + (t0 + t) * p.x_stride + k0 + 8 * c) >> 2;
      xr[2 * i] = x4[xo];
      xr[2 * i + 1] = x4[xo + 1];
    }
  }
#endif
}

void stash(uint buf, uint k0) {
  const uint tid = gl_LocalInvocationID.x, base = buf * TILE;
#if defined(QW) && defined(QW2)
  if (tid < 2 * BM) {
    const uint r = tid % BM, part = tid / BM;
    [[unroll]] for (uint hf = 0; hf < BK / 32; ++hf) {
      uvec4 h[2];
      if (wq_live) mms_expand2(wq, wq_unit, BK == 64 ? hf : (k0 / 32) & 1u, h);
      else h[0] = h[1] = uvec4(0);
      sh[base + r * RS + 4 * hf + 2 * part] = h[0];
      sh[base + r * RS + 4 * hf + 2 * part + 1] = h[1];
    }
  }
#elif defined(QW)
  if (tid < BM) {
    [[unroll]] for (uint hf = 0; hf < BK / 32; ++hf) {
      uvec4 h[4];
      if (wq_live) mms_expand_half(wq, wq_unit, BK == 64 ? hf : (k0 / 32) & 1u, h);
      else [[unroll]] for (uint c = 0; c < 4; ++c) h[c] = uvec4(0);
      [[unroll]] for (uint c = 0; c < 4; ++c) sh[base + tid * RS + 4 * hf + c] = h[c];
    }
  }
#else
  [[unroll]] for (uint i = 0; i < W_PER; ++i) {
    const uint q = tid + i * WG;
    if (q < W_VECS) sh[base + (q / (BK / 8)) * RS + q % (BK / 8)] = wr[i];
  }
#endif
  [[unroll]] for (uint i = 0; i < X_PER; ++i) {
    const uint q = tid + i * WG;
#ifdef X_F16
    const uvec4 v = xr[i];
#else
    const vec4 a = xr[2 * i], b = xr[2 * i + 1];
    const uvec4 v = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
#endif
    if (q < X_VECS) sh[base + BM * RS + (q / (BK / 8)) * RS + q % (BK / 8)] = v;
  }
}

void main() {
#ifdef QW
  w_set_rows(p.row_bytes);
#endif
#ifdef SWIGLU
  const uint r0 = p.row0;  // one part of the rows: those from row0
#else
  const uint r0 = 0;
#endif
#ifdef TOK_FAST
  const uint n0 = r0 + gl_WorkGroupID.y * BM, t0 = gl_WorkGroupID.x * BN;
#else
  const uint n0 = r0 + gl_WorkGroupID.x * BM, t0 = gl_WorkGroupID.y * BN;
#endif
  const uint warp = gl_SubgroupID;
  const uint wn = (warp % WARPS_M) * WM, wt = (warp / WARPS_M) * WN;
  fcoopmatNV<32, gl_ScopeSubgroup, 16, MMA_N> acc[TI][TJ];
  [[unroll]] for (uint i = 0; i < TI; ++i)
    [[unroll]] for (uint j = 0; j < TJ; ++j) acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, MMA_N>(0.0);

#ifdef SPLIT_K
  const uint kb = gl_WorkGroupID.z * p.k_chunk, ke = min(p.K, kb + p.k_chunk), y_base = p.y_off + gl_WorkGroupID.z * p.part_stride;
#else
  const uint kb = 0, ke = p.K, y_base = p.y_off;
#endif
  fetch(n0, t0, kb);
  stash(0, kb);
  barrier();
  uint buf = 0;
  for (uint k0 = kb; k0 < ke; k0 += BK) {
    const bool more = k0 + BK < ke;
#if !defined(LAB) || (LAB & 1) == 0  // kernel-lab knobs: LAB bit 0 skips the memory reads, bit 1 the fragment loads
    if (more) fetch(n0, t0, k0 + BK);
#endif
    const uint wb = buf * TILE, xb = wb + BM * RS;
    [[unroll]] for (uint kk = 0; kk < BK; kk += 16) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[TI];
      fcoopmatNV<16, gl_ScopeSubgroup, 16, MMA_N> b[TJ];
#if defined(LAB) && (LAB & 2) != 0
      if (k0 == 0)
#endif
      {
        [[unroll]] for (uint i = 0; i < TI; ++i) coopMatLoadNV(a[i], sh, xb + (wt + 16 * i) * RS + kk / 8, RS, false);
        [[unroll]] for (uint j = 0; j < TJ; ++j) coopMatLoadNV(b[j], sh, wb + (wn + MMA_N * j) * RS + kk / 8, RS, true);
      }
      [[unroll]] for (uint i = 0; i < TI; ++i)
        [[unroll]] for (uint j = 0; j < TJ; ++j) acc[i][j] = coopMatMulAddNV(a[i], b[j], acc[i][j]);
    }
    if (more) stash(buf ^ 1u, k0 + BK);
    barrier();  // the other buffer is complete, and nobody reads this one any more
    buf ^= 1u;
  }

  // Whole tiles go straight from the accumulators to y; edge tiles through a 16 x MMA_N square
  // per warp in the (now unused) shared buffer, at most 64 uvec4 = 256 floats each. RESIDUAL adds
  // r + product as elementwise.glsl OP_ADD does, element by element.
#ifdef RESIDUAL
  const bool whole = n0 + BM <= p.N && t0 + BN <= p.n_tok && y_base % 4 == 0 && p.y_stride % 4 == 0 && p.r_off % 4 == 0 &&
                     p.r_stride % 4 == 0;
#else
  const bool whole = n0 + BM <= p.N && t0 + BN <= p.n_tok && y_base % 4 == 0 && p.y_stride % 4 == 0;
#endif
  const uint st = warp * 64;
#ifdef SWIGLU
  // Each warp hands its gate and up sums to itself through shared memory, then every lane takes
  // output pairs (token-fast grids gave wrong partial token tiles on the H200 with this and with
  // an epilogue indexing the accumulators in place, not understood: only rows-fast parts run):
  // silu(gate) * up as elementwise.glsl OP_SWIGLU computes it, into y, and as f16 pairs rounded as
  // copy_rows TO_F16 rounds into yh. Output columns c .. c + 15 are the warp's 16 row pairs.
  const uint c = (n0 + wn) / 2, sw = warp * 128, lane = gl_SubgroupInvocationID;
  [[unroll]] for (uint i = 0; i < TI; ++i) {
    coopMatStoreNV(acc[i][0], sh, sw, 4, false);  // rows of 16 floats: tokens x outputs
    coopMatStoreNV(acc[i][1], sh, sw + 64, 4, false);
    subgroupMemoryBarrierShared();
    subgroupBarrier();
    const uint t = t0 + wt + 16 * i;
    for (uint q = lane; q < 128; q += 32) {
      const uint r = q / 8, e = r * 16 + 2 * (q % 8), tt = t + r, cc = c + 2 * (q % 8);
      const uvec4 gq = sh[sw + e / 4], uq = sh[sw + 64 + e / 4];
      const vec2 gs = uintBitsToFloat(e % 4 == 0 ? gq.xy : gq.zw), us = uintBitsToFloat(e % 4 == 0 ? uq.xy : uq.zw);
      const vec2 o = vec2(gs.x / (1.0 + exp(-gs.x)) * us.x, gs.y / (1.0 + exp(-gs.y)) * us.y);
      if (tt < p.n_tok && 2 * cc < p.N) {  // N / 2 is a multiple of 32: pairs never straddle it
        y[y_base + tt * p.y_stride + cc] = o.x;
        y[y_base + tt * p.y_stride + cc + 1] = o.y;
        yh[(p.h_off + tt * p.h_stride + cc) / 2] = packHalf2x16(o);
      }
    }
    subgroupBarrier();
  }
#else
  [[unroll]] for (uint i = 0; i < TI; ++i)
    [[unroll]] for (uint j = 0; j < TJ; ++j) {
      const uint t = t0 + wt + 16 * i, n = n0 + wn + MMA_N * j;
      if (whole) {
#ifdef RESIDUAL
        fcoopmatNV<32, gl_ScopeSubgroup, 16, MMA_N> r;
        coopMatLoadNV(r, res, p.r_off + t * p.r_stride + n, p.r_stride, false);
        acc[i][j] = r + acc[i][j];
#endif
        coopMatStoreNV(acc[i][j], y, y_base + t * p.y_stride + n, p.y_stride, false);
      } else {
        coopMatStoreNV(acc[i][j], sh, st, MMA_N / 4, false);  // rows of MMA_N floats
        subgroupMemoryBarrierShared();
        subgroupBarrier();
        for (uint e = gl_SubgroupInvocationID; e < 16 * MMA_N; e += 32) {
          const uint tt = t + e / MMA_N, nn = n + e % MMA_N;
#ifdef RESIDUAL
          if (tt < p.n_tok && nn < p.N)
            y[y_base + tt * p.y_stride + nn] = res[p.r_off + tt * p.r_stride + nn] + uintBitsToFloat(sh[st + e / 4][e % 4]);
#else
          if (tt < p.n_tok && nn < p.N) y[y_base + tt * p.y_stride + nn] = uintBitsToFloat(sh[st + e / 4][e % 4]);
#endif
        }
        subgroupBarrier();
      }
    }
#endif
}
