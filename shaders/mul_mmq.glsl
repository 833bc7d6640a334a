// GEMM on int8 tensor cores: Y[t][n] = sum_k X[t][k] W[n][k], X as quantize_q8.glsl's int8 rows
// (blocks of 32 codes, a scale d and a code sum d sum q per block), W in its own format
// (quant/*.glsl HAS_MMQ_UNIT: a 64-element unit unpacked to int8 codes and per-sub-block factors).
// Why: the f16 GEMMs (mul_mm_f16 QW, mul_mm_small) expand every weight element to f16 with a
// convert and an FMA per element and multiply at the f16 rate; here a unit's codes are masks and
// shifts of its bytes, tiles hold half the bytes, and the products run at the int8 rate. That
// matters most where few tokens share a weight tile: the backend runs grouped MoE steps here
// (each expert sees a few dozen tokens of a prompt); dense GEMMs stay on f16, which is faster
// (docs/ARCHITECTURE.md; SPLIT_K, dense 16-64-token steps, is STRATA_VK_MMQ_DENSE=1's, off by default).
// A workgroup owns BM weight rows x BN tokens, each warp WM x WN of them. K advances a unit (64:
// two 32-element sub-blocks) a step through two shared buffers (the next unit read into registers
// before this one's products, stored after them; one barrier a step). Per sub-block a warp
// multiplies 16 x 32 token codes by 32 x 16 weight codes into int32 (VK_NV_cooperative_matrix +
// GL_NV_integer_cooperative_matrix, 16x16x32), and adds that tile to its f32 accumulator scaled by
// the token's block scale times the weight row's sub-block factor, less the row's min term times
// the token's code sum. The scale of an accumulator element depends on its row and column, which
// the cooperative-matrix layout does not name: at start each warp loads a 16 x 16 matrix whose
// element (r, c) holds 16 r + c, which gives each lane its first element's (r, c); MMA_DR and
// MMA_DC (runtime/vulkan/mma_layout.cpp, probed at start-up) are every element's offsets from it,
// the same in every lane, so the factors a lane needs are a few loads at constant offsets.
// MOE_GROUPED: workgroup y is a chunk of moe.glsl MOE_GROUP's table (expert, first, count); token
// t of the chunk is the sorted pair grp[sorted_off + first + t], its activations are row
// pair / in_div (a token's row for gate/up, the pair's own row for down) and its output row is
// the pair's, so nothing is gathered or scattered around the GEMM.
#extension GL_NV_integer_cooperative_matrix : require
layout(local_size_x = WG) in;
layout(binding = 1, std430) readonly buffer XQ { uvec4 xq[]; };
layout(binding = 2, std430) readonly buffer XS { vec4 xs[]; };
layout(binding = 3, std430) writeonly buffer Y { float y[]; };
#ifdef MOE_GROUPED
layout(binding = 4, std430) readonly buffer G { uint grp[]; };
#endif
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint q_off, q_stride;  // int8 rows: in uvec4 (16 codes)
  uint s_off, s_stride;  // their block scales: in vec4 (one per 32 codes)
  uint y_off, y_stride;  // in floats
  uint expert_bytes, sorted_off, in_div;
  uint k_chunk, part_stride;  // SPLIT_K: K elements per workgroup z (a multiple of 64), floats between partials
} p;

#if !defined(HAS_MMQ_UNIT)
#error "mul_mmq: the weight format has no int8 unit (quant/*.glsl HAS_MMQ_UNIT)"
#endif
#if !defined(MMA_DR) || !defined(MMA_DC)
#error "mul_mmq: the accumulator layout's element offsets (MMA_DR, MMA_DC) are required"
#endif
const int dr[8] = int[8](MMA_DR), dc[8] = int[8](MMA_DC);
// LAB (vk_matvec_bench "iq:...:LAB=bits" only; results are then wrong): parts left out to see what
// bounds the kernel. 1: the float epilogue (each block's int32 tile converted and added, no
// factors); 2: the weight units' loads and unpacking; 4: the token codes' loads; 8: the products.
#ifndef LAB
#define LAB 0
#endif
#if defined(SPLIT_K) && defined(MOE_GROUPED)
#error "mul_mmq: SPLIT_K is for dense GEMMs"
#endif
#if BM > WG
#error "mul_mmq: one weight row per thread loads and unpacks a unit (BM <= WG)"
#endif
#ifndef RS
#define RS 5  // shared row stride in uvec4: a unit's 64 codes, padded so neighbouring rows use other banks
#endif
const uint WARPS_M = BM / WM;
const uint TI = WN / 16, TJ = WM / 16;  // accumulator tiles per warp: tokens x weights
#ifdef MMQ_G16
// Weight scales of 16 elements (quant/*.glsl MMQ_G16): a token row holds each 16-code half of a
// 32-block beside 16 zeros, so one 16 x 32 fragment multiplies only that half.
#define RSX 9
#define NG 2
#else
#define RSX RS
#define NG 1
#endif
const uint TILE = BM * RS + BN * RSX;   // one buffer's codes: weight rows, then token rows
const uint X_VECS = BN * 4, X_PER = (X_VECS + WG - 1) / WG;  // token code vectors per step, per thread
#if 2 * (BM * RS + BN * RSX) * 16 + 2 * (BM + BN) * 16 + 1024 > 49152
#error "mul_mmq: two buffers of BM weight and BN token rows, their factors and the layout map need more than 48 KiB of shared memory"
#endif
shared uvec4 sh[2 * TILE];
// Factors: weight row (f sub-block 0, f 1, min 0, min 1) or, MMQ_G16, (f 0, f 1, f 2, f 3) of its
// 16-element sub-blocks; token (d 0, d 1, d sum q 0, d sum q 1) of its two 32-blocks.
shared vec4 shf[2 * (BM + BN)];
shared float lmap[256];

#define ACC fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>
#define IACC icoopmatNV<32, gl_ScopeSubgroup, 16, 16>

mmq_raw wr;       // this thread's weight row unit for the next stash (tid < BM)
bool wr_live;
uvec4 xr[X_PER];  // this thread's token code vectors for the next stash
vec4 xsr[2];      // tid < BN: its token's two block scales for the next stash
uint xrow[X_PER]; // activation row of each token code vector (~0u: no token)
uint srow;        // tid < BN: activation row of token tid

uint n0, t0, wbase, count;

uint token_row(uint t) {  // activation row of the workgroup's token t, ~0u past the end
  if (t >= count) return ~0u;
#ifdef MOE_GROUPED
  return grp[p.sorted_off + t0 + t] / p.in_div;
#else
  return t0 + t;
#endif
}

void fetch(uint u) {
  const uint tid = gl_LocalInvocationID.x;
  if ((LAB & 2) == 0 && tid < BM) wr = wr_live ? mmq_load(wbase + (n0 + tid) * p.row_bytes, u) : mmq_zero();
  [[unroll]] for (uint i = 0; i < X_PER; ++i) {
    const uint q = tid + i * WG;
    xr[i] = uvec4(0);
    if ((LAB & 4) != 0) xr[i] = uvec4(q + u);
    else if (q < X_VECS && xrow[i] != ~0u) xr[i] = xq[p.q_off + xrow[i] * p.q_stride + 4 * u + q % 4];
  }
  if (tid < BN) {
    xsr[0] = xsr[1] = vec4(0.0);
    if (srow != ~0u) {
      xsr[0] = xs[p.s_off + srow * p.s_stride + 2 * u];
      xsr[1] = xs[p.s_off + srow * p.s_stride + 2 * u + 1];
    }
  }
}

void stash(uint buf, uint u) {
  const uint tid = gl_LocalInvocationID.x, base = buf * TILE, fb = buf * (BM + BN);
  if (tid < BM) {
    uvec4 c[4];
    vec4 f;
    if ((LAB & 2) != 0) {
      c[0] = c[1] = c[2] = c[3] = uvec4(tid + u);
      f = vec4(1.0);
    } else {
      mmq_unpack(wr, u, c, f);
    }
    [[unroll]] for (uint i = 0; i < 4; ++i) sh[base + tid * RS + i] = c[i];
    shf[fb + tid] = f;
  }
  [[unroll]] for (uint i = 0; i < X_PER; ++i) {
    const uint q = tid + i * WG;
    if (q >= X_VECS) continue;
    const uint row = base + BM * RS + (q / 4) * RSX, c = q % 4;
#ifdef MMQ_G16
    const uint slot = 4 * (c >> 1) + 3 * (c & 1u);  // halves 0..3 at 0, 3, 4, 7; zeros at 1, 2, 5, 6
    sh[row + slot] = xr[i];
    sh[row + slot + 1 - 2 * (c & 1u)] = uvec4(0);
#else
    sh[row + c] = xr[i];
#endif
  }
  if (tid < BN) shf[fb + BM + tid] = vec4(xsr[0].x, xsr[1].x, xsr[0].w, xsr[1].w);
}

void main() {
  w_set_rows(p.row_bytes);
  const uint tid = gl_LocalInvocationID.x;
  n0 = gl_WorkGroupID.x * BM;
#ifdef MOE_GROUPED
  const uint chunk = gl_WorkGroupID.y;
  if (chunk >= grp[0]) return;  // the whole workgroup: no barrier has been reached
  wbase = grp[4 + 3 * chunk] * p.expert_bytes;
  t0 = grp[5 + 3 * chunk];  // the chunk's first sorted pair
  count = grp[6 + 3 * chunk];
#else
  wbase = 0;
  t0 = gl_WorkGroupID.y * BN;
  count = min(BN, p.n_tok - t0);
#endif
  wr_live = tid < BM && n0 + tid < p.N;
  [[unroll]] for (uint i = 0; i < X_PER; ++i) xrow[i] = token_row((tid + i * WG) / 4);
  srow = tid < BN ? token_row(tid) : ~0u;

  // Where each of this thread's accumulator elements sits: (r, c) = (lmap value / 16, % 16).
  for (uint i = tid; i < 256; i += WG) lmap[i] = float(i);
  barrier();
  uint r0, c0;  // this lane's element 0 of a 16 x 16 tile
  {
    ACC m;
    coopMatLoadNV(m, lmap, 0, 16, false);
    r0 = uint(m[0]) >> 4;
    c0 = uint(m[0]) & 15u;
  }

  const uint warp = gl_SubgroupID;
  const uint wn = (warp % WARPS_M) * WM, wt = (warp / WARPS_M) * WN;
  ACC acc[TI][TJ];
  [[unroll]] for (uint i = 0; i < TI; ++i)
    [[unroll]] for (uint j = 0; j < TJ; ++j) acc[i][j] = ACC(0.0);

#ifdef SPLIT_K
  // Workgroup z multiplies units [u0, units) of K into its own partial product (split_k_sum.glsl
  // adds them in order): a step of few tokens has too few tiles to fill the GPU otherwise.
  const uint u0 = gl_WorkGroupID.z * (p.k_chunk / 64), units = min(p.K / 64, u0 + p.k_chunk / 64);
  const uint y_base = gl_WorkGroupID.z * p.part_stride;
#else
  const uint u0 = 0, units = p.K / 64, y_base = 0;
#endif
  fetch(u0);
  stash(0, u0);
  barrier();
  uint buf = 0;
  for (uint u = u0; u < units; ++u) {
    const bool more = u + 1 < units;
    if (more) fetch(u + 1);
    const uint wb = buf * TILE, xb = wb + BM * RS, fb = buf * (BM + BN);
    [[unroll]] for (uint h = 0; h < 2; ++h) {  // the unit's two 32-blocks
      icoopmatNV<8, gl_ScopeSubgroup, 32, 16> b[TJ];
      [[unroll]] for (uint j = 0; j < TJ; ++j) coopMatLoadNV(b[j], sh, wb + (wn + 16 * j) * RS + 2 * h, RS, true);
      IACC ci[NG][TI][TJ];
      [[unroll]] for (uint g = 0; g < NG; ++g) {
        icoopmatNV<8, gl_ScopeSubgroup, 16, 32> a[TI];
        [[unroll]] for (uint i = 0; i < TI; ++i)
          coopMatLoadNV(a[i], sh, xb + (wt + 16 * i) * RSX + (NG == 2 ? 4 * h + 2 * g : 2 * h), RSX, false);
        [[unroll]] for (uint i = 0; i < TI; ++i)
          [[unroll]] for (uint j = 0; j < TJ; ++j)
            ci[g][i][j] = (LAB & 8) != 0 ? IACC(int(u + h)) : coopMatMulAddNV(a[i], b[j], IACC(0));
      }
      if ((LAB & 1) != 0) {
        [[unroll]] for (uint i = 0; i < TI; ++i)
          [[unroll]] for (uint j = 0; j < TJ; ++j) acc[i][j] += ACC(ci[0][i][j]) + ACC(ci[NG - 1][i][j]);
        continue;
      }
      [[unroll]] for (uint i = 0; i < TI; ++i)
        [[unroll]] for (uint j = 0; j < TJ; ++j) {
          const ACC f0 = ACC(ci[0][i][j]);
#ifdef MMQ_G16
          const ACC f1 = ACC(ci[NG - 1][i][j]);
#endif
          [[unroll]] for (uint e = 0; e < 8; ++e) {
            const vec4 sx = shf[int(fb + BM + wt + 16 * i + r0) + dr[e]], sw = shf[int(fb + wn + 16 * j + c0) + dc[e]];
#ifdef MMQ_G16
            acc[i][j][e] += sx[h] * (f0[e] * sw[2 * h] + f1[e] * sw[2 * h + 1]);
#else
            acc[i][j][e] += f0[e] * (sx[h] * sw[h]) - sw[2 + h] * sx[2 + h];
#endif
          }
        }
    }
    if (more) stash(buf ^ 1u, u + 1);
    barrier();  // the other buffer is complete, and nobody reads this one any more
    buf ^= 1u;
  }

  // Each element to its output row: the token's (MOE_GROUPED: the pair's own row).
  [[unroll]] for (uint i = 0; i < TI; ++i)
    [[unroll]] for (uint j = 0; j < TJ; ++j)
      [[unroll]] for (uint e = 0; e < 8; ++e) {
        const uint t = uint(int(wt + 16 * i + r0) + dr[e]), n = uint(int(n0 + wn + 16 * j + c0) + dc[e]);
        if (t >= count || n >= p.N) continue;
#ifdef MOE_GROUPED
        const uint row = grp[p.sorted_off + t0 + t];
#else
        const uint row = t0 + t;
#endif
        y[y_base + p.y_off + row * p.y_stride + n] = acc[i][j][e];
      }
}
