// Activation quantizers of every SIMD tier (quantize_act_row: Q8_0, Q8_1, Q8_K, F16, BF16,
// F32) must write exactly the reference bytes, for every weight format's act and row length,
// from misaligned rows, including rounding ties, all-zero blocks and infinities.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;

TEST_CASE("quantize_act_row: byte-identical to the reference on every tier") {
  const auto& ref = strata::kernels::cpu::reference_table();
  for_each_tier([&](isa tier, const kernel_table& tab) {
    for_each_format(quant::all{}, [&](auto fmt) {
      using Fmt = decltype(fmt);
      const auto& r = ref[std::size_t(Fmt::gguf_type)];
      const auto& k = tab[std::size_t(Fmt::gguf_type)];
      CAPTURE(strata::kernels::cpu::name_of(tier));
      CAPTURE(Fmt::name);
      std::mt19937 rng(1234u + unsigned(Fmt::gguf_type));
      for (const std::size_t n : test_lengths<typename Fmt::act>()) {
        if (n % Fmt::block_elems) continue;
        CAPTURE(n);
        const std::size_t bytes = r.act_row_bytes(n);
        for (int kind = 0; kind < 3; ++kind) {
          CAPTURE(kind);
          auto x = kind == 0 ? random_floats(n, rng) : tie_floats(n, rng);
          if (kind == 2)
            x[n / 3] = (n % 2) ? std::numeric_limits<float>::infinity() : -std::numeric_limits<float>::infinity();
          skewed_rows src(n * 4, 4), a(bytes, 4), b(bytes, 4);  // 4: alignof(q8_k::block)
          auto* xs = reinterpret_cast<float*>(src.data());
          std::memcpy(xs, x.data(), n * 4);
          std::memset(a.data(), 0xAA, bytes);
          std::memset(b.data(), 0x55, bytes);
          r.quantize_act_row(xs, a.data(), n);
          k.quantize_act_row(xs, b.data(), n);
          CHECK(std::memcmp(a.data(), b.data(), bytes) == 0);
        }
      }
    });
  });
}

}  // namespace
