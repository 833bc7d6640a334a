// Small-batch matmul on tensor cores with the weight fragments built in registers (batched
// decode of 5-64 streams): Y[t][n] = sum_k X[t][k] W[n][k], W in a format with an MM_REG unit
// (quant/*.glsl HAS_MMR_UNIT), X as f16. (Reading the f32 activations in place instead of their
// f16 copy measured slower on the H200: 64 streams 4,104-4,137 -> 3,500-3,548 t/s.)
// Why not mul_mm_small: there each lane expands one row into the warp's f16 tile in shared memory
// and the warp reads it back as fragments, a store, a warp barrier and a fragment load for every
// weight element (the H200 lab's weight path alone took 2.7x the time to read the bytes at 8
// tokens). Here a lane expands only the elements its own fragment registers hold and loads its
// token's activations for the B fragment from memory: no tile, no barrier in the K loop.
// Fragments (the driver's, probed at start-up: mma_layout.cpp probe_f16_fragments): lane
// l = 4 g + t holds A elements at rows g + MMA_AR[e], columns 2t + MMA_AC[e] of a 16 x 16 tile and
// B elements at k = 2t + MMA_BK[e], token g, of a 16 x 8 one. The 64 k of a step are permuted (the
// same way for weights and activations, so the sums are the same): column 2t + 8p + j of chunk s
// (16 columns) is step element 32 (s/2) + 8t + 4 (s%2) + p + 2j. A lane's weight elements are then
// bytes 8t .. 8t+7 of each of its rows g, g+8, g+16, g+24 (both nibbles), and its activations the
// 8 halves at 8t and at 32 + 8t of its token's row.
// Where the driver's B fragments are not of that form (no MMA_BK), each warp stages its step's
// activations in shared memory in the permuted order and loads B from there.
// A workgroup owns 32 weight rows and NT8 tiles of 8 tokens; its WARPS warps split K (warp w takes
// the 64-wide steps w, w+WARPS, ...) and their partial sums meet in shared memory at the end.
// RESIDUAL: y = r + X W^T (r may be y itself: the decoder's residual add in the store).
// SWIGLU: a workgroup's rows 0-15 are gate rows n0 .. n0+15 and rows 16-31 the up matrix's same
// rows (p.up_off bytes after the gate's, in the same binding), so it owns 16 output rows; the
// store writes silu(gate) * up as f32 into y and as f16 pairs into yh (rows h_stride halves
// apart from h_off: the down matmul's input), the SwiGLU and its copy to f16 in this dispatch.
// The sums are the plain form's (same warps, same K order), so is the result.
#extension GL_KHR_shader_subgroup_shuffle : require
#ifndef WARPS
#define WARPS 8
#endif
#ifndef NT8
#define NT8 1
#endif
// XA (B through shared memory): a step's activations are loaded one step ahead (1) or just before
// they are staged (0: 8 NT8 registers a lane fewer).
#ifndef XA
#define XA 1
#endif
layout(local_size_x = 32 * WARPS) in;
layout(binding = 2, std430) writeonly buffer Y { float y[]; };
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint x_off, x_stride;  // in halves, multiples of 8
  uint y_off, y_stride;  // in floats
  uint expert_bytes, sorted_off;
  uint r_off, r_stride;  // RESIDUAL, in floats
  uint up_off, h_off, h_stride;  // SWIGLU: bytes from gate to up; yh's rows, in halves
} p;
#if defined(RESIDUAL) && defined(SWIGLU)
#error "mul_mm_reg: RESIDUAL and SWIGLU are separate forms"
#endif
#ifdef RESIDUAL
layout(binding = 3, std430) readonly buffer R { float res[]; };
#endif
#ifdef SWIGLU
layout(binding = 3, std430) writeonly buffer YH { uint yh[]; };
#endif
// Halves k .. k+7 (k a multiple of 8) of token row `row`, clamped to the step's rows (rows past
// it are multiplied but never stored).
layout(binding = 1, std430) readonly buffer XH { uvec4 xh[]; };  // f16 activations, 8 per uvec4
uvec4 x_chunk(uint row, uint k) { return xh[(p.x_off + min(row, p.n_tok - 1) * p.x_stride + k) / 8]; }

#define FRAG_A fcoopmatNV<16, gl_ScopeSubgroup, 16, 16>
#define FRAG_B fcoopmatNV<16, gl_ScopeSubgroup, 16, 8>
#define FRAG_C fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>
const uint RW = 32, KS = 64, TOK = 8 * NT8;
const uint PART = RW * TOK;  // one warp's partial sums, floats
// The warps whose partial sums (32 rows x TOK tokens, f32) 48 KiB holds at once; where all do
// not, the upper half folds theirs into the lower half's first.
#if WARPS * 32 * 8 * NT8 * 4 <= 49152
#define LIVE WARPS
#elif WARPS % 2 == 0 && WARPS / 2 * 32 * 8 * NT8 * 4 <= 49152
#define LIVE (WARPS / 2)
#else
#error "mul_mm_reg: the warps' partial sums need more than 48 KiB of shared memory"
#endif
const int AR[8] = int[8](MMA_AR), AC[8] = int[8](MMA_AC);
#ifdef MMA_BK
const int BK[4] = int[4](MMA_BK);
const uint BT = 0;
#else
// A warp's B tile: TOK token rows of the step's 64 halves in the permuted order (16 a chunk),
// padded to 9 uvec4 a row (other banks).
const uint SR = 9, BT = TOK * SR;
#if WARPS * 8 * NT8 * 9 * 16 > 49152
#error "mul_mm_reg: the warps' B tiles need more than 48 KiB of shared memory"
#endif
#endif
const uint SM = LIVE * PART / 4 > WARPS * BT ? LIVE * PART / 4 : WARPS * BT;
shared uvec4 sm[SM];  // the B tiles while K runs, then the partial sums (f32, 4 per uvec4)

// Activations of B elements 2t + 8 pp + {0, 1} of chunk s from the lane's 8 halves u (the halves
// at 32 (s/2) + 8t): halves 4 (s%2) + pp and 4 (s%2) + pp + 2 as one f16 pair.
uint b_pair(uvec4 u, uint s, uint pp) {
  const uint a = (s & 1u) != 0 ? u.z : u.x, b = (s & 1u) != 0 ? u.w : u.y;
  return pp == 0 ? (a & 0xFFFFu) | (b << 16) : (a >> 16) | (b & 0xFFFF0000u);
}

void main() {
  w_set_rows(p.row_bytes);
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID, tid = gl_LocalInvocationID.x;
  const uint g = lane / 4, t = lane % 4, quad = lane & ~3u;
  const uint x0 = gl_WorkGroupID.y * TOK;
  const uint count = min(TOK, p.n_tok - x0);
  FRAG_C acc[2][NT8];
  [[unroll]] for (uint f = 0; f < 2; ++f)
    [[unroll]] for (uint b = 0; b < NT8; ++b) acc[f][b] = FRAG_C(0.0);
  // The lane's rows n0 + g + 8i (rows past N read the last row; their sums are never stored) and
  // the row n0 + g + 8t whose scales it decodes for its quad (SWIGLU: gate rows n0 + g, n0 + g + 8,
  // then up's).
  uint rb[4];
#ifdef SWIGLU
  const uint n0 = gl_WorkGroupID.x * (RW / 2);
  [[unroll]] for (uint i = 0; i < 4; ++i) rb[i] = min(n0 + g + 8 * (i % 2), p.N - 1) * p.row_bytes + (i >= 2 ? p.up_off : 0);
  const uint own = min(n0 + g + 8 * (t % 2), p.N - 1) * p.row_bytes + (t >= 2 ? p.up_off : 0);
#else
  const uint n0 = gl_WorkGroupID.x * RW;
  [[unroll]] for (uint i = 0; i < 4; ++i) rb[i] = min(n0 + g + 8 * i, p.N - 1) * p.row_bytes;
  const uint own = min(n0 + g + 8 * t, p.N - 1) * p.row_bytes;
#endif
#ifndef MMA_BK
  // Lane l stages natural 8-half chunk m = l % 8 of token rows l / 8 + 4 i (loaded a step ahead
  // with XA).
  const uint m = lane % 8, bt = warp * BT;
#if XA
  uvec4 xr[2 * NT8];
  if (KS * warp < p.K)
    [[unroll]] for (uint i = 0; i < 2 * NT8; ++i) xr[i] = x_chunk(x0 + lane / 8 + 4 * i, KS * warp + 8 * m);
#endif
#endif
  // A step's weight loads are issued one step ahead of their expansion.
  mmr_raw next[4];
  uvec3 next_k = uvec3(0);
  if (KS * warp < p.K) {
    [[unroll]] for (uint i = 0; i < 4; ++i) next[i] = mmr_load(rb[i], warp, t);
    next_k = mmr_scales(own, warp);
  }
  for (uint k0 = KS * warp; k0 < p.K; k0 += KS * WARPS) {
    const mmr_raw cur[4] = next;
    const uvec3 cur_k = next_k;
    if (k0 + KS * WARPS < p.K) {
      const uint u = (k0 + KS * WARPS) / KS;
      [[unroll]] for (uint i = 0; i < 4; ++i) next[i] = mmr_load(rb[i], u, t);
      next_k = mmr_scales(own, u);
    }
#ifndef MMA_BK
    // Natural halves 8m + h go to chunk 2 (m/4) + h/4, column 2 (m%4) + 8 (h%2) + (h%4)/2: the
    // pairs (h0, h2), (h1, h3), (h4, h6), (h5, h7) to words t, t + 4 of the chunk's 8.
    [[unroll]] for (uint i = 0; i < 2 * NT8; ++i) {
#if XA
      const uvec4 u = xr[i];
#else
      const uvec4 u = x_chunk(x0 + lane / 8 + 4 * i, k0 + 8 * m);
#endif
      const uint w0 = (bt + (lane / 8 + 4 * i) * SR) * 4 + 16 * (m / 4) + m % 4;
      sm[w0 >> 2][w0 & 3u] = (u.x & 0xFFFFu) | (u.y << 16);
      sm[(w0 + 4) >> 2][(w0 + 4) & 3u] = (u.x >> 16) | (u.y & 0xFFFF0000u);
      sm[(w0 + 8) >> 2][(w0 + 8) & 3u] = (u.z & 0xFFFFu) | (u.w << 16);
      sm[(w0 + 12) >> 2][(w0 + 12) & 3u] = (u.z >> 16) | (u.w & 0xFFFF0000u);
    }
#if XA
    if (k0 + KS * WARPS < p.K)
      [[unroll]] for (uint i = 0; i < 2 * NT8; ++i)
        xr[i] = x_chunk(x0 + lane / 8 + 4 * i, k0 + KS * WARPS + 8 * m);
#endif
    warp_sync_shared();
#endif
    // Row i's 16 elements as f16 pairs e[i][2s + pp]; its scales from lane 4g + i of the quad.
    uint e[4][8];
    [[unroll]] for (uint i = 0; i < 4; ++i) mmr_unit(cur[i], subgroupShuffle(cur_k, quad + i), k0 / KS, t, e[i]);
    FRAG_A a[4][2];
    [[unroll]] for (uint s = 0; s < 4; ++s)
      [[unroll]] for (uint f = 0; f < 2; ++f) {
        a[s][f] = FRAG_A(0.0);
        [[unroll]] for (uint q = 0; q < 8; q += 2) {
          const f16vec2 v = unpackFloat2x16(e[2 * f + AR[q] / 8][2 * s + AC[q] / 8]);
          a[s][f][q] = v.x;
          a[s][f][q + 1] = v.y;
        }
      }
    [[unroll]] for (uint b = 0; b < NT8; ++b) {
#ifdef MMA_BK
      const uvec4 x_lo = x_chunk(x0 + 8 * b + g, k0 + 8 * t), x_hi = x_chunk(x0 + 8 * b + g, k0 + 32 + 8 * t);
#endif
      [[unroll]] for (uint s = 0; s < 4; ++s) {
#ifdef MMA_BK
        FRAG_B bf = FRAG_B(0.0);
        [[unroll]] for (uint q = 0; q < 4; q += 2) {
          const f16vec2 v = unpackFloat2x16(b_pair(s < 2 ? x_lo : x_hi, s, BK[q] / 8));
          bf[q] = v.x;
          bf[q + 1] = v.y;
        }
#else
        FRAG_B bf;  // k x tokens: the tile's [token][k] as column-major
        coopMatLoadNV(bf, sm, bt + 8 * b * SR + 2 * s, SR, true);
#endif
        acc[0][b] = coopMatMulAddNV(a[s][0], bf, acc[0][b]);
        acc[1][b] = coopMatMulAddNV(a[s][1], bf, acc[1][b]);
      }
    }
#ifndef MMA_BK
    warp_sync_shared();  // the tile is read before the next step writes it
#endif
  }
#ifndef MMA_BK
  barrier();  // every warp is done with its tile: the space holds the partial sums now
#endif
  // Partial sum (token tk, row r) of slot w at w * PART + tk * RW + r: the rows x tokens tiles
  // column-major.
#if LIVE < WARPS
  if (warp >= LIVE)
    [[unroll]] for (uint f = 0; f < 2; ++f)
      [[unroll]] for (uint b = 0; b < NT8; ++b)
        coopMatStoreNV(acc[f][b], sm, ((warp - LIVE) * PART + 8 * b * RW + 16 * f) / 4, RW / 4, true);
  barrier();
  if (warp < LIVE)
    [[unroll]] for (uint f = 0; f < 2; ++f)
      [[unroll]] for (uint b = 0; b < NT8; ++b) {
        FRAG_C o;
        coopMatLoadNV(o, sm, (warp * PART + 8 * b * RW + 16 * f) / 4, RW / 4, true);
        acc[f][b] += o;
      }
  barrier();
#endif
  if (warp < LIVE)
    [[unroll]] for (uint f = 0; f < 2; ++f)
      [[unroll]] for (uint b = 0; b < NT8; ++b)
        coopMatStoreNV(acc[f][b], sm, (warp * PART + 8 * b * RW + 16 * f) / 4, RW / 4, true);
  barrier();
#ifdef SWIGLU
  // Two output rows a thread (an f16 pair): sums r, r + 1 (gate) and r + 16, r + 17 (up).
  for (uint q = tid; q < count * (RW / 4); q += 32 * WARPS) {
    const uint tk = q / (RW / 4), r = 2 * (q % (RW / 4)), n = n0 + r;
    if (n >= p.N) continue;  // N is even (the host's condition)
    vec2 gs = vec2(0.0), us = vec2(0.0);
    [[unroll]] for (uint w = 0; w < LIVE; ++w) {
      const uint i = w * PART + tk * RW + r;
      gs += vec2(uintBitsToFloat(sm[i >> 2][i & 3u]), uintBitsToFloat(sm[(i + 1) >> 2][(i + 1) & 3u]));
      us += vec2(uintBitsToFloat(sm[(i + 16) >> 2][(i + 16) & 3u]), uintBitsToFloat(sm[(i + 17) >> 2][(i + 17) & 3u]));
    }
    // As elementwise.glsl OP_SWIGLU computes it, then rounded as copy_rows TO_F16 rounds.
    const vec2 o = vec2(gs.x / (1.0 + exp(-gs.x)) * us.x, gs.y / (1.0 + exp(-gs.y)) * us.y);
    y[p.y_off + (x0 + tk) * p.y_stride + n] = o.x;
    y[p.y_off + (x0 + tk) * p.y_stride + n + 1] = o.y;
    yh[(p.h_off + (x0 + tk) * p.h_stride + n) / 2] = packHalf2x16(o);
  }
#else
  for (uint q = tid; q < count * RW; q += 32 * WARPS) {
    const uint tk = q / RW, r = q % RW;
    if (n0 + r >= p.N) continue;
    float s = 0.0;
    [[unroll]] for (uint w = 0; w < LIVE; ++w) {
      const uint i = w * PART + q;
      s += uintBitsToFloat(sm[i >> 2][i & 3u]);
    }
#ifdef RESIDUAL
    s = res[p.r_off + (x0 + tk) * p.r_stride + n0 + r] + s;  // as the add dispatch sums (residual first)
#endif
    y[p.y_off + (x0 + tk) * p.y_stride + n0 + r] = s;
  }
#endif
}
