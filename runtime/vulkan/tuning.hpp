// The Vulkan backend's tuning switches (STRATA_VK_*, read by read_env in tuning.cpp) with the
// measurement behind each default, and the predicates that read nothing else. backend::impl
// derives from backend_tuning (through kernel_variants.hpp), so its files use them as its own members.
// Private to runtime/vulkan.
#pragma once
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "strata/gguf/type_id.hpp"

namespace strata::gpu {

namespace detail {
inline constexpr std::uint32_t wg = 128;         // workgroup size of the elementwise / row kernels
inline constexpr std::uint32_t mm_min_tokens = 16;  // from here on matmuls use the tiled kernel
inline constexpr std::uint32_t flash_min_tokens = 16;  // and attention the tensor cores (one sequence, f16 KV)

inline std::uint32_t div_up(std::uint64_t a, std::uint64_t b) { return std::uint32_t((a + b - 1) / b); }
// Milliseconds from t0 to now, for the start-up and recording times the stats report.
inline double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}

// Weight formats with an int8-activation unit in shaders/quant/<fmt>.glsl (MMVQ). Callers ask
// backend_tuning::int8_unit, which STRATA_VK_MMVQ_MORE applies.
inline bool has_mmvq(gguf::type_id t) {
  return t == gguf::type_id::q4_k || t == gguf::type_id::q6_k || t == gguf::type_id::q8_0 || t == gguf::type_id::q5_k ||
         t == gguf::type_id::q4_0 || t == gguf::type_id::iq4_xs;
}
// Of those, the units added after the first three (Q5_K, Q4_0, IQ4_XS), which
// STRATA_VK_MMVQ_MORE=0 returns to the f32 matvec.
inline bool mmvq_more_format(gguf::type_id t) {
  return t == gguf::type_id::q5_k || t == gguf::type_id::q4_0 || t == gguf::type_id::iq4_xs;
}
// Weight formats with a 64-element f16 expansion unit (quant/<fmt>.glsl HAS_MMS_UNIT): the GEMMs
// read them in place (mul_mm_small, mul_mm_f16 QW).
inline bool has_mms_unit(gguf::type_id t) { return t == gguf::type_id::q4_k || t == gguf::type_id::q6_k; }
// Formats with mul_mm_reg.glsl's unit (quant/*.glsl HAS_MMR_UNIT).
inline bool has_mmr_unit(gguf::type_id t) { return t == gguf::type_id::q4_k || t == gguf::type_id::q6_k; }
// Weight formats whose MMVQ unit also has the multi-token form (quant/<fmt>.glsl HAS_MMVQ_PREP):
// mmvq.glsl's MMVQ_MT, for steps of 2 .. mmvq_mt_max_tokens tokens.
inline bool has_mmvq_mt(gguf::type_id t) {
  return t == gguf::type_id::q4_k || t == gguf::type_id::q6_k || t == gguf::type_id::q5_k || t == gguf::type_id::q4_0 ||
         t == gguf::type_id::iq4_xs;
}
// Formats with mul_mmq.glsl's int8 unit (quant/*.glsl HAS_MMQ_UNIT).
inline bool has_mmq_unit(gguf::type_id t) { return t == gguf::type_id::q4_k || t == gguf::type_id::q6_k; }
inline constexpr std::uint32_t mmvq_mt_max_tokens = 8;
}  // namespace detail

// Workgroup tile of mul_mm.glsl's MMA2 path: BM weight rows x BN tokens, WM x WN per warp.
struct mma2_tile {
  std::uint32_t bm, bn, wm, wn;
};

struct backend_tuning {
  // --- Recording and lab switches.
  // Peephole fusion while recording (fusion_state.hpp pending_norm / pending_matmul); STRATA_VK_FUSE=0 off.
  bool fuse = true;
  // The fusions of steps past the decode fusions (5+ tokens on the f16 matmuls: backend_impl.hpp
  // f16_beside, the residual in mul_mm_reg's store); STRATA_VK_MM_FUSE=0 off (with fuse).
  bool mm_fuse = true;
  // Of those, the decode attention's f16 copy and gate/up/SwiGLU as one mul_mm_reg dispatch
  // (STRATA_VK_MM_FUSE=1: without them, to measure them).
  bool mm_fuse_more = true;
  // The token granule the scheduler fits steps that decode to (backend::step_granule); 0: the
  // prefill GEMM's tile width. STRATA_VK_STEP_GRANULE=1 leaves steps unfitted.
  std::uint32_t step_granule = 0;
  // Weight bytes per dispatch of the gate/up/SwiGLU GEMM (record_mm3_swiglu), so a weight tile
  // is still in L2 for its next token tile. STRATA_VK_SWIGLU_PART_KB=N (0: one dispatch).
  std::uint64_t swiglu_part_bytes = 16ull << 20;
  // Steps run as one of a few token counts (step_buckets.hpp), so changing batches replay
  // recorded steps; STRATA_VK_STEP_BUCKETS=0: every token count records its own step.
  bool step_buckets = true;
  // Lab only, wrong results (STRATA_VK_LAB_NO_BARRIER=1): the recorder puts no hazard barrier between
  // dispatches, so every kernel of a step may overlap every other: the bound of the dependency chain
  // (H200, qwen3-30b-a3b tg128 344 -> 1,011 t/s; bench/RESULTS.md session 50).
  bool lab_no_barrier = false;
  // Lab only, wrong results (STRATA_VK_LAB_NO_BARRIER_BEFORE=part[,part]): no hazard barrier before
  // the kernels whose label contains a part, so each overlaps the level before it: the bound of
  // what overlapping that one boundary could gain (e.g. NORM_OUT: the O and down matvecs).
  std::vector<std::string> lab_no_barrier_before;
  // Check only (STRATA_VK_BARRIER_ALL=1): a barrier before every dispatch, as a profile puts after
  // each, but with no timestamps: logits that change with it show a dependency the recorder missed.
  bool barrier_all = false;
  // A step's layers and its output are recorded and replayed apart (step_cache.cpp);
  // STRATA_VK_OUTPUT_PART=0: one recording per step, keyed by both (the A/B switch).
  bool output_part = true;
  // Lab only (STRATA_VK_SKIP=a+b,c): dispatches whose label holds a and b, or c, are not
  // recorded, so a benchmark's change in time is that kernel's real cost in the pipelined step.
  // The results are wrong; nothing but a timing run sets it.
  std::vector<std::string> skip_kernels;
  // Lab only (STRATA_VK_REPEAT, the same syntax): those dispatches are recorded twice, the second
  // after a barrier where it reads what the first wrote; unlike leaving a kernel out, the data
  // that steers later kernels (MoE routing) stays live. Results that accumulate are wrong.
  std::vector<std::string> repeat_kernels;
  // Lab only (STRATA_VK_PAD_LEVELS=N): N one-workgroup dependent dispatches after each attn_prep,
  // so the change in time per token over N gives the cost of one level of the step.
  std::uint32_t pad_levels = 0;

  // --- Attention.
  bool split_attention = true;             // STRATA_VK_SPLIT_ATTN=0 disables
  // Query-tiled prefill attention: correct, but measured slower on the H100 (pp4096 752 vs 1154
  // t/s, bench/RESULTS.md: shared-memory bank conflicts in its key loop), so opt-in for now.
  bool tiled_attention = false;            // STRATA_VK_QTILE_ATTN=1 enables
  bool gqa_attention = true;               // decode attention per KV head group; STRATA_VK_GQA_ATTN=0 disables
  // attention_dec.glsl LANES: groups of lanes split a head's dims, a coalesced load a key row, and
  // no workgroup barrier in the key loop (STRATA_VK_DEC_LANES=0: the thread-a-key form).
  bool dec_lanes = true;
  // The same for attention_qdec (compressed KV): 0 never, 1 always, 2 (the default) in steps of one
  // token over caches of at most qdec_lanes_ctx tokens (STRATA_VK_QDEC_LANES). H200, qwen3-8b tq3, tg64
  // t/s, thread-a-key / LANES / LANES with 320-key splits: depth 4096 223.2 / 222.5 / 227.9, 8192 182.2 / 205.4 / 216.3,
  // 16384 167.1 / 187.0 / 182.5; tg32 @ 32768 146.1 / 142.9 / 144.9 (bench/RESULTS.md session 38).
  std::uint32_t qdec_lanes = 2;
  std::uint32_t qdec_lanes_ctx = 24576;
  // Its workgroup (STRATA_VK_DEC_LANES_WG, a power of two; H200, qwen3-8b: 256 and 128 equal at
  // depth 4096, 256 ahead with 64 streams, 512 behind at both; bench/RESULTS.md session 24).
  std::uint32_t dec_lanes_wg = 256;
  // Lanes a key row in the LANES forms, at most (STRATA_VK_DEC_LPK=8|16|32; head_dim / 4 and the
  // subgroup bound it too). Fewer lanes a row mean more keys a chunk and fewer exchanges a key, but
  // more registers a lane: slower on the H200 (qwen3-8b tg64 at depth 4096, 32 / 16 / 8 lanes: f16
  // 293.0 / 275.2 / 258.8 t/s, tq3 236.1 / 223.0 / 211.3; bench/RESULTS.md session 45).
  std::uint32_t dec_lanes_lpk = 32;
  // The LANES forms' cache slots a chunk from one block-table read and one division where the chunk's keys
  // share a block (common.glsl PAGED_SLOTS; STRATA_VK_CHUNK_SLOTS=0 reads the table and divides a key). The
  // same rows, so the same results. H200, qwen3-8b tg64 @ d4096: f16 290.3 / 289.6 -> 294.5 / 295.0 t/s, tq3
  // 237.2 / 236.4 -> 238.7 / 237.7; tg32 @ d32768 f16 192.4 -> 197.1, tq3 LANES 146.1 -> 152.9; 8 / 64 f16
  // streams 1,591 / 4,833 -> 1,628 / 4,894 (bench/RESULTS.md session 48).
  bool chunk_slots = true;
  // Keys a chunk of the LANES forms' streams, at most (1|2|4|8|16; 0: LPK / group, the most a chunk's (key,
  // head) pairs fill a stream's lanes with): f16 / f32 caches (attention_dec, STRATA_VK_DEC_KC) and compressed
  // ones (attention_qdec, STRATA_VK_QDEC_KC). Fewer keys hold fewer rows and scores in registers for more
  // softmax work a key. H200, qwen3-8b (bench/RESULTS.md session 48): f16 at 4 keys level at d4096 (291.7 /
  // 290.6 t/s), -10% at d32768 (172.6 / 192.4), so 8; tq3 with chunk slots, tg64 @ d4096 default / 4 / 2
  // keys 233.1 / 242.2 / 239.7 (two rounds' means), tg32 @ d16384 197.1 / 197.5 (the tq3 split kernel:
  // 128 -> 102 registers), so 4. (tq3 LANES at d32768, not its default there: 153.5 / 148.8.)
  std::uint32_t dec_chunk_keys = 0;
  std::uint32_t qdec_chunk_keys = 4;
  bool multi_gqa = true;                   // the same for steps of many sequences; STRATA_VK_MULTI_GQA=0 disables
  // Unsplit steps of at least this many tokens take it; fewer take the per-head kernel (H200,
  // qwen3-8b, 8 streams at short contexts: 1,462-1,495 -> 1,517-1,571 t/s from 9 to 5).
  // STRATA_VK_MULTI_GQA_MIN=N sets it.
  std::uint32_t multi_gqa_min = 5;
  // The same for compressed KV (attention_qdec; STRATA_VK_TQ_GQA): 1 (default) decode steps and steps
  // of several sequences, 0 never, 2 single-sequence prompt steps too (unsplit, n_head_kv x tokens
  // workgroups; those take attention_mma where the device has tensor cores, and attention_q was 6x
  // faster on lavapipe). Steps of several sequences, prompts among them: H200, qwen3-8b tq3,
  // batched_bench -npp 2048, first token of 4 / 8 streams 2,910 / 6,231 ms with attention_q (a key
  // row read once a query head), 927 / 1,928 grouped; f16 723 / 1,509 (bench/RESULTS.md session 38).
  int tq_gqa = 1;
  static constexpr std::uint32_t grouped_decode_rows = 8;  // steps the grouped and split decode kernels take
  // A compressed cache's attention of `rows` tokens runs attention_qdec (GQA groups up to 8).
  bool grouped_qdec(std::uint32_t group, std::uint32_t rows, bool single_seq) const {
    return group >= 1 && group <= 8 && (tq_gqa == 2 || (tq_gqa == 1 && (rows <= grouped_decode_rows || !single_seq)));
  }
  // attention_qdec's shortest split in keys; STRATA_VK_TQ_SPLIT=N (x64). H200, qwen3-8b tq3 at depth
  // 4096, us a layer: 64 keys 53.6, 128 39.7, 256 52.7, 512 69.9 (bench/RESULTS.md session 25).
  std::uint32_t tq_split = 128;
  // The LANES form's splits of a one-wave step: the shortest split from tq_wave_split to tq_wave_max keys
  // that puts all of a step's workgroups in one wave of the GPU (two a streaming multiprocessor: the
  // split kernel's 128 registers a thread on the H200), else tq_split's. A second wave costs the
  // kernel's frame again (session 37), and below a full wave shorter splits hide more latency. H200,
  // qwen3-8b tq3 tg64 t/s at depth 4096 (one wave from 192 keys): 192 232.1, 256 226.5, 320 224.7;
  // at 8192 (from 320): 320 210.0, 256 203.3, 192 (two waves of 128) 205.4; against thread-a-key's
  // 224.6 and 182.7 (bench/RESULTS.md session 38). Longer one-wave splits (448 at 12K) are not
  // measured: at 4096 a key row more a split cost about what the second wave's frame does.
  // STRATA_VK_TQ_WAVE=N (x64), 0 off.
  std::uint32_t tq_wave_split = 192;
  static constexpr std::uint32_t tq_wave_max = 320, qdec_lanes_wgs_per_sm = 2;
  // (2 takes steps of one token only: steps of several sequences are not yet measured with LANES.)
  bool qdec_lanes_over(std::uint32_t n_ctx, std::uint32_t rows) const {
    return qdec_lanes == 1 || (qdec_lanes == 2 && rows == 1 && n_ctx <= qdec_lanes_ctx);
  }
  // The split decode attention's split length: at least min_split keys, a multiple of 64 (of 128 where
  // min_split is one), long enough for n_ctx keys in max_splits splits.
  static std::uint32_t split_length(std::uint32_t n_ctx, std::uint32_t max_splits, std::uint32_t min_split) {
    const std::uint32_t unit = min_split % 128 ? 64 : 128;
    return std::max(min_split, detail::div_up(detail::div_up(n_ctx, max_splits), unit) * unit);
  }
  // attention_qdec's shortest split for a decode step of `rows` tokens over a cache of n_ctx tokens, at
  // most max_splits of them (fewer than 128: the window's split beside), on `sms` multiprocessors (0: unknown).
  std::uint32_t qdec_min_split(std::uint32_t n_ctx, std::uint32_t n_head_kv, std::uint32_t rows, std::uint32_t max_splits,
                               std::uint32_t sms) const;
  // attention_qdec with a window ring: the window's keys as a split of their own (f16 ring rows
  // against the plain query, a partial the merge adds), so the code splits skip the ring's keys and
  // carry neither the plain query nor a second value accumulator. H200, qwen3-8b tq3, thread-a-key
  // form: tg64 @ d4096 220.2-223.2 against 214.8-215.3, tg32 @ d32768 143.9 against 141.6
  // (bench/RESULTS.md session 36). STRATA_VK_QDEC_RING_SPLIT=0: the window's keys in the code splits.
  bool qdec_ring_split = true;
  // The LANES form's streams merged once where each split runs one pass (no window, or the window's own split;
  // attention_qdec_lanes.glsl LANES_ONE_PASS): two barriers and a second sum over the streams fewer a
  // workgroup, the same results bit for bit. STRATA_VK_QDEC_ONE_PASS=1; not yet measured, so off.
  bool qdec_one_pass = false;
  // Value rows a stream of the thread-a-key form keeps in flight (STRATA_VK_QDEC_KIF: 1, 2, 4, 8, 16):
  // 4 registers each, and the kernel's 165 registers hold three workgroups an SM.
  std::uint32_t qdec_kif = 8;
  // Threads a workgroup of the thread-a-key form in one-token steps over TurboQuant keys and values, a
  // tile's keys (its splits a whole number of tiles; other steps and caches 128, as not measured;
  // STRATA_VK_QDEC_WG=N, a power of two from 64 to 1024: N in every step, qdec_wg_every_step). H200,
  // qwen3-8b Q4_K_M tq3 tg32 at depth 32768 (bench/RESULTS.md session 70): 128 threads (153 registers,
  // three workgroups an SM, 384-key splits) 175.1 / 175.1 t/s, 256 (125 registers, two an SM, 512-key
  // splits) 181.9 / 181.8; one layer's kernel (vk_kv_attention_bench) 0.320 / 0.312 ms, and 512 threads
  // 0.413 (512-key splits) / 0.354 (1,024).
  std::uint32_t qdec_wg = 256;
  bool qdec_wg_every_step = false;
  // The thread-a-key form's key rows of q8_0 / TurboQuant read as the 16-byte words that cover them
  // (attention_qdec_keys.glsl QDEC_KVEC; STRATA_VK_QDEC_KVEC=0: 4-byte words), and the next tile's
  // block-table entries loaded a tile ahead (QDEC_BLK_AHEAD; STRATA_VK_QDEC_BLK_AHEAD=0: at the tile).
  // H100, qwen3-8b Q4_K_M tq3 at depth 32768 (bench/RESULTS.md session 71): the kernel (vk_kv_attention_bench)
  // 0.3172 -> 0.3015 ms with both (the rows 0.3015 alone, the table 0.3159), tg32 170.7 -> 174.2 t/s.
  bool qdec_kvec = true;
  bool qdec_blk_ahead = true;
  // Its 32-thread units as streams of their own over their keys of a tile, each with its softmax state,
  // merged once at the end (QDEC_WARP; STRATA_VK_QDEC_WARP=0: the tile's maximum and sum over the workgroup,
  // four barriers a tile), and with it a stream's first value rows of a tile loaded beside the key rows
  // (QDEC_VAHEAD, one-segment TurboQuant values with their scales folded; STRATA_VK_QDEC_VAHEAD=0: after the
  // softmax). Same H100 lease, the kernel alone: 0.3015 -> 0.2869 ms (128 registers); the model not yet
  // measured with them (a one-pass merge of the value streams beside them took the kernel to 176 registers,
  // one workgroup an SM, and tg32 to 153 t/s: removed).
  bool qdec_warp = true;
  bool qdec_vahead = true;
  // With the units, every value row of a tile loaded by its key's scoring thread beside the key row (16-byte
  // words) and staged in shared memory for the unit's lanes (QDEC_VROW, replacing QDEC_VAHEAD; one-segment
  // TurboQuant values of at most 50 bytes a row: tq2 / tq3 at head_dim 128, tq2-tq4 at 64): no global load in a
  // tile's value sums.
  // STRATA_VK_QDEC_VROW=1; not yet measured, so off.
  bool qdec_vrow = false;
  // TurboQuant keys of 2 or 3 bits scored with 4-wide int8 dot products (attention_qdec.glsl QDEC_IDOT, both
  // forms: queries as int8 a 32-dim block, centroids as int8 a segment, four dims' codes one lookup) instead
  // of a centroid lookup and G float FMAs a dim; with QDEC_VFOLD, H100, qwen3-8b Q4_K_M tq3 (bench/RESULTS.md
  // session 68): tg64 @ d4096 233.6 -> 239.4 t/s, tg32 @ d16384 191.8 -> 200.9, tg32 @ d32768 149.2 -> 165.0;
  // decode logits 5e-6 NMSE from the float form's (tests/runtime/kv_compression_test). STRATA_VK_QDEC_IDOT=0: float.
  bool qdec_idot = true;
  // TurboQuant values of one segment: a key's value scale goes into its weights, so the value sums decode
  // centroids only, two dims a lookup (attention_qdec.glsl QDEC_VFOLD, both forms; STRATA_VK_QDEC_VFOLD).
  bool qdec_vfold = true;
  // Lab only, wrong results: attention_qdec's QDEC_SKIP bits (STRATA_VK_QDEC_SKIP); the row bits (4, 8,
  // 512-2048) time the float forms: with STRATA_VK_QDEC_IDOT=0 STRATA_VK_QDEC_VFOLD=0.
  std::string qdec_skip;
  // TurboQuant rotations out of attention_qdec's split workgroups: attn_prep writes the rotated
  // queries (Q_ROT) and COMBINE rotates the merged value sums back (ROT_LATER, where every split's
  // partial is in one domain). STRATA_VK_QDEC_HOIST: 0 never, 1 where the kernel runs its LANES form
  // (the default: its kernel 44.3 -> 30.7 us a layer, tg64 @ d4096 +8%), 2 both forms (thread-a-key:
  // its kernel the same, the merge and attn_prep ~5 us a layer slower; H200, qwen3-8b tq3, session 36).
  // At 1 the thread-a-key form hoists too in one-token steps over caches past qdec_lanes_ctx: at depth
  // 32768 (86 splits of 384 keys) tg32 146.3 -> 150.8 t/s (session 40).
  std::uint32_t qdec_hoist = 1;
  // The split decode's merge (attention.glsl COMBINE): its workgroup, split groups of a head's
  // dims (STRATA_VK_COMBINE_WG: 128, 256, 512, 1024), and the partials a thread keeps in flight
  // (STRATA_VK_COMBINE_CIF: 4, 8, 16). H200, qwen3-8b f16 at depth 4096 (33 splits), ms a token:
  // 512 x 8 0.2655, 512 x 16 0.2908, 256 x 16 0.3276, 1024 x 16 0.3331; the old form, a thread a
  // dim walking every split 8 loads at a time, 0.27-0.31 (bench/RESULTS.md sessions 34, 36).
  std::uint32_t combine_wg = 512, combine_cif = 8;
  bool tq_prep = true;                     // compressed KV appended by attn_prep; STRATA_VK_TQ_PREP=0: kv_store_q
  // attn_prep writes the ring (what the attention reads) and a second dispatch the codes beside
  // the attention (kv_encode.glsl KV_PART); STRATA_VK_ENCODE_BESIDE=0: the codes in attn_prep.
  bool encode_beside = true;
  bool flash_attention = true;             // prefill attention on tensor cores; STRATA_VK_FA=0 disables
  // Its softmax on the accumulators in registers (attention_mma.glsl MMA_QUAD) where the probed
  // layout is mma.sync's; STRATA_VK_FA_REGS=0: through shared memory as before.
  bool fa_regs = true;
  // The f16-cache prompt attention's tiles (attention_mma.glsl FA_WARPS: 16 query rows a warp
  // share each K/V tile; FA_KEYS: keys a tile, 64 only with the softmax in registers) and
  // FA_FASTMASK (tiles inside every row's causal range skip the masks). Steps of fa_wide_min+
  // tokens take 8 warps of 64 keys, shorter ones 4 of 32 (twice the workgroups). H200, qwen3-8b
  // pp4096 in 2,048-token steps (session 32): attention 0.0115 ms a token (4 x 32) -> 0.0106
  // (8 x 64, fast masks), 9,675 -> 9,750 t/s; 4 x 64 spills (0.0169); the masks alone level.
  // STRATA_VK_FA_WARPS=4|8, STRATA_VK_FA_KEYS=32|64 force a tile for every step size,
  // STRATA_VK_FA_FASTMASK=0|1.
  std::uint32_t fa_wide_min = 1024;
  std::uint32_t fa_warps = 0, fa_keys = 0;  // 0: by the step's tokens
  bool fa_fast_mask = true;
  std::uint32_t flash_warps(std::uint32_t tokens) const { return fa_warps ? fa_warps : tokens >= fa_wide_min ? 8 : 4; }
  std::uint32_t flash_keys(std::uint32_t tokens) const { return fa_keys ? fa_keys : tokens >= fa_wide_min ? 64 : 32; }
  // Decode attention over compressed caches on tensor cores (attention_mma_dec.glsl,
  // STRATA_VK_MMA_DEC=1): correct but measured slower on the H200 (qwen3-8b tg64 @ d4096: tq3 118
  // vs attention_qdec's 206 t/s; an f16 variant 235 vs attention_dec's 270), so opt-in.
  bool mma_dec = false;
  // Decode steps whose tokens are all at positions below short_ctx_len record their attention
  // unsplit (STRATA_VK_SHORT_CTX=N sets the length, 0 turns it off); short_ctx: this step's.
  std::uint32_t short_ctx_len = 256;
  // Decode attention writes its output as int8 too (attention.glsl QUANT_OUT); STRATA_VK_ATTN_Q8=0 disables.
  bool attn_q8 = true;
  // The unsplit per-head attention sums values over key groups, 4 dims a thread (V4_D); STRATA_VK_V4=0 disables.
  bool attn_v4 = true;
  // One-token short-context steps run attn_prep's head ops and KV append in the per-head attention
  // kernel (attention.glsl HEAD_OPS), a level fewer a layer; STRATA_VK_HEAD_OPS=0 keeps attn_prep.
  bool head_ops_attention = true;
  // The same in the split grouped decode kernel (attention_dec.glsl LANES HEAD_OPS: every split's
  // workgroup runs its group's head ops, the split holding the token appends): STRATA_VK_HEAD_OPS_SPLIT=1.
  // Off: -15% / -9% on the H200 (qwen3-8b / qwen3-30b-a3b tg64 at depth 4096; the ops' barriers
  // delay every split). Needs head_ops_attention; with it, past-short-context steps that record
  // unsplit (short caches, several streams) take the per-head HEAD_OPS kernel too.
  bool head_ops_split = false;
  // The unsplit per-head decode kernel's workgroup (STRATA_VK_ATTN_DEC_WG=128|256|512). 256 a query head: one tile
  // of keys covers every short-context step (H200, tg128: qwen3-8b +3.7%, qwen3-30b-a3b +2.2% against 128; bench/
  // RESULTS.md session 41; loading the tile's value rows or all of its key words ahead, before the softmax or the
  // query's ops, was 1-10% slower).
  std::uint32_t attn_dec_wg = 256;

  // --- Integer and f32 matvecs.
  // Integer matvec (mmvq.glsl): activations quantized once per input to int8 blocks (xq/xs
  // scratch), then packed 4x8-bit dot products. STRATA_VK_MMVQ=0 turns it off (f32 matvec);
  // STRATA_VK_MMVQ_SHAPE=WG:RPG:U overrides the workgroup shape for experiments.
  bool mmvq = true;
  // Steps below this many tokens use the integer matvec for formats that have it (8 tokens per
  // weight pass), from it on the tiled GEMM. STRATA_VK_MMVQ_MAX_TOKENS moves the switch up (an
  // experiment: 16-64-token steps expand every weight to f16 on the tiled path); never below
  // mm_min_tokens, where every format leaves the matvecs.
  std::uint32_t mmvq_max_tokens = detail::mm_min_tokens;
  std::uint32_t mmvq_wg = 64, mmvq_rpg = 2, mmvq_u = 2;
  bool mmvq_shape_forced = false;
  bool quant_out = true;                           // STRATA_VK_QUANT_OUT=0 disables
  // Decode's K and V projections (one input, format and shape, adjacent in memory) as one integer
  // matvec dispatch (mmvq.glsl PAIR_OUT) with STRATA_VK_MMVQ_PAIR=1. Off: it lost on the H100
  // (qwen3-8b tg128 Q8_0 253.5 / 254.7 against 255.2 / 257.3 t/s; bench/RESULTS.md session 63).
  bool mmvq_pair = false;
  // Decode's Q, K and V projections (one input, format and row width, each matrix whole
  // workgroups) as one integer matvec over their rows stacked (mmvq.glsl STACK_OUT);
  // STRATA_VK_MMVQ_STACK=0 records a dispatch each. H100, alternated against it in one lease:
  // qwen3-8b Q4_K_M tg64 @ d4096 272.1 against 269.9 t/s (mean of four pairs), Q8_0 tg128 257.2
  // against 256.4, tg128 level (bench/RESULTS.md session 63). Taken before the pair.
  bool mmvq_stack = true;
  // NORM_OUT / RMS_IN for decode steps (STRATA_VK_NORM_OUT=0 disables): the norm between a
  // residual matvec and the matvecs that read it costs no dispatch (and no barrier) of its own.
  bool norm_out = true;
  bool combine_norm_out = true;  // the MoE combine as NORM_OUT producer (STRATA_VK_COMBINE_NORM_OUT=0 disables)
  bool router_norm = true;  // decode routers fold the FFN norm in (STRATA_VK_ROUTER_NORM=0: read the quantize's rows)
  bool topk_in = true;  // decode's gate/up matvec runs the top-k (STRATA_VK_TOPK_IN=0: a MOE_TOPK dispatch)
  // Lab only, wrong results: mmvq.glsl TOPK_LAB (STRATA_VK_TOPK_LAB=1: the gate/up matvec skips the top-k, rank r
  // reads expert r). What the prologue costs: H200, qwen3-30b-a3b tg128 355.0 / 343.2 against 312.5 / 317.1 t/s
  // (bench/RESULTS.md session 48).
  std::uint32_t topk_lab = 0;
  // Every GPU top-k in its lean form (moe_topk.glsl TOPK_LEAN; STRATA_VK_TOPK_LEAN=1), so the gate/up
  // matvec's prologue, the MOE_TOPK dispatch and the router's tail weigh alike: each subgroup takes the k
  // largest logits one at a time (no shared memory, no barrier), the weights from the k selected logits
  // alone. The same ids; the weights equal the full form's to the last bits. Where it does not fit
  // (topk_lean_slots) the full form runs; STRATA_VK_TOPK_LEAN=0 forces it. H200, qwen3-30b-a3b: tg128
  // 332.5 / 333.6 against 314.2 / 314.3 t/s, the gate/up matvec 0.674 against 0.852 ms a token (bench/RESULTS.md
  // session 49).
  bool topk_lean = true;
  // Decode's MoE router as per-block parts written by the O projection beside the FFN norm's first
  // half (mmvq.glsl ROUTER_PARTS), summed by the gate/up matvec's top-k (TOPK_PARTS): the router's
  // and the experts' input quantize's level leaves each MoE layer. STRATA_VK_ROUTER_PARTS=1. Off:
  // -1% on the H200 (qwen3-30b-a3b tg128; the top-k's sum over the parts delays every expert row).
  bool router_parts = false;
  // Lab only, wrong results (STRATA_VK_ROUTER_PARTS_LAB=1, with ROUTER_PARTS): the parts neither
  // computed nor summed beyond one block: what one level fewer a MoE layer is worth with the router free.
  bool router_parts_lab = false;
  // Decode's MoE router with no level of its own, from products precomputed at load (router_product.glsl):
  // the router's logits are (R' h + M a) / rms(x), with R' the router times the FFN norm's weight, h the
  // residual entering the O projection, a its int8 input and M = R' x the O projection's weights. R' h
  // runs beside the attention, M a beside the O projection (which writes the norm's first half, as with
  // router_parts), and the gate/up matvec's top-k adds the two parts and applies the 1 / rms.
  // Costs (E x (K + H)) floats a MoE layer of GPU memory (qwen3-30b-a3b: 144 MiB; the --fit planner
  // counts it). On by default: qwen3-30b-a3b tg128 +6.4% on the H200 (337-343 -> 357-365 t/s, three
  // rounds, session 52), 298 -> 252 dependency levels a token; STRATA_VK_ROUTER_PRODUCT=0 turns it off.
  bool router_product = true;
  // With router_product's two parts and the lean top-k: each lane adds its experts' parts from memory
  // and ranks the unscaled sums (moe_topk.glsl TOPK_DIRECT), the 1 / rms applied by the writer alone,
  // so no barrier precedes a gate/up workgroup's ranking. STRATA_VK_TOPK_DIRECT=0: the parts summed
  // into shared memory and scaled first (topk_sum_parts), as for ROUTER_PARTS.
  bool topk_direct = true;
  // One-token decode: a residual projection that cannot own whole 32-row blocks (norm_out_fits: Q4_K,
  // Q5_K, IQ4_XS, Q4_0 below 4,096 rows, as in models of hidden 1,024-3,072) writes the next norm's
  // first half from its block tails (mmvq.glsl MOE_BLOCK_TAIL with k = 1), as qwen3-30b-a3b's O
  // projection does for the router parts, so the norm's quantize dispatch and its level leave: two
  // levels a dense layer (after O and after down). STRATA_VK_BLOCK_NORM_OUT=1; off until measured.
  bool block_norm_out = false;
  // Decode's MoE combine (with the residual and the next norm's first half) as per-block tails of
  // the experts' down matvec (mmvq.glsl MOE_BLOCK_TAIL): the combine's level leaves each MoE layer.
  // STRATA_VK_MOE_BLOCK_TAIL=0: the combine's own dispatch.
  bool moe_block_tail = true;
  std::uint32_t moe_block_tail_lab = 0;  // lab only, wrong results: moe_block_tail.glsl BT_LAB (STRATA_VK_BT_LAB)
  static constexpr std::uint32_t moe_block_tail_tokens = 8;  // its counters' tokens
  // Expert matvecs with rows of <= 1024: lanes per row, groups of 8 summed by shuffles
  // (STRATA_VK_MMVQ_SHORT_LPR=N; 0: a warp a row). qwen3-30b-a3b's expert down rows of 768 are 12
  // units of 64: a warp a row left 20 lanes idle (H200, tg128 alternated: 290.8 / 279.7 t/s with
  // 8, 280.0 / 280.3 with 16, 263.5 / 265.2 with 0).
  std::uint32_t mmvq_short_lpr = 8;
  // Matvec shape: rows per workgroup and workgroup size (STRATA_VK_MV_NR / _WG to experiment).
  std::uint32_t mv_rows = 8, mv_wg = 64;
  // Rows per workgroup of a matvec. Measured on the H100 (bench/RESULTS.md): 8 for every
  // matrix beats fewer rows for small ones (K/V projections), since x is then read from L2 once
  // per 8 rows; fewer only when the matrix has fewer rows than that.
  // Short matrices (an MoE router's 64-256 rows) take one row per workgroup, so they still
  // spread over the whole GPU.
  std::uint32_t rows_for(std::uint64_t n) const { return n > 512 && n >= mv_rows ? mv_rows : 1; }
  // An integer matvec's shape: workgroup size, rows per lane group, units in flight per lane.
  struct mmvq_shape_t {
    std::uint32_t wg, rpg, u;
  };
  // Multi-token steps (MMVQ_MT): plain matvecs take mmvq_mt_shape (4 rows a lane group on tall
  // matrices, 2 on short ones, where 4 leaves too few warps: H200 lab at 8 tokens, Q4_K 4096 x 1024
  // 16.8 us against 12.7), QUANT_OUT's (the SwiGLU gate / up pair, so twice the rows per group)
  // mmvq_mt_qout; STRATA_VK_MMVQ_MT_SHAPE (every height) / _MT_QOUT = WG:RPG:U set them,
  // STRATA_VK_MMVQ_MT=0 turns the multi-token form off (MT_OFF).
  bool mmvq_mt = true, mmvq_mt_shape_forced = false;
  mmvq_shape_t mmvq_mt_shape{64, 4, 1}, mmvq_mt_qout{512, 2, 1};
  // One-token QUANT_OUT matvecs (the SwiGLU gate / up pair, 32 rows a workgroup): 256 threads
  // (4 rows a lane group), or 512 (2 rows) where that form's workgroups exceed what one wave of
  // it holds, qout_wave_per_sm an SM (H200: 80 registers a thread, 3 workgroups of 256 an SM).
  // H200 tg128, alternated twice: llama-3.1-8b (14,336 rows: 448 workgroups, two waves)
  // 315.7 / 318.6 -> 330.5 / 327.8 t/s with 512 threads; qwen3-8b (12,288: 384, one wave)
  // 325.0 / 327.0 with 256 against 306.0 / 306.8 with 512. The SM count is the driver's
  // (VK_NV_shader_sm_builtins); unknown, 256 threads. Q8_0 takes 512 threads (2 rows) at any height
  // (kernel_requests.cpp qout_shape; H100 qwen3-8b Q8_0 tg128 +4.3%; its experts, 2-8-token steps and
  // the H200 not measured). STRATA_VK_MMVQ_QOUT=WG:RPG:U sets the shape for every format.
  mmvq_shape_t mmvq_qout{256, 4, 1};
  bool mmvq_qout_forced = false;
  // Experiments: STRATA_VK_MMVQ_NOUT=WG:RPG:U the NORM_OUT matvecs' shape (decode's O and down; its
  // workgroup owns 32 rows), STRATA_VK_MMVQ_STACK_SHAPE=WG:RPG:U the Q/K/V stack's, each leaving
  // every other matvec's shape alone (STRATA_VK_MMVQ_SHAPE moves all of them).
  mmvq_shape_t mmvq_nout{1024, 1, 1}, mmvq_stack_shape{1024, 1, 1};
  bool mmvq_nout_forced = false, mmvq_stack_shape_forced = false;
  // The per-pair expert matvecs without QUANT_OUT over short rows (decode's down projection, lane groups of
  // mmvq_short_lpr): a row a lane group, 256 threads. H200, qwen3-30b-a3b (K 768): tg128 344.7 / 342.4 / 346.5
  // against 334.7 / 337.4 / 341.7 t/s with the formats' own shapes (Q6_K 64:2:2 -> 0.375 to 0.330 ms a token,
  // Q4_K 128:1:2 level), tg64 @ d4096 279.2 against 270.6 (bench/RESULTS.md session 49).
  // STRATA_VK_MMVQ_EXPERT_SHAPE=WG:RPG:U sets every per-pair expert matvec's without QUANT_OUT, for experiments.
  mmvq_shape_t mmvq_short_expert{256, 1, 2}, mmvq_expert{};
  bool mmvq_expert_forced = false;
  static constexpr std::uint32_t qout_wave_per_sm = 3;
  bool uses_mmvq_mt(gguf::type_id t, std::uint32_t nt) const {
    return mmvq_mt && !mmvq_shape_forced && nt > 1 && nt <= detail::mmvq_mt_max_tokens && detail::has_mmvq_mt(t);
  }
  // Q5_K, Q4_0 and IQ4_XS take the integer matvec too (their units in quant/<fmt>.glsl;
  // lavapipe-tested, not yet measured on a GPU). STRATA_VK_MMVQ_MORE=0 keeps them on the f32
  // matvec, for A/B.
  bool mmvq_more = true;
  // The format has an int8 unit that this run uses (STRATA_VK_MMVQ_MORE; whether the matvec is on or not).
  bool int8_unit(gguf::type_id t) const { return detail::has_mmvq(t) && (mmvq_more || !detail::mmvq_more_format(t)); }
  // The format has an int8 unit and K fits its blocks: the integer matvec can run it.
  bool has_int8_unit(gguf::type_id t, std::uint64_t K) const { return mmvq && int8_unit(t) && K % 256 == 0; }
  // The integer matvec's loops over tokens and rows carry the unroll hint (mmvq.glsl UR;
  // STRATA_VK_MMVQ_UNROLL=1). Off: on the H200 it removes local memory at 8 tokens (40.3 -> 31.5
  // us) and does nothing at 1-4, the token counts the matvec takes.
  bool mmvq_unroll = false;

  // --- Work run by a dispatch's last workgroup.
  // Work that needs every output of a dispatch, run by its last workgroup (last_workgroup.glsl)
  // instead of a dispatch of its own, in steps of at most tail_rows tokens: the next RMS norm
  // after a residual integer matvec or the MoE combine with its residual (norm_tail.glsl: the
  // rows as f32 and as int8 in a quantized slot, so neither the norm's nor a quantize dispatch
  // follows), and the router's top-k after its matvec (moe_topk.glsl). STRATA_VK_TAIL=N sets the
  // token limit; 0, the default, until the H100 has measured it.
  std::uint32_t tail_rows = 0;

  // --- Tiled and tensor-core matmuls.
  bool coopmat = false;   // tensor-core tile product in mul_mm
  bool mma2 = false;      // its larger double-buffered tiles (STRATA_VK_MMA2=1; off until faster than the 64x64 kernel)
  bool mma2_forced = false;
  mma2_tile mma2_shape{128, 128, 64, 32};
  // Prefill on tensor cores over f16 weights (mul_mm_f16.glsl): a quantized matrix is expanded
  // into f16 scratch (dequant_f16.glsl) a slice of rows at a time, then multiplied with
  // register-prefetched tiles. STRATA_VK_MM3=0 returns to mul_mm.glsl; STRATA_VK_MM3_SHAPE forces a tile.
  bool mm3 = true;
  bool mm3_forced = false;
  mma2_tile mm3_shape{128, 64, 64, 32};
  // The GEMM's activations converted to f16 first (copy_rows TO_F16): half the bytes each tile
  // reads from L2, where the f32 activations were 2/3 of the traffic. STRATA_VK_MM3_XF16=0 disables.
  bool mm3_xf16 = true;
  // Formats with an expansion unit skip the f16 scratch: mul_mm_f16 QW expands each weight tile
  // as it is stashed in shared memory. STRATA_VK_MMQ=0 returns them to the scratch.
  // Q6_K in place measured 26% slower than expand + GEMM at 512 tokens (its unit's expansion is
  // heavy for the half of the threads that do it), so only batches the small path would take
  // (mmk_small) read it in place; STRATA_VK_MMQ=2 takes it in place for every batch.
  int mmq = 1;
  // In place, two threads per weight row share the expansion (mul_mm_f16 QW2). H200 lab, Q4_K:
  // 64 x 64 tiles (batches of 33-64 tokens) 16% faster (4096 x 4096 at 64 tokens with 4 splits
  // 40.7 -> 35.0 us), 128 x 128 tiles slower (122 -> 107 TFLOP/s), so 1 (default) takes it for
  // tiles of at most 64 rows; STRATA_VK_MMQ2=0 never, =2 always.
  int mmq2 = 1;
  // The GEMM's products as 16x8x16 (MMA_N 8) instead of 16x16x16 (STRATA_VK_MMA_N8=1): H200,
  // qwen3-8b pp512 6,965 against 7,264 (in place 5% slower in the lab, f16 weights 3% faster).
  bool mma_n8 = false;
  // Q4_K's tile expansion in f16x2 arithmetic (quant/q4_k.glsl MMS_H2), as bits of
  // STRATA_VK_MMS_H2: 1 in mul_mm_f16's in-place tiles, 2 in mul_mm_small's (default 2).
  // The prompt GEMM keeps the f32 expansion: +0.5% on qwen3-8b pp512 (H200) is not worth 3x the
  // tile's error against float64 (Q4_K NMSE 2.7e-7 against 9e-8; m is rounded to f16 before its
  // product). mul_mm_small takes decode batches of 5-32 streams, whose one-stream steps run on
  // int8 activations with ~15x its error (lab rel. err 5-6e-3 against 3.4e-4, where the f16
  // activations dominate, H2 or not); there it is +5-8% (H200, qwen3-8b batched 8 / 16 / 32 streams
  // 971 / 1,748 / 2,649 -> 1,045 / 1,842 / 2,764 t/s) and H2 is the default.
  int mms_h2 = 2;
  // Steps of at least mm3_scratch_min tokens expand Q4_K into the f16 scratch once per matrix
  // (dequant_f16) and run the f16 tile, which is 15-20% faster than expanding every tile in place
  // (H200 lab, 512 tokens: 4096 x 4096 117 against 140 us); the expansion pass pays off once a
  // step is long enough. H200, qwen3-8b pp4096: -b 2048 7,878 -> 8,344 t/s, -b 4096 8,026 ->
  // 8,554; pp512 (-b 512) 7,915 in place against 7,668 through the scratch.
  // With the expansion ahead (mm3_ahead) it runs under the previous GEMM and pays off from 512
  // tokens (H200, qwen3-8b pp512 8,320 against 7,995-8,033 in place; pp256 6,345 against 6,957);
  // without it from 1,024. STRATA_VK_MM3_SCRATCH_MIN=N from N tokens, 0 never.
  std::uint32_t mm3_scratch_min = 512;
  // Steps of at least this many tokens read the f16 weight copies where they exist (f16_copies.cpp):
  // at 128+ tokens a 2-byte weight feeds 128+ products, so the GEMM stays bound by its tiles; below,
  // the batched decode steps (33-64 streams read Q4_K in place) are bound by the weights' bytes, which
  // the copy would triple. STRATA_VK_F16_COPY_MIN=N.
  std::uint32_t f16_copy_min_tokens = 128;
  // STRATA_VK_F16_COPIES=0|1: no f16 copies / copies where the memory holds them, whatever
  // backend_options::f16_copies says (unset: the option decides).
  std::optional<bool> f16_copies_env;
  // STRATA_VK_STEP_SPIN_US: how long the host polls a plain step's fence (handoff_submit.cpp
  // init_handoff gives the device's default where it is not set).
  std::optional<std::uint32_t> step_spin_env;
  // The scratch in two slots (scratch_schedule.hpp): the next GEMM's weights are expanded while
  // this one multiplies. STRATA_VK_MM3_AHEAD=0: one slot, each expansion just before its GEMM
  // (H200, qwen3-8b pp512 with Q4_K through the scratch: 7,767 / 7,772 against 8,324 / 8,320).
  bool mm3_ahead = true;
  // Token tiles fastest in the f16 GEMM's grid (mul_mm_f16 TOK_FAST: the workgroups that share a
  // weight tile run together). STRATA_VK_MM3_TOKFAST: 0 never, 1 over f16 weights (an F16 matrix or
  // the scratch) with K <= N, 2 every GEMM of more than one token tile that is not split over K.
  // H200, qwen3-8b (session 31, two reps each): pp512 8,328 / 8,334 (0), 8,565 / 8,578 (1),
  // 8,633 / 8,636 (2); pp4096 7,798 / 7,803, 8,014 / 8,019, 8,072 / 8,076.
  int mm3_tok_fast = 2;
  bool tok_fast_gemm(bool f16_weights, std::uint64_t K, std::uint64_t N) const {
    return mm3_tok_fast >= 2 || (mm3_tok_fast == 1 && f16_weights && K <= N);
  }
  // A slot's size cap in halves (64 Mi; bigger matrices go a slice of rows at a time).
  // STRATA_VK_SCRATCH_SLOT_KB=N caps it lower (tests force slices with it).
  std::uint64_t scratch_slot_halves = 64ull << 20;
  bool mm3_in_place(gguf::type_id t, std::uint64_t K, std::uint32_t tokens) const {
    if (!mmq || !mm3_xf16 || K % 64) return false;
    if (t == gguf::type_id::q4_k) return mmq >= 2 || tokens < mm3_scratch_min;
    return detail::has_mms_unit(t) && (mmq >= 2 || tokens <= mms_max);
  }
  // Split K (mul_mm_f16 SPLIT_K + split_k_sum) when a GEMM's tiles leave SMs idle, each split at
  // least split_min_k long (STRATA_VK_SPLITK_MIN_K, a multiple of 64: tests force splits of the
  // small fixture models with it); partial products go to mm_parts (mm_parts_floats).
  // STRATA_VK_SPLITK=0 off; STRATA_VK_SPLITK_WGS sets the workgroup target of small tiles.
  // H200 lab, Q4_K (us per call): 128 x 128 tiles (8 warps) gain only when very few:
  // 4096 x 1024 at 512 tokens (32 tiles) 140 -> 51 with 4 splits, but 4096 x 4096 (128 tiles)
  // 140 -> 168 with 2; 64 x 64 tiles (4 warps, batches of 33-64 tokens) gain from 4 splits even
  // at 192 tiles (4096 x 12288: 128 -> 110) and lose with 2 (134).
  bool split_k = true;
  std::uint32_t split_target = 256, split_min_k = 512;
  // An f32 matrix of few rows (an MoE router, kept off the f16 tensor cores) in a step of
  // narrow_min_tokens or more: 32 x 32 f32 tiles split over K (mul_mm.glsl NARROW SPLIT_K) into
  // narrow_parts, then split_k_sum. The matvec it replaces re-read each workgroup's 8 tokens of
  // activations for every router row. STRATA_VK_NARROW_GEMM=0: the matvec.
  bool narrow_gemm = true;
  static constexpr std::uint32_t narrow_splits = 8, narrow_min_tokens = 32, narrow_max_rows = 256;
  template <class W>  // gguf::tensor_info or weight
  static bool narrow_matrix(const W& w) {
    return !f16_operands_ok(w.type) && w.ne[2] == 1 && w.ne[1] > 1 && w.ne[1] <= narrow_max_rows && w.ne[0] % 32 == 0;
  }
  std::uint32_t k_splits(const mma2_tile& t, std::uint32_t tiles, std::uint64_t K) const {
    if (!split_k || K < 2 * split_min_k) return 1;
    std::uint64_t s = 1;
    if (t.bm * t.bn >= 128 * 128) s = tiles <= 64 ? detail::div_up(128, tiles) : 1;
    else if (tiles < split_target) s = std::max<std::uint64_t>(4, detail::div_up(split_target, tiles));
    return std::uint32_t(std::min<std::uint64_t>({s, 8, K / split_min_k}));
  }
  // Batches of mmk_small_min..mms_max tokens in a format the GEMM reads in place take its tiles
  // with split K instead of mul_mm_small (H200 lab, Q4_K/Q6_K at 64 tokens: 33-66% faster on
  // every 8B shape; at 16 tokens mul_mm_small is faster). STRATA_VK_MMK_SMALL=0 off, =N from N tokens.
  std::uint32_t mmk_small_min = 33;
  // Small batches on tensor cores (mul_mm_small.glsl): steps of mms_min .. mms_max tokens read
  // each quantized weight once, expanding it in the kernel (no f16 copy of the weights).
  // STRATA_VK_MMS=0 turns it off; STRATA_VK_MMS_MIN / _MAX move its token range.
  // From 5 tokens (H200 lab, Q4_K at 4 tokens with activations staged: 17.0 us against the integer
  // matvec's 18.1 for 4096 x 4096; 8 tokens 2x faster). A step it takes leaves the fused decode
  // path (norms, SwiGLU, residuals as their own dispatches), which keeps 4-token steps on the matvec.
  // (With the matvec's multi-token form, MMVQ_MT, 8-token steps on the matvec ran slower than here:
  // H200, qwen3-8b 8 streams 733 against 839 t/s; its 2-4 token steps are the gain, bench/RESULTS.md.)
  bool mms = true;
  std::uint32_t mms_min = 5, mms_max = 64;
  // mul_mm_small stages each step's activations in shared memory (XS; STRATA_VK_MMS_XS=0 off).
  bool mms_xs = true;
  // Steps of at most 8 tokens on mul_mm_small as weights x tokens 16x8x16 products (N8) where the
  // device has that shape: no padding rows staged, loaded or multiplied. STRATA_VK_MMS_N8=0 off.
  // H200 lab at 8 tokens (us): Q4_K 4096 x 12288 42.99 -> 36.06, 12288 x 4096 40.59 -> 34.49, Q6_K
  // 4096 x 12288 55.77 -> 53.12; qwen3-8b batched 8 streams 880 -> 974 t/s, 5 streams 533 -> 624.
  bool mms_n8 = true;
  // Steps of mms_min .. mmr_max tokens in a format with an MM_REG unit on mul_mm_reg.glsl (each
  // lane expands only its own fragment registers' weights: no tile through shared memory) where
  // the start-up probe finds the f16 fragments it builds (mma_layout.cpp probe_f16_fragments).
  // STRATA_VK_MMR=0 off; STRATA_VK_MMR_MAX=N its largest step; STRATA_VK_MMR_WARPS=W its warps
  // (0: by the matrix's rows, kernel_requests.cpp mm_reg_req); STRATA_VK_MMR_XA=0|1 whether a
  // step's activations are loaded a step ahead (-1: by format and tile, mm_reg_req).
  bool mmr = true;
  std::uint32_t mmr_max = 64, mmr_warps = 0;
  int mmr_xa = -1;
  // F32 weights (MoE routers, full-precision models) never take the tensor cores, which round
  // operands to f16: a router's logits decide which experts run (llama.cpp's CUDA backend keeps
  // them in f32 / TF32 too).
  static bool f16_operands_ok(gguf::type_id t) { return t != gguf::type_id::f32; }
  // A plain matmul (no fused norm, SwiGLU or residual) of n tokens that mul_mm_small leaves
  // takes the tiled GEMM (record_mul_mm): f16 tiles wherever cooperative matrices are used.
  bool tiled_matmul(gguf::type_id t, std::uint64_t K, std::uint32_t n) const {
    return n >= (has_int8_unit(t, K) ? mmvq_max_tokens : detail::mm_min_tokens) && K % 32 == 0;
  }

  // --- MoE experts.
  // Prefill-sized MoE steps on tensor cores (mul_mm_small MOE_GROUPED): pairs grouped by expert
  // in chunks of mms_moe_chunk, their activation rows gathered as f16 in that order (moe_xh,
  // moe_xh_cols halves per row). STRATA_VK_MMS_MOE=0 keeps the grouped int8 matvecs;
  // STRATA_VK_MMS_MOE_CHUNK=16|32|64 sets the chunk.
  bool mms_moe = true;
  std::uint32_t mms_moe_chunk = 32;
  // The same steps on int8 tensor cores (mul_mmq.glsl MOE_GROUPED) where the device has them and
  // the gate/up format an int8 unit (quant/*.glsl HAS_MMQ_UNIT): no f16 expansion of the weights
  // and no gathered copies of the activations (int8 rows read in place). A down projection in a
  // format without the unit stays on mul_mm_small. STRATA_VK_MMQ_MOE=0 keeps mul_mm_small for all.
  // Its own chunk of pairs, by the step's pairs per expert (mmq_chunk_for): a prompt's ~32 take
  // one chunk of 64 (H200, qwen3-30b-a3b pp512: 8,202 t/s on 128 x 64 tiles against 7,145 with
  // chunks of 32), a 64-stream decode step's ~4 chunks of 16 (1,555 against 1,375 t/s with 64).
  // STRATA_VK_MMQ_MOE_CHUNK=16|32|64 forces one.
  bool mmq_moe = true;
  std::uint32_t mmq_moe_chunk = 0;
  mma2_tile mmq_moe_shape{0, 0, 0, 0};  // STRATA_VK_MMQ_MOE_SHAPE=BM:WM:WN (BN is the chunk); 0: the default
  // Plain matmuls of mmq_dense_min..mmq_dense_max tokens (batched decode of 16-64 streams) in a
  // format with an int8 unit on mul_mmq, split over K where the tiles are few (record_mmq_dense).
  // Off: the H200 lab favoured it on wide matrices (Q4_K 4096 x 12288 at 32 tokens: 77.8 us against
  // mul_mm_small's 115.5 and the split f16 tiles' 128.2) but not on long K (12288 x 4096 unsplit:
  // 199.7 against 88.8), and whole steps lost (qwen3-8b batched decode at 16 / 32 / 64 streams:
  // 1,448 / 2,155 / 3,430 t/s against 1,693 / 2,584 / 3,594; same H200 fidelity either way).
  // STRATA_VK_MMQ_DENSE=1 on, =N from N tokens; STRATA_VK_MMQ_DENSE_MAX_K=K only rows of at most K
  // (not yet measured).
  bool mmq_dense = false;
  std::uint32_t mmq_dense_min = 16, mmq_dense_max = 64, mmq_dense_max_k = 1u << 30;
  static mma2_tile mmq_dense_tile(std::uint32_t n) {
    return n <= 16 ? mma2_tile{64, 16, 16, 16} : n <= 32 ? mma2_tile{64, 32, 32, 16} : mma2_tile{128, 64, 32, 32};
  }
  // Pairs grouped by expert for the expert matvecs (moe_grouping.hpp moe_chunk); STRATA_VK_MOE_GROUPED=0: a column per pair.
  bool moe_grouped = true;
  // A step's (token, expert) pairs go grouped by expert (moe.glsl MOE_GROUP, then chunks of each
  // expert's pairs) above two pairs per expert. Below, a chunk would hold one or two pairs: H200,
  // qwen3-30b-a3b (top-8 of 128) batched decode at 16 / 32 streams ran 503 / 776 t/s grouped and
  // 925 / 1,199 with a matvec per pair.
  static bool grouped_experts(std::uint32_t pairs, std::uint32_t n_expert) { return pairs > 2 * n_expert; }
  // Tokens a mul_mm_small workgroup row covers for a step of `tokens` (16 per accumulator tile, up to 4 tiles).
  static std::uint32_t mm_small_tokens(std::uint32_t tokens) { return 16 * std::min<std::uint32_t>(4, detail::div_up(tokens, 16)); }

  // Reads the STRATA_VK_* switches above from the environment; throws strata::error for a
  // malformed value (tuning.cpp). `coopmat` starts as the device's support (set before).
  void read_env();
};

}  // namespace strata::gpu
