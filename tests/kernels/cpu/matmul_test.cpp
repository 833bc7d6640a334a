// backend::matmul on each tier's table: batches go through dot_rows_4 (4 tokens at a time)
// plus dot_row for the leftover tokens, and every output must equal the tier's own dot_row
// on the quantized activation bit for bit, i.e. not depend on the batch size.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"
#include "strata/kernels/cpu/backend.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;

TEST_CASE("matmul: batched output equals per-token dot_row on every tier") {
  constexpr std::uint32_t K = 512, N = 37, T = 7;
  for_each_tier([&](isa tier, const kernel_table& tab) {
    strata::kernels::cpu::backend be(2, tab);
    const auto xb = be.alloc(T, K), yb = be.alloc(T, N);
    be.reserve(T, 0);
    for_each_format(quant::all{}, [&](auto fmt) {
      using Fmt = decltype(fmt);
      const auto& k = tab[std::size_t(Fmt::gguf_type)];
      CAPTURE(strata::kernels::cpu::name_of(tier));
      CAPTURE(Fmt::name);
      std::mt19937 rng(5u + unsigned(Fmt::gguf_type));
      std::vector<typename Fmt::block> wdata;
      for (std::uint32_t n = 0; n < N; ++n) {
        const auto row = random_weights<Fmt>(K, rng, n % 2 == 1);
        wdata.insert(wdata.end(), row.begin(), row.end());
      }
      strata::kernels::cpu::weight w;
      w.data = reinterpret_cast<const std::byte*>(wdata.data());
      w.type = Fmt::gguf_type;
      w.ne[0] = K;
      w.ne[1] = N;
      w.row_bytes = k.row_bytes(K);
      w.kernels = &k;
      w.name = "w";
      for (std::uint32_t t = 0; t < T; ++t) {
        const auto x = random_floats(K, rng);
        std::memcpy(xb.all().row(t), x.data(), K * 4);
      }
      be.matmul(w, xb.all(), yb.all());
      std::vector<std::byte> act(k.act_row_bytes(K));
      for (std::uint32_t t = 0; t < T; ++t) {
        k.quantize_act_row(xb.all().row(t), act.data(), K);
        for (std::uint32_t n = 0; n < N; ++n) {
          const float want = k.dot_row(w.row(n), act.data(), K);
          const float got = yb.all().row(t)[n];
          CHECK(std::memcmp(&want, &got, 4) == 0);
        }
      }
    });
  });
}

}  // namespace
