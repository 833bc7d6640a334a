// AMX-INT8 packed GEMM (kernels/cpu/packed_gemm.hpp) for Q8_0, Q4_K and Q6_K: the same outputs,
// bit for bit, as the scalar gemm_reference and the VNNI kernel (x86/packed_gemm.hpp), from tile
// matrix multiplies. Built only into the amx tier's TU (runtime/cpu/amx_table.cpp, with
// -mamx-tile -mamx-int8 on top of the AVX-512 + VNNI flags); select.cpp picks that tier only when
// the CPU has AMX-TILE/INT8 and Linux granted the process the tile state (kernels/cpu/isa.hpp).
//
// A tile product C[t][n] += Σ_k A[t][k]·B[k][n] takes 16 tokens × 64 activation bytes (A: the
// K-quants' rows act_stride apart, read straight from the quantized activation rows; Q8_0's
// copied per tile, below) and 16 packed rows × 64 weight bytes laid out 4 consecutive K values
// per 32-bit lane (B): the packed layout already is that layout (Q8_0's B scratch only flips
// the codes' offset and converts the scales). The reference's exact
// int32 block sums come out of the tiles; the float part (one scale product and one FMA per block,
// blocks in order) runs on AVX-512 per token row as the VNNI kernel does: the same bits.
//
// K-quant sub-block scales are per row, so they cannot multiply the activations, and sc·q does
// not fit a byte. Each scale is cut into small digits instead, and each digit times the code
// does fit: one B tile per digit (a "pass"), one C tile per pass, then an exact integer sum.
//   Q4_K: sc (0..63) = d0 + 8·d1, digits 0..7, codes 0..15: products ≤ 105. isum = C0 + 8·C1.
//         msum = Σ_j m_j·(bsums_2j + bsums_2j+1) by vpmaddwd, as in the VNNI kernel.
//   Q6_K: sc (−128..127) = d0 + 7·d1 + 49·d2, balanced digits −3..3, codes u − 32 (−32..31):
//         |products| ≤ 96. isum = C0 + 7·(C1 + 7·C2) = Σ_j sc_j Σ (u − 32)·a, the reference's
//         Σ_j sc_j·S_j − 32·Σ_j sc_j·bsums_j.
// The digit B tiles of a group are built once per call and reused by every 16-token tile.
// Batches under amx_min_tokens (decode) and the token tail past the last full 16 run the VNNI
// kernel, whose results are the same bits.
#pragma once
#include <immintrin.h>

#include <new>

#include "strata/kernels/cpu/x86/packed_gemm.hpp"

namespace strata::kernels::cpu::x86 {
namespace {

inline constexpr std::size_t amx_tile_tokens = 16;
// Fewer tokens than this run the VNNI kernel: a tile product costs the same for 1 token as for
// 16, and decode's weight stream is the VNNI kernel's tuned path.
inline constexpr std::size_t amx_min_tokens = 16;

// ldtilecfg's 64-byte operand (palette 1).
struct alignas(64) amx_tile_config {
  std::uint8_t palette_id;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

// tmm0, tmm1: A (16 rows × a_colsb bytes); tmm2..tmm(1 + b_tiles): B (b_rows × 64 bytes); the
// rest up to tmm7: C (16 × 64 bytes, int32).
inline void amx_configure(int a_colsb, int b_tiles, int b_rows) noexcept {
  amx_tile_config c{};
  c.palette_id = 1;
  for (int i = 0; i < 8; ++i) {
    const bool a = i < 2, b = !a && i < 2 + b_tiles;
    c.rows[i] = std::uint8_t(b ? b_rows : 16);
    c.colsb[i] = std::uint16_t(a ? a_colsb : 64);
  }
  _tile_loadconfig(&c);
}

// Tile loads with a memory clobber (GCC 12's _tile_loadd has none, so the compiler could move
// the stores that built a B tile past the load that reads it). Tile numbers must be literals:
// GCC's tile intrinsics paste them into the instruction text. #undef'd at the end.
#define STRATA_TILE_LOAD(t, base, stride)                                                              \
  __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #t "|tileloadd\t%%tmm" #t ", [%0+%1*1]}" ::"r"(   \
                       static_cast<const void*>(base)),                                                \
                   "r"(static_cast<long>(stride))                                                      \
                   : "memory")
// Q8_0: block i of the 16 tokens at act0 (A tile ta) times block i's signed codes in the B
// scratch bs (B tile tb) into C tile tc.
#define STRATA_Q8_PRODUCT(ta, tb, tc, i)                          \
  STRATA_TILE_LOAD(ta, ts + (i) * q8_0_amx::tile_block_bytes, 32); \
  STRATA_TILE_LOAD(tb, bs + (i) * q8_0_amx::block_scratch, 64);   \
  _tile_zero(tc);                                                 \
  _tile_dpbssd(tc, ta, tb)
// K-quants, K step c of a block: A tile ta (activations 64c..64c+63 of the 16 tokens), then per
// pass p the B tile at bt + (c·P + p)·1 KiB into C tile tmm(8 − P + p).
#define STRATA_KQ_STEP2(c, ta, tb, tb1)                     \
  STRATA_TILE_LOAD(ta, act0 + 4 + 64 * (c), stride);        \
  STRATA_TILE_LOAD(tb, bt + ((c)*2) * 1024, 64);            \
  _tile_dpbssd(6, ta, tb);                                  \
  STRATA_TILE_LOAD(tb1, bt + ((c)*2 + 1) * 1024, 64);    \
  _tile_dpbssd(7, ta, tb1)
#define STRATA_KQ_STEP3(c, ta)                         \
  STRATA_TILE_LOAD(ta, act0 + 4 + 64 * (c), stride);   \
  STRATA_TILE_LOAD(2, bt + ((c)*3) * 1024, 64);        \
  _tile_dpbssd(5, ta, 2);                              \
  STRATA_TILE_LOAD(3, bt + ((c)*3 + 1) * 1024, 64);    \
  _tile_dpbssd(6, ta, 3);                              \
  STRATA_TILE_LOAD(4, bt + ((c)*3 + 2) * 1024, 64);    \
  _tile_dpbssd(7, ta, 4)

// A thread's growable, 64-byte aligned scratch (B tiles, per-token sums). No std containers:
// this header is compiled with AMX flags and must not emit weak copies of library templates
// (kernels/cpu/simd_kernels.hpp).
struct amx_scratch {
  std::uint8_t* p = nullptr;
  std::size_t n = 0;
  amx_scratch() = default;
  amx_scratch(const amx_scratch&) = delete;
  amx_scratch& operator=(const amx_scratch&) = delete;
  ~amx_scratch() {
    if (p) ::operator delete(p, std::align_val_t(64));
  }
  std::uint8_t* get(std::size_t bytes) {
    if (bytes > n) {
      if (p) ::operator delete(p, std::align_val_t(64));
      p = static_cast<std::uint8_t*>(::operator new(bytes, std::align_val_t(64)));
      n = bytes;
    }
    return p;
  }
};
thread_local amx_scratch amx_b_scratch, amx_t_scratch;

// The 16 (or fewer, at the matrix's end) outputs of packed group g for 16 tokens from t0.
inline void amx_store(const gemm_args& a, std::size_t g, std::size_t t0, const __m512* acc) noexcept {
  const std::size_t row0 = g * pack_rows;
  const std::size_t rows = a.n_rows - row0 < pack_rows ? a.n_rows - row0 : pack_rows;
  const __mmask16 m = __mmask16((1u << rows) - 1);
  for (std::size_t t = 0; t < amx_tile_tokens; ++t) _mm512_mask_storeu_ps(a.y + (t0 + t) * a.y_stride + row0, m, acc[t]);
}

// amx_store's outputs read back (the running sums between K segments; padding lanes read 0).
inline void amx_load(const gemm_args& a, std::size_t g, std::size_t t0, __m512* acc) noexcept {
  const std::size_t row0 = g * pack_rows;
  const std::size_t rows = a.n_rows - row0 < pack_rows ? a.n_rows - row0 : pack_rows;
  const __mmask16 m = __mmask16((1u << rows) - 1);
  for (std::size_t t = 0; t < amx_tile_tokens; ++t) acc[t] = _mm512_maskz_loadu_ps(m, a.y + (t0 + t) * a.y_stride + row0);
}

// Bytes × per-32-bit-lane digit (the same digit in both 16-bit halves of dd), products fitting
// a byte: unsigned bytes (Q4_K codes) and signed bytes (Q6_K codes).
inline __m512i mul_u8(__m512i v, __m512i dd) noexcept {
  const __m512i lo = _mm512_mullo_epi16(_mm512_and_si512(v, _mm512_set1_epi16(0x00FF)), dd);
  const __m512i hi = _mm512_mullo_epi16(_mm512_srli_epi16(v, 8), dd);
  return _mm512_or_si512(lo, _mm512_slli_epi16(hi, 8));
}
inline __m512i mul_s8(__m512i v, __m512i dd) noexcept {
  const __m512i lo = _mm512_mullo_epi16(_mm512_srai_epi16(_mm512_slli_epi16(v, 8), 8), dd);
  const __m512i hi = _mm512_mullo_epi16(_mm512_srai_epi16(v, 8), dd);
  return _mm512_or_si512(_mm512_and_si512(lo, _mm512_set1_epi16(0x00FF)), _mm512_slli_epi16(hi, 8));
}
inline __m512i pair16(__m512i d) noexcept {  // int32 lanes −32768..32767 → (d, d) int16 pairs
  return _mm512_or_si512(_mm512_and_si512(d, _mm512_set1_epi32(0xFFFF)), _mm512_slli_epi32(d, 16));
}

// ---- Q8_0: one 32-element block per tile product (each block has its own scale) ----------
//
// The float part is the cost (a tile product is 16 cycles; its 256 outputs need 16 rows of
// convert, scale product and FMA), so everything else is taken out of the per-block epilogue:
// a group batch's weights are copied once per call into a scratch of signed codes (w, not
// w + 128: tdpbssd then gives Σ w·a with no −128·Σa correction) with each block's 16 row
// scales as floats beside them, and each token tile's activation scales are converted once per
// batch into 16 floats per block (one broadcast operand each). Per 16 outputs of a block: one
// convert (C row from memory), one multiply (d_w · broadcast d_a), one FMA, the reference's
// fma(float(Σ w·a), d_w·d_a, acc).

struct q8_0_amx {
  using vnni = q8_0_kernel;
  using layout = packed::q8_0;
  // Per block in the B scratch: the signed codes as the B tile (8 rows × 64 bytes), then d_w[16].
  static constexpr std::size_t block_scratch = 512 + 64;

  static void prepare_block(const std::uint8_t* gb, std::uint8_t* out) noexcept {
    const __m512i k80 = _mm512_set1_epi8(char(0x80));
    for (int s = 0; s < 8; ++s)
      _mm512_store_si512(out + 64 * s, _mm512_xor_si512(_mm512_loadu_si512(gb + 32 + 64 * s), k80));
    _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb))));
  }

  // Per block in a token tile's scratch: the 16 rows' codes back to back (the A tile, 16 × 32
  // bytes, no row crossing a cache line), then d_a[16] in token order.
  static constexpr std::size_t tile_block_bytes = 512 + 64;

  static void prepare_tile(const std::uint8_t* act0, std::size_t stride, std::size_t nb, std::uint8_t* out) noexcept {
    const __m512i rows = _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                                            _mm512_set1_epi32(std::int32_t(stride)));
    for (std::size_t b = 0; b < nb; ++b, out += tile_block_bytes) {
      for (std::size_t t = 0; t < amx_tile_tokens; ++t)
        _mm256_store_si256(reinterpret_cast<__m256i*>(out + 32 * t),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act0 + t * stride + 34 * b + 2)));
      const __m512i h = _mm512_i32gather_epi32(rows, act0 + 34 * b, 1);  // d (fp16) in each low half
      _mm512_store_ps(out + 512, _mm512_cvtph_ps(_mm512_cvtepi32_epi16(h)));
    }
  }

  // acc[t] = fma(float(C[t]), d_w · d_a[t], acc[t]) for one block's C tile.
  static void finish(const std::int32_t* c, const std::uint8_t* bs, const std::uint8_t* ts, __m512* acc) noexcept {
    const __m512 dw = _mm512_load_ps(bs + 512);
    const float* da = reinterpret_cast<const float*>(ts + 512);
    for (std::size_t t = 0; t < amx_tile_tokens; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_load_si512(c + 16 * t)), _mm512_mul_ps(dw, _mm512_set1_ps(da[t])), acc[t]);
  }

  // Blocks per K segment: a token tile's segment of A scratch and one group's of B scratch
  // (18 KiB each) stay in L1 together while the batch's groups pass; each group's 16 running
  // sums wait in memory between segments (the FMAs stay in block order).
  static constexpr std::size_t seg_blocks = 32;

  static void run(const gemm_args& a, std::size_t n_tiles) noexcept {
    amx_configure(32, 2, 8);  // A: 16 × 32 bytes; B: 8 rows (32 K values) × 64 bytes; C: tmm4-7
    const std::size_t nb = a.k / layout::block_elems, bb = layout::group_block_bytes;
    const std::size_t per_group = nb * block_scratch;
    // Batches of groups whose B scratch fits 256 KiB (in L2), as even as the call allows.
    const std::size_t max_batch = per_group >= (256u << 10) ? 1 : (256u << 10) / per_group;
    const std::size_t n_groups = a.group_end - a.group_begin, n_batches = (n_groups + max_batch - 1) / max_batch;
    if (n_groups == 0) return;
    const std::size_t batch = (n_groups + n_batches - 1) / n_batches;
    std::uint8_t* bt = amx_b_scratch.get(batch * per_group);
    std::uint8_t* ts = amx_t_scratch.get(seg_blocks * tile_block_bytes + batch * amx_tile_tokens * sizeof(__m512));
    __m512* sums = reinterpret_cast<__m512*>(ts + seg_blocks * tile_block_bytes);
    alignas(64) std::int32_t c[4][256];
    for (std::size_t g0 = a.group_begin; g0 < a.group_end; g0 += batch) {
      const std::size_t g1 = a.group_end - g0 < batch ? a.group_end : g0 + batch;
      for (std::size_t g = g0; g < g1; ++g)
        for (std::size_t b = 0; b < nb; ++b)
          prepare_block(a.w + g * a.group_bytes + b * bb, bt + (g - g0) * per_group + b * block_scratch);
      // Token tiles outer, K segments, then the batch's groups: a tile's segment of activations
      // stays in L1 while the batch's B scratch (in L2) passes.
      for (std::size_t tile = 0; tile < n_tiles; ++tile) {
        const std::size_t t0 = tile * amx_tile_tokens;
        for (std::size_t s0 = 0; s0 < nb; s0 += seg_blocks) {
          const std::size_t s1 = nb - s0 < seg_blocks ? nb : s0 + seg_blocks;
          prepare_tile(a.act + t0 * a.act_stride + 34 * s0, a.act_stride, s1 - s0, ts);
          for (std::size_t g = g0; g < g1; ++g) {
            const std::uint8_t* bs = bt + (g - g0) * per_group + s0 * block_scratch;
            __m512* gs = sums + (g - g0) * amx_tile_tokens;
            __m512 acc[amx_tile_tokens];
            for (std::size_t t = 0; t < amx_tile_tokens; ++t) acc[t] = s0 ? gs[t] : _mm512_setzero_ps();
            const std::size_t n = s1 - s0;
            // Pairs of blocks, C tiles 4-5 and 6-7 in turn: a pair's products are issued before
            // the previous pair's epilogue, which then overlaps them.
            std::size_t b = 0, prev = 0;
            bool pending = false, odd = false;
            for (; b + 2 <= n; b += 2, odd = !odd) {
              if (!odd) {
                STRATA_Q8_PRODUCT(0, 2, 4, b);
                STRATA_Q8_PRODUCT(1, 3, 5, b + 1);
              } else {
                STRATA_Q8_PRODUCT(0, 2, 6, b);
                STRATA_Q8_PRODUCT(1, 3, 7, b + 1);
              }
              if (pending)
                for (std::size_t i = 0; i < 2; ++i)
                  finish(c[2 * !odd + i], bs + (prev + i) * block_scratch, ts + (prev + i) * tile_block_bytes, acc);
              if (!odd) {
                _tile_stored(4, c[0], 64);
                _tile_stored(5, c[1], 64);
              } else {
                _tile_stored(6, c[2], 64);
                _tile_stored(7, c[3], 64);
              }
              pending = true, prev = b;
            }
            if (pending)
              for (std::size_t i = 0; i < 2; ++i)
                finish(c[odd ? i : 2 + i],  // the last pair's buffers
                        bs + (prev + i) * block_scratch, ts + (prev + i) * tile_block_bytes, acc);
            if (b < n) {
              STRATA_Q8_PRODUCT(0, 2, 4, b);
              _tile_stored(4, c[0], 64);
              finish(c[0], bs + b * block_scratch, ts + b * tile_block_bytes, acc);
            }
            if (s1 == nb)
              amx_store(a, g, t0, acc);
            else
              for (std::size_t t = 0; t < amx_tile_tokens; ++t) gs[t] = acc[t];
          }
        }
      }
    }
  }
};

// ---- K-quants: 256-element blocks, 4 tile products of 64 per pass ---------------------------

// Q8_K activation block b of a row: float d at 0, int8 qs[256] at 4, int16 bsums[16] at 260.
inline constexpr std::size_t q8k_bytes = sizeof(quant::q8_k::block);

// One block's tile products for the 16 tokens at act0 into the P C tiles tmm(8 − P)..tmm7,
// stored to c[0..P): the A tile alternates between tmm0 and tmm1 by K step; with P = 2 the B
// tiles are double-buffered too (tmm2-3, tmm4-5).
template <int P>
inline void kq_block(const std::uint8_t* act0, std::size_t stride, const std::uint8_t* bt, std::int32_t (*c)[256]) noexcept {
  if constexpr (P == 2) {
    _tile_zero(6);
    _tile_zero(7);
    STRATA_KQ_STEP2(0, 0, 2, 3);
    STRATA_KQ_STEP2(1, 1, 4, 5);
    STRATA_KQ_STEP2(2, 0, 2, 3);
    STRATA_KQ_STEP2(3, 1, 4, 5);
    _tile_stored(6, c[0], 64);
    _tile_stored(7, c[1], 64);
  } else {
    _tile_zero(5);
    _tile_zero(6);
    _tile_zero(7);
    STRATA_KQ_STEP3(0, 0);
    STRATA_KQ_STEP3(1, 1);
    STRATA_KQ_STEP3(2, 0);
    STRATA_KQ_STEP3(3, 1);
    _tile_stored(5, c[0], 64);
    _tile_stored(6, c[1], 64);
    _tile_stored(7, c[2], 64);
  }
}

// Q4_K's block for two 16-token tiles at once (act0, act1): A tiles tmm0/tmm1, B tiles tmm2/tmm3
// (passes 0 and 1), C tiles tmm4-5 (first tile's passes) and tmm6-7 (second's). Four independent
// accumulation chains instead of two: one tile's two chains of 4 dependent products left the
// tile unit waiting on their latency.
inline void kq_block2_pair(const std::uint8_t* act0, const std::uint8_t* act1, std::size_t stride, const std::uint8_t* bt,
                           std::int32_t (*c0)[256], std::int32_t (*c1)[256]) noexcept {
  _tile_zero(4);
  _tile_zero(5);
  _tile_zero(6);
  _tile_zero(7);
  for (int c = 0; c < 4; ++c) {
    STRATA_TILE_LOAD(0, act0 + 4 + 64 * c, stride);
    STRATA_TILE_LOAD(1, act1 + 4 + 64 * c, stride);
    STRATA_TILE_LOAD(2, bt + (c * 2) * 1024, 64);
    STRATA_TILE_LOAD(3, bt + (c * 2 + 1) * 1024, 64);
    _tile_dpbssd(4, 0, 2);
    _tile_dpbssd(5, 0, 3);
    _tile_dpbssd(6, 1, 2);
    _tile_dpbssd(7, 1, 3);
  }
  _tile_stored(4, c0[0], 64);
  _tile_stored(5, c0[1], 64);
  _tile_stored(6, c1[0], 64);
  _tile_stored(7, c1[1], 64);
}

struct q4_k_amx {
  using vnni = q4_k_kernel;
  using layout = packed::q4_k;
  static constexpr int passes = 2;
  // Per block in the B scratch: 4 steps × 2 passes of 1 KiB, then the mins as int16 pairs
  // (m_2p, m_2p+1) per row for p = 0..3 (4 × 64 bytes).
  static constexpr std::size_t block_scratch = 8 * 1024 + 4 * 64;
  // Per token and block in the token scratch: the four words (S_4p + S_4p+1, S_4p+2 + S_4p+3)
  // of bsums pair sums that vpmaddwd takes against the min pairs.
  static constexpr std::size_t token_block_bytes = 16;

  static void prepare_block(const std::uint8_t* gb, std::uint8_t* out) noexcept {
    const __m512i u0 = _mm512_loadu_si512(gb + layout::scales_offset);
    const __m512i u1 = _mm512_loadu_si512(gb + layout::scales_offset + 64);
    const __m512i u2 = _mm512_loadu_si512(gb + layout::scales_offset + 128);
    const __m512i k6 = _mm512_set1_epi8(0x3F), k4 = _mm512_set1_epi8(0x0F), k2 = _mm512_set1_epi8(0x03);
    // Lane bytes 0-3: sc_0..3 / m_0..3 (lo) and sc_4..7 / m_4..7 (hi), as in q4_k_kernel.
    const __m512i sc_lo = _mm512_and_si512(u0, k6), m_lo = _mm512_and_si512(u1, k6);
    const __m512i sc_hi = _mm512_or_si512(_mm512_and_si512(u2, k4), _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), k2), 4));
    const __m512i m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k4),
                                         _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k2), 4));
    const __m512i ff = _mm512_set1_epi32(0xFF);
    const auto byte_of = [&](__m512i v, int k) { return _mm512_and_si512(_mm512_srlv_epi32(v, _mm512_set1_epi32(8 * k)), ff); };
    for (int c = 0; c < 4; ++c) {
      const __m512i sc = c < 2 ? sc_lo : sc_hi;
      const __m512i s0 = byte_of(sc, (2 * c) % 4), s1 = byte_of(sc, (2 * c + 1) % 4);
      const __m512i d00 = pair16(_mm512_and_si512(s0, _mm512_set1_epi32(7))), d01 = pair16(_mm512_srli_epi32(s0, 3));
      const __m512i d10 = pair16(_mm512_and_si512(s1, _mm512_set1_epi32(7))), d11 = pair16(_mm512_srli_epi32(s1, 3));
      std::uint8_t* b0 = out + (c * 2) * 1024;
      std::uint8_t* b1 = b0 + 1024;
      for (int s = 0; s < 8; ++s) {
        const __m512i v = _mm512_loadu_si512(gb + layout::qs_offset + (8 * c + s) * 64);
        const __m512i lo = _mm512_and_si512(v, k4), hi = _mm512_and_si512(_mm512_srli_epi16(v, 4), k4);
        _mm512_store_si512(b0 + 64 * s, mul_u8(lo, d00));        // sub-block 2c, digit 0
        _mm512_store_si512(b0 + 64 * (8 + s), mul_u8(hi, d10));  // sub-block 2c + 1, digit 0
        _mm512_store_si512(b1 + 64 * s, mul_u8(lo, d01));
        _mm512_store_si512(b1 + 64 * (8 + s), mul_u8(hi, d11));
      }
    }
    std::uint8_t* mins = out + 8 * 1024;
    for (int p = 0; p < 4; ++p) {
      const __m512i m = p < 2 ? m_lo : m_hi;
      const __m512i pr = _mm512_or_si512(byte_of(m, (2 * p) % 4), _mm512_slli_epi32(byte_of(m, (2 * p + 1) % 4), 16));
      _mm512_store_si512(mins + 64 * p, pr);
    }
  }

  // S_j = bsums_2j + bsums_2j+1 (|S_j| ≤ 2·16·128, an int16) for j = 0..7, in order.
  static void prepare_token(const std::uint8_t* act, std::size_t nb, std::uint8_t* out) noexcept {
    for (std::size_t b = 0; b < nb; ++b) {
      const __m256i bs = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(act + b * q8k_bytes + 260));
      const __m256i s = _mm256_madd_epi16(bs, _mm256_set1_epi16(1));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + b * token_block_bytes),
                       _mm_packs_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1)));
    }
  }

  static void finish(const std::int32_t (*c)[256], const std::uint8_t* gb, const std::uint8_t* bt,
                     const std::uint8_t* act0, std::size_t stride, const std::uint8_t* tok, std::size_t tok_stride,
                     __m512* acc) noexcept {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb)));
    const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb + 32)));
    const std::uint8_t* mins = bt + 8 * 1024;
    const __m512i m0 = _mm512_load_si512(mins), m1 = _mm512_load_si512(mins + 64), m2 = _mm512_load_si512(mins + 128),
                  m3 = _mm512_load_si512(mins + 192);
    for (std::size_t t = 0; t < amx_tile_tokens; ++t) {
      const __m512i isum = _mm512_add_epi32(_mm512_load_si512(c[0] + 16 * t), _mm512_slli_epi32(_mm512_load_si512(c[1] + 16 * t), 3));
      const std::uint8_t* w = tok + t * tok_stride;
      __m512i msum = _mm512_madd_epi16(m0, _mm512_set1_epi32(std::int32_t(load_u32(w))));
      msum = _mm512_add_epi32(msum, _mm512_madd_epi16(m1, _mm512_set1_epi32(std::int32_t(load_u32(w + 4)))));
      msum = _mm512_add_epi32(msum, _mm512_madd_epi16(m2, _mm512_set1_epi32(std::int32_t(load_u32(w + 8)))));
      msum = _mm512_add_epi32(msum, _mm512_madd_epi16(m3, _mm512_set1_epi32(std::int32_t(load_u32(w + 12)))));
      float da;
      std::memcpy(&da, act0 + t * stride, 4);
      const __m512 vda = _mm512_set1_ps(da);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(d, vda), acc[t]);
      acc[t] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum), _mm512_mul_ps(dmin, vda), acc[t]);
    }
  }
};

struct q6_k_amx {
  using vnni = q6_k_kernel;
  using layout = packed::q6_k;
  static constexpr int passes = 3;
  static constexpr std::size_t block_scratch = 12 * 1024;
  static constexpr std::size_t token_block_bytes = 0;

  static void prepare_block(const std::uint8_t* gb, std::uint8_t* out) noexcept {
    // Balanced base-7 digits of every sub-block scale (per row lane), as (d, d) int16 pairs:
    // d2 = round(sc/49), r = sc − 49·d2 (|r| ≤ 24), d1 = round(r/7), d0 = r − 7·d1. No quotient
    // is within 1/98 of a rounding tie, so float rounding gives the exact digits.
    __m512i dg[16][3];
    for (int j = 0; j < 16; ++j) {
      const __m512i sc = _mm512_cvtepi8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gb + layout::scales_offset + 16 * j)));
      const __m512i d2 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(sc), _mm512_set1_ps(1.0f / 49.0f)));
      const __m512i r = _mm512_sub_epi32(sc, _mm512_mullo_epi32(d2, _mm512_set1_epi32(49)));
      const __m512i d1 = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_cvtepi32_ps(r), _mm512_set1_ps(1.0f / 7.0f)));
      const __m512i d0 = _mm512_sub_epi32(r, _mm512_mullo_epi32(d1, _mm512_set1_epi32(7)));
      dg[j][0] = pair16(d0);
      dg[j][1] = pair16(d1);
      dg[j][2] = pair16(d2);
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F), hi2 = _mm512_set1_epi8(0x30), k32 = _mm512_set1_epi8(32);
    for (int h = 0; h < 2; ++h)
      for (int s = 0; s < 8; ++s) {
        const __m512i qla = _mm512_loadu_si512(gb + layout::ql_offset + (16 * h + s) * 64);
        const __m512i qlb = _mm512_loadu_si512(gb + layout::ql_offset + (16 * h + 8 + s) * 64);
        const __m512i qh = _mm512_loadu_si512(gb + layout::qh_offset + (8 * h + s) * 64);
        const __m512i code[4] = {
            _mm512_or_si512(_mm512_and_si512(qla, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 4), hi2)),
            _mm512_or_si512(_mm512_and_si512(qlb, low4), _mm512_and_si512(_mm512_slli_epi16(qh, 2), hi2)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qla, 4), low4), _mm512_and_si512(qh, hi2)),
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(qlb, 4), low4), _mm512_and_si512(_mm512_srli_epi16(qh, 2), hi2))};
        for (int k = 0; k < 4; ++k) {
          // Quarter k, word s: elements 128h + 32k + 4s.., K step 2h + k/2, row 8·(k%2) + s,
          // sub-block 8h + 2k + s/4.
          const __m512i q = _mm512_sub_epi8(code[k], k32);
          const int step = 2 * h + k / 2, row = 8 * (k % 2) + s, j = 8 * h + 2 * k + s / 4;
          for (int p = 0; p < 3; ++p) _mm512_store_si512(out + (step * 3 + p) * 1024 + 64 * row, mul_s8(q, dg[j][p]));
        }
      }
  }

  static void prepare_token(const std::uint8_t*, std::size_t, std::uint8_t*) noexcept {}

  static void finish(const std::int32_t (*c)[256], const std::uint8_t* gb, const std::uint8_t*, const std::uint8_t* act0,
                     std::size_t stride, const std::uint8_t*, std::size_t, __m512* acc) noexcept {
    const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(gb)));
    for (std::size_t t = 0; t < amx_tile_tokens; ++t) {
      const __m512i c0 = _mm512_load_si512(c[0] + 16 * t), c1 = _mm512_load_si512(c[1] + 16 * t),
                    c2 = _mm512_load_si512(c[2] + 16 * t);
      __m512i x = _mm512_sub_epi32(_mm512_slli_epi32(c2, 3), c2);        // 7·C2
      x = _mm512_add_epi32(x, c1);                                        // C1 + 7·C2
      x = _mm512_add_epi32(_mm512_sub_epi32(_mm512_slli_epi32(x, 3), x), c0);  // C0 + 7·(C1 + 7·C2)
      float da;
      std::memcpy(&da, act0 + t * stride, 4);
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(x), _mm512_mul_ps(d, _mm512_set1_ps(da)), acc[t]);
    }
  }
};

// Groups are taken a batch at a time (their B tiles within 256 KiB, in L2), and every token
// tile (pair) passes over the whole batch, so a tile's activations are read from memory once
// per batch rather than once per group. K is cut into segments of `seg` blocks so that a batch
// holds many groups even at large K (Q4_K's digit tiles are 8.25 KiB a block: at K = 4096 a
// whole-K batch was one group, and every group read all the call's activations again); the
// running sums wait in y between segments (stored and read back as floats: the same FMAs, in
// block order).
template <class K>
inline void kq_run(const gemm_args& a, std::size_t n_tiles) noexcept {
  constexpr int P = K::passes;
  constexpr std::size_t budget = 256u << 10;
  amx_configure(64, P == 2 ? 4 : 3, 16);
  const std::size_t nb = a.k / K::layout::block_elems, bb = K::layout::group_block_bytes;
  const std::size_t n_groups = a.group_end - a.group_begin;
  if (n_groups == 0) return;
  // The call's groups in one batch if segments of 2+ blocks allow it, else the longest segments.
  std::size_t seg = budget / (n_groups * K::block_scratch);
  seg = seg < 2 ? 2 : seg;
  seg = seg > nb ? nb : seg;
  const std::size_t per_group = seg * K::block_scratch;
  const std::size_t max_batch = per_group >= budget ? 1 : budget / per_group;
  const std::size_t n_batches = (n_groups + max_batch - 1) / max_batch, batch = (n_groups + n_batches - 1) / n_batches;
  std::uint8_t* bt = amx_b_scratch.get(batch * per_group);
  const std::size_t n_tok = n_tiles * amx_tile_tokens, tok_stride = nb * K::token_block_bytes;
  std::uint8_t* tok = K::token_block_bytes ? amx_t_scratch.get(n_tok * tok_stride) : nullptr;
  if constexpr (K::token_block_bytes > 0)
    for (std::size_t t = 0; t < n_tok; ++t) K::prepare_token(a.act + t * a.act_stride, nb, tok + t * tok_stride);
  alignas(64) std::int32_t c[3][256], c1[3][256];
  const auto tok_at = [&](std::size_t t0, std::size_t b) {
    return tok ? tok + t0 * tok_stride + b * K::token_block_bytes : nullptr;
  };
  for (std::size_t g0 = a.group_begin; g0 < a.group_end; g0 += batch) {
    const std::size_t g1 = a.group_end - g0 < batch ? a.group_end : g0 + batch;
    for (std::size_t s0 = 0; s0 < nb; s0 += seg) {
      const std::size_t s1 = nb - s0 < seg ? nb : s0 + seg;
      for (std::size_t g = g0; g < g1; ++g)
        for (std::size_t b = s0; b < s1; ++b)
          K::prepare_block(a.w + g * a.group_bytes + b * bb, bt + (g - g0) * per_group + (b - s0) * K::block_scratch);
      std::size_t tile = 0;
      if constexpr (P == 2)
        for (; tile + 2 <= n_tiles; tile += 2)  // two tiles at a time (kq_block2_pair)
          for (std::size_t g = g0; g < g1; ++g) {
            const std::uint8_t* gw = a.w + g * a.group_bytes;
            const std::uint8_t* btg = bt + (g - g0) * per_group;
            const std::size_t t0 = tile * amx_tile_tokens, t1 = t0 + amx_tile_tokens;
            const std::uint8_t *act0 = a.act + t0 * a.act_stride, *act1 = a.act + t1 * a.act_stride;
            __m512 acc[2 * amx_tile_tokens];
            if (s0) {
              amx_load(a, g, t0, acc);
              amx_load(a, g, t1, acc + amx_tile_tokens);
            } else {
              for (auto& v : acc) v = _mm512_setzero_ps();
            }
            for (std::size_t b = s0; b < s1; ++b) {
              const std::uint8_t* bb_t = btg + (b - s0) * K::block_scratch;
              kq_block2_pair(act0 + b * q8k_bytes, act1 + b * q8k_bytes, a.act_stride, bb_t, c, c1);
              K::finish(c, gw + b * bb, bb_t, act0 + b * q8k_bytes, a.act_stride, tok_at(t0, b), tok_stride, acc);
              K::finish(c1, gw + b * bb, bb_t, act1 + b * q8k_bytes, a.act_stride, tok_at(t1, b), tok_stride,
                        acc + amx_tile_tokens);
            }
            amx_store(a, g, t0, acc);
            amx_store(a, g, t1, acc + amx_tile_tokens);
          }
      for (; tile < n_tiles; ++tile)
        for (std::size_t g = g0; g < g1; ++g) {
          const std::uint8_t* gw = a.w + g * a.group_bytes;
          const std::uint8_t* btg = bt + (g - g0) * per_group;
          const std::size_t t0 = tile * amx_tile_tokens;
          const std::uint8_t* act0 = a.act + t0 * a.act_stride;
          __m512 acc[amx_tile_tokens];
          if (s0)
            amx_load(a, g, t0, acc);
          else
            for (auto& v : acc) v = _mm512_setzero_ps();
          for (std::size_t b = s0; b < s1; ++b) {
            const std::uint8_t* bb_t = btg + (b - s0) * K::block_scratch;
            kq_block<P>(act0 + b * q8k_bytes, a.act_stride, bb_t, c);
            K::finish(c, gw + b * bb, bb_t, act0 + b * q8k_bytes, a.act_stride, tok_at(t0, b), tok_stride, acc);
          }
          amx_store(a, g, t0, acc);
        }
    }
  }
}

template <class K>
struct amx_runner {
  static void run(const gemm_args& a, std::size_t n_tiles) noexcept { kq_run<K>(a, n_tiles); }
};
template <>
struct amx_runner<q8_0_amx> {
  static void run(const gemm_args& a, std::size_t n_tiles) noexcept { q8_0_amx::run(a, n_tiles); }
};

// Whole 16-token tiles on AMX, the rest (and small batches) on the VNNI kernel.
template <class K>
inline void amx_gemm(const gemm_args& a) noexcept {
  using V = v512<true>;
  const std::size_t n_tiles = a.n_tok >= amx_min_tokens ? a.n_tok / amx_tile_tokens : 0;
  if (n_tiles) {
    amx_runner<K>::run(a, n_tiles);
    _tile_release();  // back to the init state: a context switch then saves no tile data
  }
  const std::size_t done = n_tiles * amx_tile_tokens;
  if (done == a.n_tok) return;
  gemm_args rest = a;
  rest.act = a.act + done * a.act_stride;
  rest.y = a.y + done * a.y_stride;
  rest.n_tok = a.n_tok - done;
  packed_gemm<V, typename K::vnni>(rest);
}

template <class Fmt>
struct amx_for {
  using type = void;
};
template <>
struct amx_for<quant::q8_0> {
  using type = q8_0_amx;
};
template <>
struct amx_for<quant::q4_k> {
  using type = q4_k_amx;
};
template <>
struct amx_for<quant::q6_k> {
  using type = q6_k_amx;
};

// The amx tier's overlay: the AMX gemm of every format that has one, nothing else (select.cpp
// lays it over avx512_vnni, whose kernels every other entry keeps).
template <class... Fmt>
constexpr kernel_table amx_overlay(quant::type_list<Fmt...>) {
  kernel_table t{};
  const auto entry = [](auto fmt) {
    using F = decltype(fmt);
    format_kernels k{};
    k.type = F::gguf_type;
    if constexpr (!std::is_void_v<typename amx_for<F>::type>) k.gemm = &amx_gemm<typename amx_for<F>::type>;
    return k;
  };
  ((t[std::size_t(Fmt::gguf_type)] = entry(Fmt{})), ...);
  return t;
}

}  // namespace
}  // namespace strata::kernels::cpu::x86

#undef STRATA_KQ_STEP3
#undef STRATA_KQ_STEP2
#undef STRATA_Q8_PRODUCT
#undef STRATA_TILE_LOAD
