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
#ifdef COOPMAT
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#endif

#ifdef HAS_WEIGHTS
layout(binding = 0, std430) readonly buffer W8 { uint8_t w8[]; };
layout(binding = 0, std430) readonly buffer W16 { uint16_t w16[]; };
layout(binding = 0, std430) readonly buffer W32 { uint w32[]; };
layout(binding = 0, std430) readonly buffer W128 { uvec4 w128[]; };

uint w_u8(uint byte_off) { return uint(w8[byte_off]); }
int w_i8(uint byte_off) { return int(int8_t(w8[byte_off])); }
uint w_u16(uint byte_off) { return uint(w16[byte_off >> 1]); }
float w_f16(uint byte_off) { return unpackHalf2x16(uint(w16[byte_off >> 1])).x; }
float w_bf16(uint byte_off) { return uintBitsToFloat(uint(w16[byte_off >> 1]) << 16); }
float w_f32(uint byte_off) { return uintBitsToFloat(w32[byte_off >> 2]); }
// Four bytes starting at a 2-aligned offset (Q6_K and friends are only 2-byte aligned).
uint w_u32_2(uint byte_off) { return uint(w16[byte_off >> 1]) | (uint(w16[(byte_off >> 1) + 1]) << 16); }
#endif
