// CPU instruction-set tiers for kernel dispatch, detected once at start-up. Kernels for a tier
// live in their own translation unit built with that tier's flags (runtime/cpu/), so the library
// headers stay portable; the scalar tier is the reference every fast tier is tested against.
// Tiers are ordered: each one's CPU requirements include those of every tier before it.
#pragma once
#include <string_view>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#if defined(__linux__) && defined(__x86_64__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

namespace strata::kernels::cpu {

enum class isa {
  scalar,
  avx2,         // AVX2 + FMA + F16C (Haswell, Zen 1)
  avx512,       // AVX-512 F/BW/VL/DQ (Skylake-X)
  avx512_vnni,  // avx512 + VNNI's vpdpbusd (Cascade Lake, Ice Lake, Zen 4); a separate tier so
                // CPUs with AVX-512 but without VNNI still get the avx512 kernels
  amx,          // avx512_vnni + AMX-TILE/INT8 tile products for prefill GEMMs (Sapphire Rapids),
                // granted by the OS (amx_usable); every other kernel is avx512_vnni's
};

constexpr std::string_view name_of(isa i) noexcept {
  switch (i) {
    case isa::avx2: return "avx2";
    case isa::avx512: return "avx512";
    case isa::avx512_vnni: return "avx512_vnni";
    case isa::amx: return "amx";
    default: return "scalar";
  }
}

// AMX-TILE and AMX-INT8 usable by this process: CPUID leaf 7 EDX bits 24 (AMX-TILE) and 25
// (AMX-INT8), XCR0 bits 17-18 (XTILECFG, XTILEDATA state enabled by the OS), and Linux's
// permission for the 8 KiB tile data state, asked once (arch_prctl(ARCH_REQ_XCOMP_PERM,
// XFEATURE_XTILEDATA = 18), Linux 5.16+; it holds for every thread of the process). Without the
// permission the first tile instruction faults, so a refusal (an older kernel, a seccomp filter)
// means no AMX tier. Called once, from detect_isa.
inline bool amx_usable() noexcept {
#if defined(__linux__) && defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(d >> 24 & 1) || !(d >> 25 & 1)) return false;
  unsigned xcr0 = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0 >> 17 & 3) != 3) return false;
  constexpr long arch_req_xcomp_perm = 0x1023, xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
  return false;
#endif
}

// Best tier this CPU supports (AVX2 needs FMA and F16C as well; AVX-512 needs F, BW, VL, DQ;
// amx needs avx512_vnni and amx_usable(), so calling this may ask Linux for the tile state).
// Read from CPUID directly rather than __builtin_cpu_supports, which clang 14 lacks for
// "f16c"; XGETBV confirms the OS saves the YMM (and opmask/ZMM) state, without which the
// instructions fault even on a CPU that has them.
inline isa detect_isa() noexcept {
#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return isa::scalar;
  const bool fma = c >> 12 & 1, osxsave = c >> 27 & 1, avx = c >> 28 & 1, f16c = c >> 29 & 1;
  if (!(fma && osxsave && avx && f16c)) return isa::scalar;
  unsigned xcr0 = 0, xcr0_hi = 0;
  __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0 & 0x6) != 0x6) return isa::scalar;  // XMM and YMM state
  if (__get_cpuid_max(0, nullptr) < 7) return isa::scalar;
  __cpuid_count(7, 0, a, b, c, d);
  if (!(b >> 5 & 1)) return isa::scalar;  // AVX2
  const bool avx512 = (b >> 16 & 1) && (b >> 17 & 1) && (b >> 30 & 1) && (b >> 31 & 1) &&  // F DQ BW VL
                      (xcr0 & 0xE0) == 0xE0;  // opmask, upper ZMM halves, ZMM16-31 state
  if (!avx512) return isa::avx2;
  if (!(c >> 11 & 1)) return isa::avx512;  // AVX512_VNNI
  return amx_usable() ? isa::amx : isa::avx512_vnni;
#else
  return isa::scalar;
#endif
}

}  // namespace strata::kernels::cpu
