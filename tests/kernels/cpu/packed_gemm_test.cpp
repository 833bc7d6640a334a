// The packed GEMM (kernels/cpu/packed_gemm.hpp) for every format with a packed layout: each
// tier's gemm equals gemm_reference bit for bit for odd row counts (padding), several K, any
// number of tokens and any group range; gemm_reference agrees with the format's reference
// dot_row within the dot tolerance (so packing loses nothing); and backend::matmul on a loaded
// (packed) weight gives every token the bits it gets alone.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"
#include "strata/kernels/cpu/backend.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;
using strata::kernels::cpu::gemm_args;
using strata::kernels::cpu::pack_rows;
using strata::kernels::cpu::packed_groups;

struct problem {
  std::vector<std::uint8_t> packed;
  std::vector<std::uint8_t> act;
  std::size_t stride = 0, row_bytes = 0, group_bytes = 0;
};

// n_rows × k weights of Fmt, packed; n_tok activation rows quantized and prepared.
template <class Fmt>
problem make_problem(const strata::kernels::cpu::format_kernels& r, std::size_t n_rows, std::size_t k, std::size_t n_tok,
                     std::mt19937& rng, std::vector<typename Fmt::block>& w) {
  w.clear();
  for (std::size_t n = 0; n < n_rows; ++n) {
    const auto row = random_weights<Fmt>(k, rng, n % 3 == 1);
    w.insert(w.end(), row.begin(), row.end());
  }
  problem p;
  p.row_bytes = r.row_bytes(k);
  p.group_bytes = pack_rows * p.row_bytes;
  p.packed.resize(packed_groups(n_rows) * p.group_bytes);
  for (std::size_t g = 0; g < packed_groups(n_rows); ++g) r.pack_group(w.data(), n_rows, k, g, p.packed.data() + g * p.group_bytes);
  p.stride = r.gemm_act_bytes(k) + 4;  // rows not packed back to back, as the backend may lay them out
  p.act.resize(n_tok * p.stride);
  for (std::size_t t = 0; t < n_tok; ++t) {
    const auto x = t % 4 == 3 ? tie_floats(k, rng) : random_floats(k, rng);
    r.quantize_act_row(x.data(), p.act.data() + t * p.stride, k);
    if (r.prepare_act) r.prepare_act(p.act.data() + t * p.stride, k);
  }
  return p;
}

gemm_args args_for(const problem& p, const strata::kernels::cpu::format_kernels& r, std::size_t n_rows, std::size_t k,
                   std::size_t n_tok, std::vector<float>& y) {
  gemm_args a;
  a.w = p.packed.data();
  a.group_bytes = p.group_bytes;
  a.group_begin = 0;
  a.group_end = packed_groups(n_rows);
  a.act = p.act.data();
  a.act_stride = p.stride;
  a.act_row_bytes = r.act_row_bytes(k);
  a.n_tok = n_tok;
  y.assign(n_tok * (n_rows + 3), -1.0f);
  a.y = y.data();
  a.y_stride = n_rows + 3;
  a.n_rows = n_rows;
  a.k = k;
  return a;
}

}  // namespace

TEST_CASE("packed gemm: every tier equals the reference bit for bit, the reference equals dot_row") {
  const auto& ref = strata::kernels::cpu::reference_table();
  std::size_t formats = 0;
  for_each_format(quant::all{}, [&](auto fmt) {
    using Fmt = decltype(fmt);
    const auto& r = ref[std::size_t(Fmt::gguf_type)];
    if (!r.pack_group) return;
    ++formats;
    CAPTURE(Fmt::name);
    std::mt19937 rng(17u + unsigned(Fmt::gguf_type));
    std::vector<typename Fmt::block> w;
    for (const std::size_t n_rows : {1u, 16u, 37u}) {
      for (const std::size_t blocks : {1u, 3u, 8u}) {
        const std::size_t k = blocks * Fmt::block_elems, n_tok = 9;
        CAPTURE(n_rows);
        CAPTURE(k);
        const problem p = make_problem<Fmt>(r, n_rows, k, n_tok, rng, w);
        std::vector<float> want;
        r.gemm(args_for(p, r, n_rows, k, n_tok, want));
        // The reference against the format's own dot (row layout, scalar).
        for (std::size_t t = 0; t < n_tok; ++t)
          for (std::size_t n = 0; n < n_rows; ++n) {
            const void* a = p.act.data() + t * p.stride;
            const float d = r.dot_row(w.data() + n * blocks, a, k);
            const double tol = dot_tolerance(blocks, dot_magnitude<Fmt>(w.data() + n * blocks, a, k));
            CHECK(std::fabs(double(want[t * (n_rows + 3) + n]) - d) <= tol);
          }
        for (std::size_t n = n_rows; n < n_rows + 3; ++n) CHECK(want[n] == -1.0f);  // padding rows not written
        for_each_tier([&](isa tier, const strata::kernels::cpu::kernel_table& tab) {
          CAPTURE(strata::kernels::cpu::name_of(tier));
          const auto& kk = tab[std::size_t(Fmt::gguf_type)];
          REQUIRE(bool(kk.gemm));
          for (const std::size_t nt : {n_tok, std::size_t(1), std::size_t(2), std::size_t(5)}) {
            CAPTURE(nt);
            std::vector<float> got;
            auto a = args_for(p, r, n_rows, k, nt, got);
            kk.gemm(a);
            for (std::size_t t = 0; t < nt; ++t)
              CHECK(std::memcmp(got.data() + t * (n_rows + 3), want.data() + t * (n_rows + 3), n_rows * 4) == 0);
          }
          if (packed_groups(n_rows) > 1) {  // a range that starts at group 1
            std::vector<float> got;
            auto a = args_for(p, r, n_rows, k, 3, got);
            a.group_begin = 1;
            kk.gemm(a);
            CHECK(std::memcmp(got.data() + pack_rows, want.data() + pack_rows, (n_rows - pack_rows) * 4) == 0);
            CHECK(got[0] == -1.0f);
          }
        });
      }
    }
  });
  CHECK(formats >= 3);
}

TEST_CASE("packed gemm: backend matmul on a loaded weight does not depend on the batch") {
  constexpr std::uint32_t K = 512, N = 50, T = 11;
  for_each_tier([&](isa tier, const strata::kernels::cpu::kernel_table& tab) {
    strata::kernels::cpu::backend be(2, tab);
    (void)be.alloc(T, K);  // reserve() sizes the activation scratch for the widest buffer
    be.reserve(T, 0);
    for_each_format(quant::all{}, [&](auto fmt) {
      using Fmt = decltype(fmt);
      if (!tab[std::size_t(Fmt::gguf_type)].pack_group) return;
      CAPTURE(strata::kernels::cpu::name_of(tier));
      CAPTURE(Fmt::name);
      std::mt19937 rng(29u + unsigned(Fmt::gguf_type));
      std::vector<typename Fmt::block> wdata;
      for (std::uint32_t n = 0; n < N; ++n) {
        const auto row = random_weights<Fmt>(K, rng, n % 2 == 1);
        wdata.insert(wdata.end(), row.begin(), row.end());
      }
      gguf::tensor_info info;
      info.name = "blk.0.ffn_up.weight";
      info.type = Fmt::gguf_type;
      info.n_dims = 2;
      info.ne = {K, N, 1, 1};
      info.data = {reinterpret_cast<const std::byte*>(wdata.data()), wdata.size() * sizeof(wdata[0])};
      const auto w = be.load(info);
      REQUIRE(w.packed != nullptr);
      strata::kernels::cpu::buffer xb(T, K), yb(T, N), y1(1, N);
      for (std::uint32_t t = 0; t < T; ++t) {
        const auto x = random_floats(K, rng);
        std::memcpy(xb.all().row(t), x.data(), K * 4);
      }
      be.matmul(w, xb.all(), yb.all());
      for (std::uint32_t t = 0; t < T; ++t) {
        be.matmul(w, xb.all().first_rows(t + 1), yb.all().first_rows(t + 1));  // every prefix batch
        be.matmul(w, {xb.all().row(t), 1, K, K}, y1.all());
        CHECK(std::memcmp(y1.all().row(0), yb.all().row(t), N * 4) == 0);
      }
      const auto emb = [&] {  // the token embedding stays unpacked (get_rows reads it by row)
        info.name = "token_embd.weight";
        return be.load(info);
      }();
      CHECK(emb.packed == nullptr);
    });
  });
}
