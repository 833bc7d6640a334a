// dequant_row of every SIMD tier must reproduce the reference floats bit for bit (embedding
// rows feed the whole model, so they may not depend on the ISA).
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;

TEST_CASE("dequant_row: bit-identical to the reference on every tier") {
  const auto& ref = strata::kernels::cpu::reference_table();
  for_each_tier([&](isa tier, const kernel_table& tab) {
    for_each_format(quant::all{}, [&](auto fmt) {
      using Fmt = decltype(fmt);
      const auto& r = ref[std::size_t(Fmt::gguf_type)];
      const auto& k = tab[std::size_t(Fmt::gguf_type)];
      CAPTURE(strata::kernels::cpu::name_of(tier));
      CAPTURE(Fmt::name);
      std::mt19937 rng(7u + unsigned(Fmt::gguf_type));
      for (const std::size_t n : test_lengths<Fmt>()) {
        for (const bool raw : {false, true}) {
          CAPTURE(n);
          const auto wv = random_weights<Fmt>(n, rng, raw);
          skewed_rows wbuf(r.row_bytes(n), alignof(typename Fmt::block)), ya(n * 4, 4), yb(n * 4, 4);
          std::memcpy(wbuf.data(), wv.data(), r.row_bytes(n));
          r.dequant_row(wbuf.data(), reinterpret_cast<float*>(ya.data()), n);
          k.dequant_row(wbuf.data(), reinterpret_cast<float*>(yb.data()), n);
          CHECK(std::memcmp(ya.data(), yb.data(), n * 4) == 0);
        }
      }
    });
  });
}

}  // namespace
