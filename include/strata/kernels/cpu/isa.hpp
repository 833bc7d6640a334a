// CPU instruction-set tiers for kernel dispatch, detected once at start-up. Kernels for a tier
// live in their own translation unit built with that tier's flags (runtime/cpu/), so the library
// headers stay portable; the scalar tier is the reference every fast tier is tested against.
#pragma once
#include <string_view>

namespace strata::kernels::cpu {

enum class isa { scalar, avx2, avx512 };

constexpr std::string_view name_of(isa i) noexcept {
  switch (i) {
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
    default: return "scalar";
  }
}

// Best tier this CPU supports (AVX2 needs FMA and F16C as well; AVX-512 needs F, BW, VL, DQ).
inline isa detect_isa() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("fma"))
    return isa::avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"))
    return isa::avx2;
#endif
  return isa::scalar;
}

}  // namespace strata::kernels::cpu
