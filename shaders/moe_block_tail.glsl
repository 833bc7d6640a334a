// The MoE combine and the next RMS norm's first half as tails of the experts' down matvec
// (mmvq.glsl MOE_IDS, one token's pair a workgroup row y), one tail per 32-row block and token:
// each workgroup counts itself in on the counter of every block its rows touch, and the one that
// completes a block (all k experts' rows of it written) sums them weighted by the router, adds
// the residual and writes what moe.glsl MOE_COMBINE RESIDUAL NORM_OUT writes for that block (the
// same operations in the same order): the rows, their int8 codes times the norm's weight and the
// block's sum of squares. The combine's dispatch and its level leave the layer, and unlike one
// last workgroup for the whole combine (moe_combine_tail.glsl) the tails run spread over the grid.
// With k = 1 and no weights (mmvq.glsl's one-token projection, no MOE_IDS) the same tails add the
// projection's rows to the residual: the rows res + 1.0 x y, as ADD_RESIDUAL writes them.
// Bindings from MOE_BLOCK_TAIL: +0 counters [token][block], +1 router weights, +2 output rows,
// +3 residual rows, +4 the expert rows (the matvec's output again), +5 the norm's weight,
// +6 / +7 int8 codes and block scales, +8 the blocks' sums of squares.
#define TAIL_COHERENT coherent
#define MOE_BLOCK_TAIL_PC uint bt_k, bt_out_off, bt_out_stride, bt_r_off, bt_r_stride, bt_weighted, bt_q_stride, bt_s_stride;

layout(binding = MOE_BLOCK_TAIL + 0, std430) coherent buffer BtCounter { uint bt_counter[]; };
layout(binding = MOE_BLOCK_TAIL + 1, std430) readonly buffer BtWts { float bt_wts[]; };
layout(binding = MOE_BLOCK_TAIL + 2, std430) writeonly buffer BtOut { float bt_out[]; };
layout(binding = MOE_BLOCK_TAIL + 3, std430) readonly buffer BtRes { float bt_res[]; };
#if BT_LAB == 3  // lab: the other experts' rows read without coherent (racy: timing only)
layout(binding = MOE_BLOCK_TAIL + 4, std430) readonly buffer BtRows { float bt_rows[]; };
#else
layout(binding = MOE_BLOCK_TAIL + 4, std430) coherent readonly buffer BtRows { float bt_rows[]; };
#endif
layout(binding = MOE_BLOCK_TAIL + 5, std430) readonly buffer BtNormW { float bt_norm_w[]; };
layout(binding = MOE_BLOCK_TAIL + 7, std430) writeonly buffer BtXs { vec4 bt_xs[]; };
layout(binding = MOE_BLOCK_TAIL + 8, std430) writeonly buffer BtSq { float bt_sq[]; };

// BT_LAB (lab only, STRATA_VK_BT_LAB; wrong results): 1 the workgroups count in but no tail
// runs, 2 nothing counts in either (no barrier, no atomic), 3 the rows read without coherent.
#ifndef BT_LAB
#define BT_LAB 0
#endif
const uint BT_MAX_BLOCKS = 8u;  // blocks a workgroup's rows may touch (256 rows); the host checks
#if WG < 32
#error "moe_block_tail: a workgroup of at least 32 invocations (a thread a row of a block)"
#endif
layout(binding = MOE_BLOCK_TAIL + 6, std430) writeonly buffer BtXqWords { uint bt_xq_words[]; };  // +6 as words
shared bool bt_completes[BT_MAX_BLOCKS];
shared vec4 bt_v[8], bt_sq2[8];  // the block's 32 rows times the norm's weight, and their squares
shared int bt_q[32];

// Called by every invocation once the workgroup's expert rows are written: `pair` = t * k + j is
// the workgroup's (token, expert) pair, rows [row_base, row_base + wg_rows) its rows of N (N and
// the blocks' arrivals: a multiple of 32, and wg_rows divides 32 or is a multiple of it).
void moe_block_tail(uint pair, uint row_base, uint wg_rows, uint N, uint y_off, uint y_stride, uint k, uint out_off,
                    uint out_stride, uint r_off, uint r_stride, bool weighted, uint q_stride, uint s_stride) {
  const uint tid = gl_LocalInvocationIndex, t = pair / k, nb = N / 32u;
  const uint blocks = max(1u, wg_rows / 32u), arrivals = k * max(1u, 32u / wg_rows), b0 = row_base / 32u;
  if (BT_LAB == 2) return;
  // The residual and the norm's weight of the first block come from earlier dispatches: loaded
  // before counting in, so a completing workgroup waits only for the other experts' rows.
  const uint i0 = min(32u * b0 + tid % 32u, N - 1u);
  float res = bt_res[r_off + t * r_stride + i0], nw = bt_norm_w[i0];
  memoryBarrierBuffer();  // this workgroup's rows are visible device-wide before it counts in
  barrier();
  if (tid < blocks) {
    bool done = false;
    if (b0 + tid < nb) {
      const uint c = t * nb + b0 + tid;
      done = atomicAdd(bt_counter[c], 1u) == arrivals - 1u;
      if (done) bt_counter[c] = 0u;  // every contribution has counted in: ready for the next dispatch
    }
    bt_completes[tid] = done && (BT_LAB == 0 || BT_LAB == 3);
  }
  barrier();
  for (uint bi = 0u; bi < blocks; ++bi) {
    if (!bt_completes[bi]) continue;  // uniform: shared, read after the barrier
    memoryBarrierBuffer();  // the other contributions counted in after their rows: read them now
    const uint blk = b0 + bi, i = 32u * blk + tid;
    float v = 0.0;
    if (tid < 32u) {
      if (bi > 0u) {
        res = bt_res[r_off + t * r_stride + i];
        nw = bt_norm_w[i];
      }
      // As moe.glsl MOE_COMBINE: eight rows loaded before their sum, added in expert order.
      float acc = 0.0;
      for (uint j0 = 0u; j0 < k; j0 += 8u) {
        float x[8], f[8];
        [[unroll]] for (uint jj = 0u; jj < 8u; ++jj) {
          const uint j = min(j0 + jj, k - 1u);  // past k: loaded, not added
          f[jj] = weighted ? bt_wts[t * k + j] : 1.0;
          x[jj] = bt_rows[y_off + (t * k + j) * y_stride + i];
        }
        [[unroll]] for (uint jj = 0u; jj < 8u; ++jj)
          if (j0 + jj < k) acc += f[jj] * x[jj];
      }
      acc = res + acc;
      bt_out[out_off + t * out_stride + i] = acc;
      v = acc * nw;
      bt_v[tid / 4u][tid % 4u] = v;
      bt_sq2[tid / 4u][tid % 4u] = acc * acc;
    }
    barrier();
#ifdef ROUTER_PARTS  // the router's share of this block (a one-token projection's tails: t is the token)
    router_part_block(t, blk, N, bt_v);
#endif
    // common.glsl q8_quantize's operations spread over the block's 32 threads: the same maximum
    // (in any order), codes and integer sums; the squares summed in row order by one thread.
    float amax = 0.0;
    [[unroll]] for (uint j = 0u; j < 8u; ++j) {
      const vec4 a = abs(bt_v[j]);
      amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
    }
    const float d = amax / 127.0, id = d > 0.0 ? 1.0 / d : 0.0;
    if (tid < 32u) bt_q[tid] = int(round(v * id));
    barrier();
    if (tid < 8u) {  // word tid of the block's codes: rows 4 tid .. 4 tid + 3
      const ivec4 q = ivec4(bt_q[4u * tid], bt_q[4u * tid + 1u], bt_q[4u * tid + 2u], bt_q[4u * tid + 3u]);
      bt_xq_words[(t * q_stride + blk * 2u) * 4u + tid] =
          (uint(q.x) & 0xFFu) | ((uint(q.y) & 0xFFu) << 8) | ((uint(q.z) & 0xFFu) << 16) | (uint(q.w) << 24);
    } else if (tid == 8u) {
      int sum_lo = 0, sum_hi = 0;
      for (uint j = 0u; j < 16u; ++j) {
        sum_lo += bt_q[j];
        sum_hi += bt_q[16u + j];
      }
      bt_xs[t * s_stride + blk] = vec4(d, d * float(sum_lo), d * float(sum_hi), d * float(sum_lo + sum_hi));
    } else if (tid == 9u) {
      float sq = 0.0;
      [[unroll]] for (uint j = 0u; j < 8u; ++j) sq = ((sq + bt_sq2[j].x) + bt_sq2[j].y + bt_sq2[j].z) + bt_sq2[j].w;
      bt_sq[t * nb + blk] = sq;
    }
    barrier();  // bt_v, bt_sq2 and bt_q are written again by the next block
  }
}
