// dot_row of every SIMD tier against the scalar reference for every format in quant::all,
// and dot_rows_4 against four dot_row calls of the same tier (bit for bit), on misaligned
// rows of 1..16 blocks with realistic and raw-byte weights.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;

TEST_CASE("dot_row and dot_rows_4: every format on every tier") {
  const auto& ref = strata::kernels::cpu::reference_table();
  for_each_tier([&](isa tier, const kernel_table& tab) {
    for_each_format(quant::all{}, [&](auto fmt) {
      using Fmt = decltype(fmt);
      const auto& r = ref[std::size_t(Fmt::gguf_type)];
      const auto& k = tab[std::size_t(Fmt::gguf_type)];
      CAPTURE(strata::kernels::cpu::name_of(tier));
      CAPTURE(Fmt::name);
      std::mt19937 rng(99u + unsigned(Fmt::gguf_type));
      double worst = 0.0;  // largest |fast − ref| / tolerance seen
      for (const std::size_t n : test_lengths<Fmt>()) {
        for (const bool raw : {false, true}) {
          CAPTURE(n);
          CAPTURE(raw);
          const auto wv = random_weights<Fmt>(n, rng, raw);
          const std::size_t wbytes = r.row_bytes(n), abytes = r.act_row_bytes(n);
          // Rows not a multiple of 32 apart, but at the alignment activation blocks require (4: Q8_K
          // holds a float), as the backend lays them out.
          const std::size_t astride = abytes + 4;
          skewed_rows wbuf(wbytes, alignof(typename Fmt::block)), abuf(4 * astride, 4);
          std::memcpy(wbuf.data(), wv.data(), wbytes);
          for (int row = 0; row < 4; ++row) {
            const auto x = row == 3 ? tie_floats(n, rng) : random_floats(n, rng);
            r.quantize_act_row(x.data(), abuf.data() + row * astride, n);
          }
          const void* w = wbuf.data();
          float fast[4], four[4] = {0, 0, 0, 0};
          for (int row = 0; row < 4; ++row) {
            const void* a = abuf.data() + row * astride;
            const float want = r.dot_row(w, a, n);
            fast[row] = k.dot_row(w, a, n);
            const double tol = dot_tolerance(n / Fmt::block_elems,
                                             dot_magnitude<Fmt>(static_cast<const typename Fmt::block*>(w), a, n));
            CAPTURE(row);
            CHECK(std::fabs(double(fast[row]) - double(want)) <= tol);
            worst = std::max(worst, std::fabs(double(fast[row]) - double(want)) / tol);
          }
          if (k.dot_rows_4) {
            k.dot_rows_4(w, abuf.data(), astride, four, n);
            for (int row = 0; row < 4; ++row) CHECK(std::memcmp(&four[row], &fast[row], 4) == 0);
          }
        }
      }
      MESSAGE(strata::kernels::cpu::name_of(tier) << " " << Fmt::name << ": max |fast - ref| / tolerance = " << worst);
    });
  });
}

TEST_CASE("tier tables: which entries each tier accelerates") {
  const auto& ref = strata::kernels::cpu::reference_table();
  for_each_tier([&](isa tier, const kernel_table& tab) {
    std::string dots, acts, deq;
    for_each_format(quant::all{}, [&](auto fmt) {
      using Fmt = decltype(fmt);
      const auto& r = ref[std::size_t(Fmt::gguf_type)];
      const auto& k = tab[std::size_t(Fmt::gguf_type)];
      REQUIRE(k.valid());
      CHECK(k.type == r.type);
      CHECK(k.act_type == r.act_type);
      CHECK(k.block_bytes == r.block_bytes);
      CHECK(k.act_block_bytes == r.act_block_bytes);
      if (k.dot_row != r.dot_row) dots += std::string(" ") + std::string(Fmt::name) + (k.dot_rows_4 ? "(x4)" : "");
      if (k.quantize_act_row != r.quantize_act_row) acts += std::string(" ") + std::string(Fmt::name);
      if (k.dequant_row != r.dequant_row) deq += std::string(" ") + std::string(Fmt::name);
    });
    MESSAGE(strata::kernels::cpu::name_of(tier) << " dot:" << dots << "\n act:" << acts << "\n dequant:" << deq);
  });
  CHECK(&rt::select_kernel_table(isa::scalar) == &strata::kernels::cpu::reference_table());
}

}  // namespace
