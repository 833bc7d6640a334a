// Shared pieces of the CPU kernel tests: the SIMD tiers this CPU can run, seeded data (weight
// rows, activation rows, misaligned placements) and the one tolerance table of the suite.
#pragma once
#include <doctest/doctest.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/quant/all.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::test::kernels {

using strata::kernels::cpu::isa;
using strata::kernels::cpu::kernel_table;

// Every SIMD tier; tiers the CPU lacks are reported and skipped by for_each_tier.
inline constexpr isa simd_tiers[] = {isa::avx2, isa::avx512, isa::avx512_vnni, isa::amx};

template <class F>
void for_each_tier(F&& f) {
  for (const isa t : simd_tiers) {
    if (int(t) > int(rt::best_isa())) {
      MESSAGE("skipping tier " << strata::kernels::cpu::name_of(t) << ": not supported by this CPU/build");
      continue;
    }
    f(t, rt::select_kernel_table(t));
  }
}

template <class... F, class G>
void for_each_format(quant::type_list<F...>, G&& g) {
  (g(F{}), ...);
}

// Row lengths under test: 1, 2, 3, 7 and 16 blocks; one-element "blocks" (F32, F16, BF16)
// also get lengths that exercise the vector loops and their tails.
template <class Fmt>
std::vector<std::size_t> test_lengths() {
  std::vector<std::size_t> n;
  for (const std::size_t k : {1, 2, 3, 7, 16}) n.push_back(Fmt::block_elems * k);
  if (Fmt::block_elems == 1)
    for (const std::size_t k : {31, 64, 100, 257, 4096}) n.push_back(k);
  return n;
}

// A byte buffer holding one or more rows at a deliberately misaligned offset: `skew` bytes
// past a 64-byte boundary (a multiple of the block's alignment, as rows of a GGUF tensor are).
class skewed_rows {
 public:
  skewed_rows(std::size_t bytes, std::size_t skew) : buf_(bytes + 128), skew_(skew) {}
  std::byte* data() noexcept {
    auto p = reinterpret_cast<std::uintptr_t>(buf_.data());
    return reinterpret_cast<std::byte*>((p + 63) / 64 * 64 + skew_);
  }

 private:
  std::vector<std::byte> buf_;
  std::size_t skew_;
};

// Activation-like floats: normal(0, σ) with σ varying per 32-element group (so block scales
// differ), sprinkled with exact zeros and exact halves of the block maximum's grid.
inline std::vector<float> random_floats(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-3.0f, 1.0f);
  std::vector<float> x(n);
  for (std::size_t g = 0; g < n; g += 32) {
    const float sigma = std::pow(10.0f, ud(rng));
    for (std::size_t j = g; j < std::min(n, g + 32); ++j) x[j] = sigma * nd(rng);
  }
  for (std::size_t j = 0; j < n; j += 13) x[j] = 0.0f;
  return x;
}

// Rows that stress the quantizers' rounding: per block of 256, the largest |x| is 127 (so
// Q8_0's d is 1 and Q8_K's iscale is ±1) and the rest are exact halves, i.e. ties for
// roundf (away from zero) and nearest_int (to even) alike; one block holds ±127 twice
// (Q8_K keeps the first), and one block is all zero.
inline std::vector<float> tie_floats(std::size_t n, std::mt19937& rng) {
  std::uniform_int_distribution<int> half(-253, 253);
  std::vector<float> x(n);
  for (std::size_t j = 0; j < n; ++j) x[j] = float(half(rng)) * 0.5f;
  // (Single-element formats are tested with lengths that are not multiples of 32: stay in range.)
  for (std::size_t g = 0; g < n; g += 32)
    if (g + (g / 32) % 32 < n) x[g + (g / 32) % 32] = (g / 32) % 2 ? 127.0f : -127.0f;
  if (n >= 64 && (n / 2) / 32 * 32 + ((n / 2) / 32) % 32 < n) x[n / 2] = -x[(n / 2) / 32 * 32 + ((n / 2) / 32) % 32];
  if (n >= 128)
    for (std::size_t j = n - 32; j < n; ++j) x[j] = 0.0f;
  return x;
}

// Weight rows: quantized from random floats by the format's own quantizer (realistic
// codes), or random bytes re-rolled per block until the block dequantizes to finite values
// of moderate size (every code and scale bit pattern, e.g. Q8_0 code −128).
template <class Fmt>
std::vector<typename Fmt::block> random_weights(std::size_t n, std::mt19937& rng, bool raw_bytes) {
  using B = typename Fmt::block;
  std::vector<B> w(n / Fmt::block_elems);
  if (!raw_bytes || Fmt::block_elems == 1) {
    const auto x = random_floats(n, rng);
    quant::quantize_row<Fmt>(x.data(), w.data(), n);
    return w;
  }
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : w) {
    for (;;) {
      auto* p = reinterpret_cast<unsigned char*>(&b);
      for (std::size_t k = 0; k < sizeof(B); ++k) p[k] = static_cast<unsigned char>(byte(rng));
      float y[Fmt::block_elems];
      Fmt::dequant(b, std::span<float, Fmt::block_elems>(y, Fmt::block_elems));
      bool ok = true;
      for (const float v : y) ok = ok && std::isfinite(v) && std::fabs(v) < 1e6f;
      if (ok) break;
    }
  }
  return w;
}

// --- tolerances (one table for the suite) ---------------------------------------------------

// Unit roundoff of binary32.
inline constexpr double unit_roundoff = 0x1p-24;

// dot_row, SIMD vs reference. Both sides add the same exact per-block (or per-element)
// quantities, rounded and summed in different orders: the reference sums blocks left to right
// with ≤ 3 roundings inside a block, a SIMD kernel sums per-lane partials and then reduces 8 or
// 16 lanes. The classic bound for recursive summation is (k − 1)·u·Σ|terms|; with k ≤ n_blocks
// + 64 additions and roundings on either side, |fast − ref| ≤ 2·(n_blocks + 64)·u·S, where S
// = Σ|w_e·a_e| + Σ_b|dot(w_b, a_b)| bounds every partial sum (and the min terms of the
// "_1"/K formats, whose element products can cancel inside a block).
inline double dot_tolerance(std::size_t n_blocks, double magnitude) {
  return 2.0 * double(n_blocks + 64) * unit_roundoff * magnitude + 1e-30;
}

// S of dot_tolerance: Σ|w_e·a_e| over dequantized rows plus Σ_b |reference block dot|.
template <class Fmt>
double dot_magnitude(const typename Fmt::block* w, const void* a, std::size_t n) {
  using Act = typename Fmt::act;
  std::vector<float> wf(n), af(n);
  quant::dequant_row<Fmt>(w, wf.data(), n);
  quant::dequant_row<Act>(static_cast<const typename Act::block*>(a), af.data(), n);
  double s = 0.0;
  for (std::size_t e = 0; e < n; ++e) s += std::fabs(double(wf[e]) * double(af[e]));
  const auto* ab = static_cast<const typename Act::block*>(a);
  for (std::size_t b = 0; b < n / Fmt::block_elems; ++b) s += std::fabs(double(Fmt::dot(w[b], ab[b])));
  return s;
}

// Activation quantizers and dequant: byte- and bit-identical to the reference (tolerance 0).

}  // namespace strata::test::kernels
