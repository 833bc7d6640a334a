// Prefill attention on tensor cores (flash attention) over an f16 KV cache: a workgroup takes
// BQ = 64 consecutive query tokens of one sequence for one query head, 16 rows per warp. Key
// tiles of BK = 32 keys (K and V rows gathered through the block table into shared memory; the
// next tile is read into registers while this one is used) give S = Q K^T on the tensor cores
// (VK_NV_cooperative_matrix, f16 x f16 -> f32), then each warp runs the online softmax of its
// rows on S in shared memory (causal and chunk masks, running max m and sum l; two lanes per
// row), and O += P V on the tensor cores. O is rescaled (through shared memory: accumulators
// are opaque) only when a row's max moved. Q is scaled and held in registers as fragments.
// Push constants as attention.glsl; n_splits carries the batch's token count.
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
#extension GL_KHR_shader_subgroup_vote : require
layout(local_size_x = 128) in;
layout(binding = 1, std430) readonly buffer Q { float q[]; };
layout(binding = 2, std430) readonly buffer Kc { uvec4 kc[]; };  // f16 rows, 8 halves per uvec4
layout(binding = 3, std430) readonly buffer Vc { uvec4 vc[]; };
layout(binding = 4, std430) readonly buffer Pos { int pos[]; };
layout(binding = 5, std430) readonly buffer SeqRow { uint seq_row[]; };
layout(binding = 6, std430) readonly buffer Blocks { uint blocks[]; };
layout(binding = 7, std430) writeonly buffer O { float o[]; };
layout(push_constant) uniform Params {
  uint n_head, n_head_kv, D, chunk;
  uint q_off, q_stride, o_off, o_stride;
  uint block_size, max_blocks;
  float scale;
  uint split_len, n_splits;
} p;

const uint D = HEAD_D, BQ = 64, BK = 32, WARPS = 4;
const uint DV = D / 8;      // uvec4 per K/V row
const uint DS = DV + 1;     // shared row stride in uvec4 (padded)
const uint PS = BK / 8 + 1; // P row stride in uvec4
const uint LOADS = BK * DV / 128;  // uvec4 per thread per K (and V) tile
// K tile then V tile; at the start the same space holds the scaled Q tile (BQ rows).
shared uvec4 kv[2 * BK * DS > BQ * DS ? 2 * BK * DS : BQ * DS];
shared float ss[WARPS * 16 * BK];   // per warp: S (16 x BK), or a 16x16 O square being rescaled
shared uvec4 ps[WARPS * 16 * PS];   // per warp: P (16 x BK, f16)
shared float rowf[WARPS * 16];      // per warp and row: the rescale factor, then 1 / l
shared uint range_lo, range_hi;

uvec4 kr[LOADS], vr[LOADS];

void fetch(uint j0, uint hi, uint btab, uint row, uint hk) {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = tid + i * 128, k = e / DV, c = e % DV, j = j0 + k;
    kr[i] = uvec4(0);
    vr[i] = uvec4(0);
    if (j <= hi) {
      const uint slot = blocks[btab + j / p.block_size] * p.block_size + j % p.block_size;
      const uint at = (slot * row + hk * D) / 8 + c;
      kr[i] = kc[at];
      vr[i] = vc[at];
    }
  }
}
void stash() {
  const uint tid = gl_LocalInvocationID.x;
  [[unroll]] for (uint i = 0; i < LOADS; ++i) {
    const uint e = tid + i * 128, k = e / DV, c = e % DV;
    kv[k * DS + c] = kr[i];
    kv[BK * DS + k * DS + c] = vr[i];
  }
}

void main() {
  const uint h = gl_WorkGroupID.x, t0 = gl_WorkGroupID.y * BQ, tid = gl_LocalInvocationID.x;
  const uint warp = gl_SubgroupID, lane = gl_SubgroupInvocationID;
  const uint row = p.n_head_kv * D, hk = h / (p.n_head / p.n_head_kv);
  const uint n_tok = p.n_splits;
  const uint btab = seq_row[t0] * p.max_blocks;  // every token of the tile is in one sequence
  // This lane's softmax row (two lanes per row, 16 keys each) and its causal range.
  const uint r = lane / 2, half_ = lane % 2, t = t0 + warp * 16 + r;
  const bool live = t < n_tok;
  const uint P = live ? uint(pos[t]) : 0;
  const uint start = live ? (p.chunk != 0 ? P / p.chunk * p.chunk : 0) : 0;
  if (tid == 0) {
    range_lo = 0xFFFFFFFFu;
    range_hi = 0;
  }
  // Scaled Q tile, f16, into the K/V space.
  for (uint e = tid; e < BQ * DV; e += 128) {
    const uint qr = e / DV, c = e % DV, tq = t0 + qr;
    vec4 a = vec4(0.0), b = vec4(0.0);
    if (tq < n_tok) {
      const uint at = p.q_off + tq * p.q_stride + h * D + 8 * c;
      a = vec4(q[at], q[at + 1], q[at + 2], q[at + 3]) * p.scale;
      b = vec4(q[at + 4], q[at + 5], q[at + 6], q[at + 7]) * p.scale;
    }
    kv[qr * DS + c] = uvec4(packHalf2x16(a.xy), packHalf2x16(a.zw), packHalf2x16(b.xy), packHalf2x16(b.zw));
  }
  barrier();
  if (live && half_ == 0) {
    atomicMin(range_lo, start);
    atomicMax(range_hi, P);
  }
  fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> qa[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) coopMatLoadNV(qa[c], kv, (warp * 16) * DS + 2 * c, DS, false);
  barrier();
  const uint lo = range_lo, hi = range_hi;
  if (lo > hi) return;  // no live row in this tile (uniform: shared values)

  fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[D / 16];
  [[unroll]] for (uint c = 0; c < D / 16; ++c) acc[c] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
  float m = -1.0 / 0.0, l = 0.0;
  const uint sw = warp * 16 * BK, pw = warp * 16 * PS;

  fetch(lo, hi, btab, row, hk);
  stash();
  barrier();
  for (uint j0 = lo; j0 <= hi; j0 += BK) {
    const bool more = j0 + BK <= hi;
    if (more) fetch(j0 + BK, hi, btab, row, hk);
    // S = Q K^T for this warp's 16 rows: BK / 16 squares, D / 16 steps each.
    [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) {
      fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> s = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
      [[unroll]] for (uint c = 0; c < D / 16; ++c) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> kb;
        coopMatLoadNV(kb, kv, (kt * 16) * DS + 2 * c, DS, true);  // K^T: column-major view of [key][d]
        s = coopMatMulAddNV(qa[c], kb, s);
      }
      coopMatStoreNV(s, ss, sw + kt * 16, BK, false);
    }
    warp_sync_shared();
    // Online softmax: this lane's 16 keys of row r.
    float sv[16];
    float tmax = -1.0 / 0.0;
    [[unroll]] for (uint i = 0; i < 16; ++i) {
      const uint k = half_ * 16 + i, j = j0 + k;
      const bool ok = live && j >= start && j <= P;
      sv[i] = ok ? ss[sw + r * BK + k] : -1.0 / 0.0;
      tmax = max(tmax, sv[i]);
    }
    tmax = max(tmax, subgroupShuffleXor(tmax, 1));
    const float m_new = max(m, tmax);
    const float corr = m_new == -1.0 / 0.0 ? 1.0 : exp(m - m_new);
    float sum = 0.0;
    float e[16];
    [[unroll]] for (uint i = 0; i < 16; ++i) {
      e[i] = sv[i] == -1.0 / 0.0 ? 0.0 : exp(sv[i] - m_new);
      sum += e[i];
    }
    sum += subgroupShuffleXor(sum, 1);
    l = l * corr + sum;
    m = m_new;
    [[unroll]] for (uint i = 0; i < 2; ++i)
      ps[pw + r * PS + half_ * 2 + i] =
          uvec4(packHalf2x16(vec2(e[8 * i], e[8 * i + 1])), packHalf2x16(vec2(e[8 * i + 2], e[8 * i + 3])),
                packHalf2x16(vec2(e[8 * i + 4], e[8 * i + 5])), packHalf2x16(vec2(e[8 * i + 6], e[8 * i + 7])));
    if (half_ == 0) rowf[warp * 16 + r] = corr;
    const bool rescale = subgroupAny(corr != 1.0);
    warp_sync_shared();
    if (rescale) {
      [[unroll]] for (uint c = 0; c < D / 16; ++c) {
        coopMatStoreNV(acc[c], ss, sw, 16, false);
        warp_sync_shared();
        [[unroll]] for (uint i = 0; i < 8; ++i) {
          const uint el = lane * 8 + i;
          ss[sw + el] *= rowf[warp * 16 + el / 16];
        }
        warp_sync_shared();
        coopMatLoadNV(acc[c], ss, sw, 16, false);
        warp_sync_shared();
      }
    }
    // O += P V.
    fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> pa[BK / 16];
    [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) coopMatLoadNV(pa[kt], ps, pw + 2 * kt, PS, false);
    [[unroll]] for (uint c = 0; c < D / 16; ++c)
      [[unroll]] for (uint kt = 0; kt < BK / 16; ++kt) {
        fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> vb;
        coopMatLoadNV(vb, kv, BK * DS + (kt * 16) * DS + 2 * c, DS, false);  // V: [key][d]
        acc[c] = coopMatMulAddNV(pa[kt], vb, acc[c]);
      }
    barrier();  // every warp is done with this K/V tile
    if (more) {
      stash();
      barrier();
    }
  }
  // O / l, written through the warp's staging square.
  if (half_ == 0) rowf[warp * 16 + r] = l > 0.0 ? 1.0 / l : 0.0;
  warp_sync_shared();
  [[unroll]] for (uint c = 0; c < D / 16; ++c) {
    coopMatStoreNV(acc[c], ss, sw, 16, false);
    warp_sync_shared();
    [[unroll]] for (uint i = 0; i < 8; ++i) {
      const uint el = lane * 8 + i, rr = el / 16, tt = t0 + warp * 16 + rr;
      if (tt < n_tok) o[p.o_off + tt * p.o_stride + h * D + 16 * c + el % 16] = ss[sw + el] * rowf[warp * 16 + rr];
    }
    warp_sync_shared();
  }
}
