// Shared prelude of every Strata compute shader (prepended after the generated #defines).
// Weights are bound at binding 0 and read through three aliases of the same buffer, so each
// format reads its fields at their natural width (8/16/32 bits) at any byte offset that
// width allows. Activations are f32.
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_int8 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int16 : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_arithmetic : require
#extension GL_EXT_control_flow_attributes : require
#if defined(NEED_DOT4) && defined(HAS_DOT4)
#extension GL_EXT_spirv_intrinsics : require
#endif
#ifdef COOPMAT
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif

// v as f16, rounded as copy_rows TO_F16 rounds (packHalf2x16): the f16 copies kernels write beside
// their f32 output must equal copy_rows' bit for bit.
float16_t f16_rounded(float v) { return unpackFloat2x16(packHalf2x16(vec2(v, 0.0))).x; }

// A warp hands a tile to itself through shared memory: what its lanes stored is what its
// fragment loads read next. (A barrier over shared memory alone, controlBarrier with shared
// semantics, measured the same on the H200: the full barrier does not wait for loads in flight.)
void warp_sync_shared() {
  subgroupMemoryBarrierShared();
  subgroupBarrier();
}

// One halving exchange of the decode attention's LANES forms (attention_dec, attention_qdec):
// of the 2h values PV[0, 2h) a lane holds, it keeps the half its lane bit h (LI & h) selects,
// adding the partner lane's copy of it. Run for h = NL/2 .. 1 (NL lanes a key row), lane i ends
// with the NL lanes' sum of value i. The including shader enables GL_KHR_shader_subgroup_shuffle.
#define HALVE_PAIRS(PV, LI, NL, h)                                  \
  if ((NL) > (h)) {                                                 \
    const bool up = ((LI) & (h)) != 0u;                             \
    [[unroll]] for (uint i = 0u; i < (h); ++i) {                    \
      const float send = up ? PV[i] : PV[i + (h)];                  \
      const float keep = up ? PV[i + (h)] : PV[i];                  \
      PV[i] = keep + subgroupShuffleXor(send, (h));                 \
    }                                                               \
  }

// After HALVE_PAIRS over the NP values of a chunk (NP < NL lanes a key row: a chunk of fewer keys),
// lane i holds value i % NP summed over its group of NP lanes: the groups' sums are added.
#define JOIN_PAIR_GROUPS(V, NP, NL) \
  for (uint o_ = (NP); o_ < (NL); o_ *= 2u) V += subgroupShuffleXor(V, o_);

// The cache slots of keys J0 .. J0 + N - 1, each clamped to LAST (>= J0), in a paged cache whose
// block table BLOCKS holds a sequence's blocks of BS slots from BTAB: where the N keys share a block
// (a chunk of N keys from a multiple of N, N dividing BS), one table read and one division for all
// of them instead of one a key (BS is a push constant: a division is a dozen instructions).
#define PAGED_SLOTS(SLOTS, N, J0, LAST, BLOCKS, BTAB, BS)                                   \
  {                                                                                         \
    const uint jb_ = (J0) / (BS), off_ = (J0) - jb_ * (BS);                                 \
    [[dont_flatten]] if (off_ + (N) <= (BS)) {                                              \
      const uint s0_ = BLOCKS[(BTAB) + jb_] * (BS) + off_;                                  \
      [[unroll]] for (uint k_ = 0u; k_ < (N); ++k_) SLOTS[k_] = s0_ + min((J0) + k_, (LAST)) - (J0); \
    } else {                                                                                \
      [[unroll]] for (uint k_ = 0u; k_ < (N); ++k_) {                                       \
        const uint j_ = min((J0) + k_, (LAST));                                             \
        SLOTS[k_] = BLOCKS[(BTAB) + j_ / (BS)] * (BS) + j_ % (BS);                          \
      }                                                                                     \
    }                                                                                       \
  }

#ifdef HAS_WEIGHTS
#ifdef W_SOURCES
// Two weight sources at binding 0 (GPU-cached experts read through the slot map, mmvq.glsl
// W_CACHED): 0 the device-local slots, 1 the host copy of every expert, read over PCIe. w_src is
// set once per workgroup before any weight load, so the index is dynamically uniform.
layout(binding = 0, std430) readonly buffer W8s { uint8_t d[]; } w8s[W_SOURCES];
layout(binding = 0, std430) readonly buffer W16s { uint16_t d[]; } w16s[W_SOURCES];
layout(binding = 0, std430) readonly buffer W32s { uint d[]; } w32s[W_SOURCES];
layout(binding = 0, std430) readonly buffer W64s { uvec2 d[]; } w64s[W_SOURCES];
layout(binding = 0, std430) readonly buffer W128s { uvec4 d[]; } w128s[W_SOURCES];
uint w_src = 0u;
#define w8 w8s[w_src].d
#define w16 w16s[w_src].d
#define w32 w32s[w_src].d
#define w64 w64s[w_src].d
#define w128 w128s[w_src].d
#else
layout(binding = 0, std430) readonly buffer W8 { uint8_t w8[]; };
layout(binding = 0, std430) readonly buffer W16 { uint16_t w16[]; };
layout(binding = 0, std430) readonly buffer W32 { uint w32[]; };
layout(binding = 0, std430) readonly buffer W64 { uvec2 w64[]; };
layout(binding = 0, std430) readonly buffer W128 { uvec4 w128[]; };
#endif

// The last expert (or cache slot) of a binding whose experts lie expert_bytes apart: expert ids
// read from a buffer are clamped to it, so a broken router's ids (NaN logits leave a full-form
// top-k's ranks unwritten) cannot read past the experts' tensor.
uint w_last_expert(uint expert_bytes) { return uint(w32.length()) * 4u / expert_bytes - 1u; }

uint w_u8(uint byte_off) { return uint(w8[byte_off]); }
int w_i8(uint byte_off) { return int(int8_t(w8[byte_off])); }
uint w_u16(uint byte_off) { return uint(w16[byte_off >> 1]); }
float w_f16(uint byte_off) { return unpackHalf2x16(uint(w16[byte_off >> 1])).x; }
float w_bf16(uint byte_off) { return uintBitsToFloat(uint(w16[byte_off >> 1]) << 16); }
float w_f32(uint byte_off) { return uintBitsToFloat(w32[byte_off >> 2]); }
// Four bytes starting at a 2-aligned offset (Q6_K and friends are only 2-byte aligned).
uint w_u32_2(uint byte_off) { return uint(w16[byte_off >> 1]) | (uint(w16[(byte_off >> 1) + 1]) << 16); }
// 16 / 8 bytes at a 2-aligned offset from aligned words, without branches: word k of the result
// is bits [sh, sh + 32) of words k, k+1 (sh = 0 or 16). The extra word is only read when the
// range is misaligned, so nothing past the range is touched.
uint funnel16(uint lo, uint hi, uint sh) { return (lo >> sh) | ((hi << 16) << (16u - sh)); }
uvec4 w_u128_2(uint byte_off) {
  const uint i = byte_off >> 2, sh = (byte_off & 2u) << 3;
  const uint a0 = w32[i], a1 = w32[i + 1], a2 = w32[i + 2], a3 = w32[i + 3], a4 = w32[i + 3 + (sh >> 4)];
  return uvec4(funnel16(a0, a1, sh), funnel16(a1, a2, sh), funnel16(a2, a3, sh), funnel16(a3, a4, sh));
}
uvec2 w_u64_2(uint byte_off) {
  const uint i = byte_off >> 2, sh = (byte_off & 2u) << 3;
  const uint a0 = w32[i], a1 = w32[i + 1], a2 = w32[i + 1 + (sh >> 4)];
  return uvec2(funnel16(a0, a1, sh), funnel16(a1, a2, sh));
}

// The GPU's row layout (runtime/vulkan/quant_layout.hpp): formats with GROUPED_ROWS (Q6_K, Q8_0)
// store a row of a multiple of GROUPED_ROWS blocks in groups of that many blocks, field by field
// in the block's field order, so their wide fields are 16-byte aligned. A kernel that reads
// weights calls w_set_rows(its row_bytes) first; w_field() is where block b's field lies.
// A kernel whose request knows the row width has the layout fixed at compile time (W_GROUPED 0 or
// 1: mmvq, where the run-time test cost Q8_0's decode matvec 22% on the H200); the others test.
#ifdef W_GROUPED
const bool w_grouped = W_GROUPED != 0;
void w_set_rows(uint row_bytes) {}
#else
bool w_grouped = false;
void w_set_rows(uint row_bytes) {
#ifdef GROUPED_ROWS
  w_grouped = row_bytes % (GROUPED_ROWS * BLOCK_BYTES) == 0u;
#endif
}
#endif
uint w_field(uint row_base, uint b, uint off, uint size) {
#ifdef GROUPED_ROWS
  if (w_grouped) return row_base + (b / GROUPED_ROWS) * (GROUPED_ROWS * BLOCK_BYTES) + GROUPED_ROWS * off + (b % GROUPED_ROWS) * size;
#endif
  return row_base + b * BLOCK_BYTES + off;
}
// 16 / 4 bytes of a field: aligned loads in a grouped row, else from 2-aligned words.
uvec4 w_u128_f(uint byte_off) { return w_grouped ? w128[byte_off >> 4] : w_u128_2(byte_off); }
uint w_u32_f(uint byte_off) { return w_grouped ? w32[byte_off >> 2] : w_u32_2(byte_off); }
uvec2 w_u64_f(uint byte_off) { return w_grouped ? w64[byte_off >> 3] : w_u64_2(byte_off); }

#ifndef GROUPED_ROWS
void dequant16(uint blk, uint part, out float v[16]);
// 16-element part c of the row at row_base (formats in ggml's blocks; grouped ones define their own).
void dequant_row16(uint row_base, uint c, out float v[16]) { dequant16(row_base + (c / (QK / 16)) * BLOCK_BYTES, c % (QK / 16), v); }
#endif
#endif

#ifdef MMVQ
// int8 activations of the integer matvec (quantize_q8.glsl writes them): codes in 32-element
// blocks, 16 per uvec4, and per block (d, d·sum of codes 0-15, d·sum of codes 16-31, d·sum).
layout(binding = 1, std430) readonly buffer XQ { uvec4 xq[]; };
layout(binding = 2, std430) readonly buffer XS { vec4 xs[]; };
#endif

// One 32-element block of int8 activations as every writer of them stores it (quantize_q8.glsl,
// mmvq QUANT_OUT / NORM_OUT, the attention output, norm_tail.glsl): d = max|v| / 127, codes
// round(v / d) four to a uint, and (d, d·sum of codes 0-15, d·sum of codes 16-31, d·sum).
struct q8_block {
  uvec4 lo, hi;  // codes 0-15, 16-31
  vec4 s;
};
q8_block q8_quantize(vec4 v[8]) {
  float amax = 0.0;
  for (uint i = 0; i < 8; ++i) {
    const vec4 a = abs(v[i]);
    amax = max(amax, max(max(a.x, a.y), max(a.z, a.w)));
  }
  const float d = amax / 127.0;
  const float id = d > 0.0 ? 1.0 / d : 0.0;
  uint packed[8];
  int sum_lo = 0, sum_hi = 0;
  for (uint i = 0; i < 8; ++i) {
    const ivec4 q = ivec4(round(v[i] * id));
    packed[i] = (uint(q.x) & 0xFFu) | ((uint(q.y) & 0xFFu) << 8) | ((uint(q.z) & 0xFFu) << 16) | (uint(q.w) << 24);
    const int sum = q.x + q.y + q.z + q.w;
    if (i < 4) sum_lo += sum;
    else sum_hi += sum;
  }
  q8_block b;
  b.lo = uvec4(packed[0], packed[1], packed[2], packed[3]);
  b.hi = uvec4(packed[4], packed[5], packed[6], packed[7]);
  b.s = vec4(d, d * float(sum_lo), d * float(sum_hi), d * float(sum_lo + sum_hi));
  return b;
}

// The four signed bytes of a packed word, lowest first (q8_quantize's codes).
ivec4 i8x4(uint a) { return ivec4(int(a << 24) >> 24, int(a << 16) >> 24, int(a << 8) >> 24, int(a) >> 24); }

#ifdef NEED_DOT4
// Dot product of four packed signed bytes: a hardware instruction where the device has
// VK_KHR_shader_integer_dot_product (HAS_DOT4, SPIR-V OpSDot through GL_EXT_spirv_intrinsics,
// since glslang 12 has no GL_EXT_integer_dot_product), else plain integer math.
#ifdef HAS_DOT4
// OpSDot (4450); capabilities DotProduct (6019), DotProductInput4x8BitPacked (6018); fmt 0 = 4x8-bit packed
spirv_instruction(extensions = ["SPV_KHR_integer_dot_product"], capabilities = [6019, 6018], id = 4450)
int sdot4_packed(uint a, uint b, spirv_literal int fmt);
int dot4(uint a, uint b) { return sdot4_packed(a, b, 0); }
#else
int dot4(uint a, uint b) {
  const ivec4 x = i8x4(a), y = i8x4(b);
  return x.x * y.x + x.y * y.y + x.z * y.z + x.w * y.w;
}
#endif
#endif

// Decode attention kernels (attention_dec, attention_qdec): the keys [start, last] a workgroup sums
// (the kernel's key_range); a workgroup with none returns, after the split merge's tail where
// SPLIT_COMBINE has it (split_combine.glsl, assembled after this file).
#ifdef SPLIT_COMBINE
#define RETURN_IF_NO_KEYS(t, h0, start, last) \
  if (!key_range(t, h0, start, last)) {       \
    SPLIT_COMBINE_CALL();                     \
    return;                                   \
  }
#else
#define RETURN_IF_NO_KEYS(t, h0, start, last) \
  if (!key_range(t, h0, start, last)) return
#endif
