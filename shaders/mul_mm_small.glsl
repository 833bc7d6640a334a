// Small-batch matmul on tensor cores (batched decode, short prompts, MoE expert groups):
// Y[t][n] = sum_k X[t][k] W[n][k] for up to 16*TT tokens per workgroup row, W in any weight
// format, expanded to f16 inside the kernel (no f16 copy of the weights is written).
// Why not the prefill GEMM: at 16-64 tokens a 128 x 128 tile leaves most SMs idle and its
// K loop waits on a workgroup barrier per step; the f16 expansion pass writes 4x the bytes it
// reads. Here a workgroup owns RW = 32 weight rows and its WARPS warps split K (warp w takes the
// 64-wide steps w, w+WARPS, ...; as many warps as shared memory holds, the backend's choice), so
// each weight byte is read once, several warps' loads are in flight per row group, and the K loop
// has no workgroup barrier: each lane expands its own row's 64 elements into the warp's f16 tile,
// the warp multiplies that tile with the step's f16 activations (staged beside it under XS, else
// loaded as fragments straight from memory) into TT x 2 accumulators of 16 tokens x 16 rows, and
// the warps' partial sums meet in shared memory at the end.
// N8 (steps of at most 8 tokens, TT 1, XS): the products are weights x tokens as 16x8x16 tiles
// (16 weight rows, 8 tokens) instead of 16 tokens x 16 rows, so a step stages, loads and
// multiplies 8 token rows, not 16 of which half are padding.
// Formats with an MM_SMALL unit (quant/*.glsl HAS_MMS_UNIT) load a row's 64 elements as a few
// aligned words one step ahead and expand them in registers; the others go through dequant_row16.
// MOE_GROUPED: workgroup y is a chunk of up to 16*TT pairs routed to one expert (moe.glsl
// MOE_GROUP's table): X rows are the chunk's sorted rows (first .. first+count), the weights
// that expert's slab; SCATTER writes output row t of the chunk to the pair's own row instead.
#ifndef WARPS
#define WARPS 4
#endif
#if defined(N8) && (TT != 1 || !defined(XS) || defined(PRE_A))
#error "mul_mm_small N8: one 8-token tile (TT 1), activations staged (XS)"
#endif
#if WARPS * TT > 16
#error "mul_mm_small: WARPS x TT above 16 needs more than 48 KiB of shared memory"
#endif
layout(local_size_x = 32 * WARPS) in;
layout(binding = 1, std430) readonly buffer XH { uvec4 xh[]; };  // f16 activations, 8 per uvec4
layout(binding = 2, std430) writeonly buffer Y { float y[]; };
#ifdef MOE_GROUPED
layout(binding = 3, std430) readonly buffer G { uint grp[]; };
#endif
layout(push_constant) uniform Params {
  uint K, N, n_tok, row_bytes;
  uint x_off, x_stride;  // in halves, multiples of 8
  uint y_off, y_stride;  // in floats
  uint expert_bytes, sorted_off;
} p;

const uint RW = 32, KS = 64;
const uint SR = KS / 8 + 1;                 // shared row stride in uvec4 (padded: other banks)
const uint WT = RW * SR;                    // one warp's weight tile, uvec4
#ifdef N8
#define MMS_TOK 8
#else
#define MMS_TOK (16 * TT)
#endif
const uint TOK = MMS_TOK;                   // tokens per workgroup row
const uint PART = TOK * RW;                 // one warp's partial sums, floats
#ifdef XS
// XS: the step's activations reach the warp as plain 16-byte loads (8 lanes per token row) a
// step ahead, staged in the warp's own tile beside its weights, and the fragments are read from
// there. A fragment loaded straight from memory reads 16 rows 2 x K bytes apart: H200 lab, 4096 x
// 4096 at 16 tokens, those loads and their products took 12 of the call's 21 us.
const uint XT = TOK * SR;                   // one warp's activation tile, uvec4
#if WARPS * (32 + MMS_TOK) * 9 * 16 > 49152  // (RW + TOK) rows of SR uvec4 per warp
#error "mul_mm_small XS: WARPS weight and activation tiles need more than 48 KiB of shared memory"
#endif
#else
const uint XT = 0;
#endif
const uint WR = WT + XT;                    // one warp's region while K runs
const uint SM = WARPS * PART / 4 > WARPS * WR ? WARPS * PART / 4 : WARPS * WR;
shared uvec4 sm[SM];  // the weight tiles while K runs, then the partial sums (f32, 4 per uvec4)

uvec4 pack8(float v[16], uint o) {
  return uvec4(packHalf2x16(vec2(v[o], v[o + 1])), packHalf2x16(vec2(v[o + 2], v[o + 3])),
               packHalf2x16(vec2(v[o + 4], v[o + 5])), packHalf2x16(vec2(v[o + 6], v[o + 7])));
}

void main() {
  w_set_rows(p.row_bytes);
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID, tid = gl_LocalInvocationID.x;
  const uint n0 = gl_WorkGroupID.x * RW;
#ifdef MOE_GROUPED
  const uint chunk = gl_WorkGroupID.y;
  if (chunk >= grp[0]) return;  // the whole workgroup: no barrier has been reached
  const uint wbase = grp[4 + 3 * chunk] * p.expert_bytes, x0 = grp[5 + 3 * chunk];
  const uint count = grp[6 + 3 * chunk];
#else
  const uint wbase = 0, x0 = gl_WorkGroupID.y * TOK;
  const uint count = min(TOK, p.n_tok - x0);
#endif
#ifdef N8
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 8> acc[2];  // weight rows 0-15, 16-31 x the 8 tokens
  acc[0] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0);
  acc[1] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 8>(0.0);
#else
  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[TT][2];
  [[unroll]] for (uint t = 0; t < TT; ++t) {
    acc[t][0] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
    acc[t][1] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  }
#endif
  const bool live = n0 + lane < p.N;
  const uint row = wbase + (n0 + lane) * p.row_bytes, wt = warp * WR;
#ifdef XS
  // Lane l carries row l / 8 + 4 i of the step's token rows, 16-byte chunk l % 8.
  const uint xt = wt + WT, xrow = lane / 8, xc = lane % 8;
  const uint XR = TOK / 4;  // token rows a lane carries
  uvec4 xr[XR];
#if !defined(LAB) || (LAB & 1) == 0
  if (KS * warp < p.K)
    [[unroll]] for (uint i = 0; i < XR; ++i)
      xr[i] = xh[(p.x_off + (x0 + xrow + 4 * i) * p.x_stride + KS * warp) / 8 + xc];
#endif
#endif
#ifdef HAS_MMS_UNIT
  // The format's raw unit loads, issued one step ahead of their expansion (more steps ahead
  // measured no faster: the loads are not what the warp waits on).
  mms_raw next;
  if (live) next = mms_load(row, warp);
#endif
  for (uint k0 = KS * warp; k0 < p.K; k0 += KS * WARPS) {
#if defined(XS) && (!defined(LAB) || (LAB & 1) == 0)
    [[unroll]] for (uint i = 0; i < XR; ++i) sm[xt + (xrow + 4 * i) * SR + xc] = xr[i];
    if (k0 + KS * WARPS < p.K)
      [[unroll]] for (uint i = 0; i < XR; ++i)
        xr[i] = xh[(p.x_off + (x0 + xrow + 4 * i) * p.x_stride + k0 + KS * WARPS) / 8 + xc];
#endif
#ifdef PRE_A
    // The step's activation fragments first: their loads (L2) overlap the weight expansion.
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a[TT][KS / 16];
    [[unroll]] for (uint t = 0; t < TT; ++t)
      [[unroll]] for (uint s = 0; s < KS / 16; ++s)
        coopMatLoadNV(a[t][s], xh, (p.x_off + (x0 + 16 * t) * p.x_stride + k0 + 16 * s) / 8, p.x_stride / 8, false);
#endif
#ifdef HAS_MMS_UNIT
    // Kernel-lab knobs (results are then wrong): LAB bit 0 skips the activation loads and the
    // products, bit 1 the expansion (raw words stored), bit 2 the weight loads after the first
    // (bits 1 and 2 act on formats with an MM_SMALL unit only).
    const mms_raw cur = next;
#if !defined(LAB) || (LAB & 4) == 0
    if (live && k0 + KS * WARPS < p.K) next = mms_load(row, (k0 + KS * WARPS) / KS);
#endif
    uvec4 h0[4], h1[4];
#if defined(LAB) && (LAB & 2) != 0
    if (live) {
      h0[0] = cur.q0; h0[1] = cur.q1; h0[2] = cur.hdr; h0[3] = cur.q0 ^ cur.q1;
      h1[0] = cur.q1; h1[1] = cur.q0; h1[2] = cur.hdr ^ cur.q0; h1[3] = cur.hdr;
    } else
#else
    if (live) {
      mms_expand_half(cur, k0 / KS, 0, h0);
      mms_expand_half(cur, k0 / KS, 1, h1);
    } else
#endif
    {
      [[unroll]] for (uint c = 0; c < 4; ++c) h0[c] = h1[c] = uvec4(0);
    }
    [[unroll]] for (uint c = 0; c < 4; ++c) {
      sm[wt + lane * SR + c] = h0[c];
      sm[wt + lane * SR + 4 + c] = h1[c];
    }
#else
    [[unroll]] for (uint c = 0; c < KS / 16; ++c) {
      const uint part = k0 / 16 + c;
      float v[16];
      if (live) dequant_row16(row, part, v);
      else [[unroll]] for (uint i = 0; i < 16; ++i) v[i] = 0.0;
      sm[wt + lane * SR + 2 * c] = pack8(v, 0);
      sm[wt + lane * SR + 2 * c + 1] = pack8(v, 8);
    }
#endif
    warp_sync_shared();
#if !defined(LAB) || (LAB & 1) == 0
#ifdef N8
    [[unroll]] for (uint s = 0; s < KS / 16; ++s) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a0, a1;  // rows x k: the tile's [row][k] as row-major
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 8> b;        // k x tokens: the staged [token][k] as column-major
      coopMatLoadNV(a0, sm, wt + 2 * s, SR, false);
      coopMatLoadNV(a1, sm, wt + 16 * SR + 2 * s, SR, false);
      coopMatLoadNV(b, sm, xt + 2 * s, SR, true);
      acc[0] = coopMatMulAddNV(a0, b, acc[0]);
      acc[1] = coopMatMulAddNV(a1, b, acc[1]);
    }
#else
    [[unroll]] for (uint s = 0; s < KS / 16; ++s) {
      fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> b0, b1;
      coopMatLoadNV(b0, sm, wt + 2 * s, SR, true);  // k x rows 0-15: column-major view of [row][k]
      coopMatLoadNV(b1, sm, wt + 16 * SR + 2 * s, SR, true);
      [[unroll]] for (uint t = 0; t < TT; ++t) {
        // Rows past the chunk or the batch are read (the buffer has TOK rows of slack) and
        // multiplied, but never stored.
#if defined(XS)
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
        coopMatLoadNV(a, sm, xt + 16 * t * SR + 2 * s, SR, false);
        acc[t][0] = coopMatMulAddNV(a, b0, acc[t][0]);
        acc[t][1] = coopMatMulAddNV(a, b1, acc[t][1]);
#elif defined(PRE_A)
        acc[t][0] = coopMatMulAddNV(a[t][s], b0, acc[t][0]);
        acc[t][1] = coopMatMulAddNV(a[t][s], b1, acc[t][1]);
#else
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> a;
        coopMatLoadNV(a, xh, (p.x_off + (x0 + 16 * t) * p.x_stride + k0 + 16 * s) / 8, p.x_stride / 8, false);
        acc[t][0] = coopMatMulAddNV(a, b0, acc[t][0]);
        acc[t][1] = coopMatMulAddNV(a, b1, acc[t][1]);
#endif
      }
    }
#endif
#endif
    warp_sync_shared();  // the tile is read before the next step writes it
  }
  barrier();  // every warp is done with its tile: the space holds the partial sums now
#ifdef N8
  // Partial sum (token t, row r) at warp * PART + t * RW + r: the rows x tokens tiles column-major.
  coopMatStoreNV(acc[0], sm, warp * PART / 4, RW / 4, true);
  coopMatStoreNV(acc[1], sm, (warp * PART + 16) / 4, RW / 4, true);
#else
  [[unroll]] for (uint t = 0; t < TT; ++t) {
    coopMatStoreNV(acc[t][0], sm, (warp * PART + 16 * t * RW) / 4, RW / 4, false);
    coopMatStoreNV(acc[t][1], sm, (warp * PART + 16 * t * RW + 16) / 4, RW / 4, false);
  }
#endif
  barrier();
  for (uint q = tid; q < count * RW; q += 32 * WARPS) {
    const uint t = q / RW, r = q % RW;
    if (n0 + r >= p.N) continue;
    float s = 0.0;
    [[unroll]] for (uint w = 0; w < WARPS; ++w) {
      const uint i = w * PART + q;
      s += uintBitsToFloat(sm[i >> 2][i & 3u]);
    }
#if defined(MOE_GROUPED) && defined(SCATTER)
    const uint yrow = grp[p.sorted_off + x0 + t];
#else
    const uint yrow = x0 + t;
#endif
    y[p.y_off + yrow * p.y_stride + n0 + r] = s;
  }
}
