// One unit of CPU attention work: a tile of queries that read the same KV head of the same
// sequence (the GQA heads of one or more consecutive tokens), with every cached row it may read
// already located (plain pointers, so SIMD tiers never touch the cache's bookkeeping), and the
// scalar reference that defines the arithmetic.
//
// The math per query (online softmax over blocks of 16 keys at absolute positions 16b..16b+15,
// so a query's result never depends on which other queries share its tile):
//   for each block b meeting [first, last]:  s_j = scale·⟨q, k_j⟩ for the keys j in range
//     m' = max(m, max_j s_j);  α = exp(m − m');  o ← α·o;  l ← α·l
//     p_j = exp(s_j − m');  l += Σ p_j;  o += Σ p_j·v_j        (keys in increasing order)
//   out = o / l
// Keys at positions ≥ recent_from that the f16 ring still holds are read from the ring; the
// others from the cache rows (f32, f16, q8_0 or TurboQuant). TurboQuant keys are scored
// against the rotated query (⟨Rq, ỹ⟩ = ⟨q, x̃⟩); TurboQuant values are summed in the rotated
// domain into out_rot, which the caller rotates back (Rᵀ) and adds to out.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

#include "strata/core/fp16.hpp"
#include "strata/quant/q8_0.hpp"
#include "strata/turboquant/format.hpp"

namespace strata::kernels::cpu {

inline constexpr std::uint32_t attention_key_block = 16;    // keys per online-softmax block
inline constexpr std::uint32_t attention_max_queries = 32;  // queries per tile

enum class kv_row_kind : std::uint8_t { f32, f16, q8_0, turboquant };

// Where one side (K or V) of a tile reads its rows. Arrays are indexed by position − key_lo.
struct attention_side {
  kv_row_kind kind = kv_row_kind::f16;
  const std::uint8_t* const* rows = nullptr;  // encoded head vector of every position
  std::size_t row_bytes = 0;                  // bytes of one encoded head vector
  const fp16* const* ring = nullptr;          // f16 ring copy per position (null entry: not held); null: no ring
  const turboquant::format* tq = nullptr;     // kind == turboquant
  // Adds w·ỹ (the rotated-domain value of a TurboQuant row) to acc (turboquant::fused_kernels).
  void (*tq_accumulate)(const turboquant::format&, float w, const std::uint8_t* row, float* acc) noexcept = nullptr;
};

struct attention_tile {
  std::uint32_t head_dim = 0;
  std::uint32_t n_q = 0;                       // ≤ attention_max_queries
  float scale = 1.0f;
  std::uint32_t key_lo = 0, key_hi = 0;        // positions covered by the side arrays (inclusive)
  const float* q[attention_max_queries];       // head_dim floats each
  const float* q_rot[attention_max_queries];   // R·q when K is TurboQuant, else unused
  std::uint32_t first[attention_max_queries];  // keys [first, last] of each query
  std::uint32_t last[attention_max_queries];
  std::uint32_t recent_from[attention_max_queries];  // ring rows serve positions ≥ this
  float* out[attention_max_queries];                 // head_dim floats each
  float* out_rot[attention_max_queries];             // TurboQuant V: rotated part (else unused)
  bool used_rot[attention_max_queries];              // set by the kernel: out_rot holds a value
  attention_side k, v;
  float* scratch = nullptr;  // attention_scratch_floats(head_dim) floats, 64-byte aligned
};

using attention_fn = void (*)(attention_tile&) noexcept;

// Scratch one tile needs: decoded K and V blocks (cache rows and ring rows), the K blocks
// transposed, a row, and per-query state (o_rot).
inline constexpr std::size_t attention_scratch_floats(std::size_t head_dim) noexcept {
  const std::size_t d = (head_dim + 15) / 16 * 16;
  return (6 * attention_key_block + 1) * d + std::size_t(attention_max_queries) * d;
}

namespace detail {

// True when query i reads position j from the ring.
inline bool reads_ring(const attention_side& s, const attention_tile& t, std::uint32_t i, std::uint32_t j) noexcept {
  return s.ring && j >= t.recent_from[i] && s.ring[j - t.key_lo];
}

// Decodes the cache row of position j into out[head_dim] (TurboQuant: the rotated domain).
inline void decode_row(const attention_side& s, const attention_tile& t, std::uint32_t j, float* out) noexcept {
  const std::uint8_t* r = s.rows[j - t.key_lo];
  const std::uint32_t d = t.head_dim;
  switch (s.kind) {
    case kv_row_kind::f32: std::memcpy(out, r, d * sizeof(float)); break;
    case kv_row_kind::f16:
      for (std::uint32_t c = 0; c < d; ++c) out[c] = to_float(reinterpret_cast<const fp16*>(r)[c]);
      break;
    case kv_row_kind::q8_0: {
      const auto* b = reinterpret_cast<const quant::q8_0::block*>(r);
      for (std::uint32_t i = 0; i < d / 32; ++i) quant::q8_0::dequant(b[i], std::span<float, 32>(out + 32 * i, 32));
      break;
    }
    case kv_row_kind::turboquant:
      std::fill(out, out + d, 0.0f);
      s.tq_accumulate(*s.tq, 1.0f, r, out);
      break;
  }
}

}  // namespace detail

// The scalar reference (and the scalar tier's kernel).
inline void attention_tile_reference(attention_tile& t) noexcept {
  const std::uint32_t d = t.head_dim;
  float* kbuf = t.scratch;
  float* vbuf = kbuf + d;
  for (std::uint32_t i = 0; i < t.n_q; ++i) {
    float* o = t.out[i];
    float* orot = t.out_rot[i];
    const bool tq_v = t.v.kind == kv_row_kind::turboquant;
    std::fill(o, o + d, 0.0f);
    if (tq_v) std::fill(orot, orot + d, 0.0f);
    bool any_rot = false;
    float m = -std::numeric_limits<float>::infinity(), l = 0.0f;
    float s[attention_key_block];
    for (std::uint32_t b = t.first[i] / attention_key_block; b <= t.last[i] / attention_key_block; ++b) {
      const std::uint32_t j0 = std::max(t.first[i], b * attention_key_block);
      const std::uint32_t j1 = std::min(t.last[i], b * attention_key_block + attention_key_block - 1);
      float bm = -std::numeric_limits<float>::infinity();
      for (std::uint32_t j = j0; j <= j1; ++j) {
        const bool ring = detail::reads_ring(t.k, t, i, j);
        if (ring)
          for (std::uint32_t c = 0; c < d; ++c) kbuf[c] = to_float(t.k.ring[j - t.key_lo][c]);
        else
          detail::decode_row(t.k, t, j, kbuf);
        const float* qv = !ring && t.k.kind == kv_row_kind::turboquant ? t.q_rot[i] : t.q[i];
        float dot = 0.0f;
        for (std::uint32_t c = 0; c < d; ++c) dot += qv[c] * kbuf[c];
        s[j - j0] = dot * t.scale;
        bm = std::max(bm, s[j - j0]);
      }
      const float mn = std::max(m, bm);
      if (mn != m) {
        const float alpha = std::exp(m - mn);
        for (std::uint32_t c = 0; c < d; ++c) o[c] *= alpha;
        if (tq_v)
          for (std::uint32_t c = 0; c < d; ++c) orot[c] *= alpha;
        l *= alpha;
        m = mn;
      }
      for (std::uint32_t j = j0; j <= j1; ++j) {
        const float p = std::exp(s[j - j0] - m);
        l += p;
        const bool ring = detail::reads_ring(t.v, t, i, j);
        if (ring) {
          for (std::uint32_t c = 0; c < d; ++c) o[c] += p * to_float(t.v.ring[j - t.key_lo][c]);
        } else {
          detail::decode_row(t.v, t, j, vbuf);
          float* dst = tq_v ? orot : o;
          for (std::uint32_t c = 0; c < d; ++c) dst[c] += p * vbuf[c];
          any_rot |= tq_v;
        }
      }
    }
    const float inv = 1.0f / l;
    for (std::uint32_t c = 0; c < d; ++c) o[c] *= inv;
    if (any_rot)
      for (std::uint32_t c = 0; c < d; ++c) orot[c] *= inv;
    t.used_rot[i] = any_rot;
  }
}

}  // namespace strata::kernels::cpu
