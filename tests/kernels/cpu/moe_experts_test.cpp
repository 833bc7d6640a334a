// backend::moe_experts on packed experts (all experts' rows in a job per stage, or in one job
// for decode-sized steps) against the per-expert sequence it replaced, written out here with the
// backend's own matmul and swiglu on each expert's slab: the outputs must be the same bits, for
// decode-sized and prefill-sized steps, fused and not, output- and input-weighted experts, every
// rank or the first ranks only (weights still normalised over all k), on every tier and with 1
// and 2 threads.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"
#include "strata/kernels/cpu/backend.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;
namespace kc = strata::kernels::cpu;

template <class Fmt>
std::vector<typename Fmt::block> random_block_matrix(std::uint32_t k, std::uint32_t rows, std::mt19937& rng) {
  std::vector<typename Fmt::block> w;
  for (std::uint32_t r = 0; r < rows; ++r) {
    const auto row = random_weights<Fmt>(k, rng, r % 3 == 1);
    w.insert(w.end(), row.begin(), row.end());
  }
  return w;
}

gguf::tensor_info info_of(const char* name, gguf::type_id type, std::uint64_t k, std::uint64_t n, std::uint64_t e,
                          std::span<const std::byte> data) {
  gguf::tensor_info t;
  t.name = name;
  t.type = type;
  t.n_dims = 3;
  t.ne = {k, n, e, 1};
  t.data = data;
  return t;
}

// Gate/up in format G, down in D; ff_begins: the intermediate columns the CPU starts at (0: all;
// more: the columns before are another device's, and the reference zeroes them in the SwiGLU
// output, which adds exact zeros to the int sums of whole blocks: the same bits).
template <class G, class D>
void check_packed_experts(std::uint32_t n_ff, std::initializer_list<std::uint32_t> ff_begins) {
  constexpr std::uint32_t n_embd = 256, E = 8, k_used = 3, max_tok = 11;
  std::mt19937 rng(31);
  const auto gate = random_block_matrix<G>(n_embd, n_ff * E, rng);
  const auto up = random_block_matrix<G>(n_embd, n_ff * E, rng);
  const auto down = random_block_matrix<D>(n_ff, n_embd * E, rng);
  for_each_tier([&](isa tier, const kernel_table& tab) {
    CAPTURE(kc::name_of(tier));
    if (!tab[std::size_t(G::gguf_type)].pack_group || !tab[std::size_t(D::gguf_type)].pack_group) return;  // no packed layout on this tier
    for (unsigned threads : {1u, 2u}) {
      CAPTURE(threads);
      kc::backend be(threads, tab);
      const auto wg = be.load(info_of("blk.0.ffn_gate_exps.weight", G::gguf_type, n_embd, n_ff, E, std::as_bytes(std::span(gate))));
      const auto wu = be.load(info_of("blk.0.ffn_up_exps.weight", G::gguf_type, n_embd, n_ff, E, std::as_bytes(std::span(up))));
      const auto wd = be.load(info_of("blk.0.ffn_down_exps.weight", D::gguf_type, n_ff, n_embd, E, std::as_bytes(std::span(down))));
      REQUIRE(wg.packed);
      REQUIRE(wd.packed);
      const std::uint32_t routed = max_tok * k_used;
      const auto x = be.alloc(max_tok, n_embd), logits = be.alloc(max_tok, E), out = be.alloc(max_tok, n_embd);
      const auto xin = be.alloc(routed, n_embd), g = be.alloc(routed, n_ff), u = be.alloc(routed, n_ff), y = be.alloc(routed, n_embd);
      const auto want = be.alloc(max_tok, n_embd), row_in = be.alloc(1, n_embd), row_g = be.alloc(1, n_ff),
                 row_u = be.alloc(1, n_ff), row_y = be.alloc(1, n_embd);
      be.reserve(max_tok, routed);
      const graph::moe_scratch<kc::tensor> s{logits.all(), xin.all(), g.all(), u.all(), y.all()};
      const graph::moe_weights<kc::weight> mw{nullptr, &wg, &wu, &wd};
      for (const std::uint32_t fuse : {64u, 0u})  // one pool job (decode-sized steps) or a job per stage
      for (const auto weighting : {graph::moe_weighting::output, graph::moe_weighting::input})
        for (const std::uint32_t n : {1u, 2u, max_tok})
        for (const std::uint32_t kept : {k_used, 2u})  // 2: the first 2 ranks only (moe_keep_first_ranks)
        for (const std::uint32_t ff_begin : ff_begins) {
          CAPTURE(ff_begin);
          CAPTURE(fuse);
          CAPTURE(kept);
          CAPTURE(n);
          CAPTURE(int(weighting));
          be.set_moe_fuse_pairs(fuse);
          graph::moe_params mp;
          mp.n_used = k_used;
          mp.weighting = weighting;
          mp.gating = weighting == graph::moe_weighting::input ? graph::moe_gating::sigmoid : graph::moe_gating::softmax;
          for (std::uint32_t t = 0; t < n; ++t) {
            const auto xr = random_floats(n_embd, rng), lr = random_floats(E, rng);
            std::memcpy(x.all().row(t), xr.data(), n_embd * 4);
            std::memcpy(logits.all().row(t), lr.data(), E * 4);
          }
          be.moe_route(logits.all().first_rows(n), mp);
          graph::moe_params mk = mp;
          if (kept < k_used) {
            be.moe_keep_first_ranks(k_used, kept);
            mk.n_used = kept;
          }
          be.moe_experts(mw, mk, x.all().first_rows(n), s, out.all().first_rows(n), ff_begin);
          // The reference: per expert in increasing order, each routed row through the
          // backend's matmul on the expert's slab (a token's result does not depend on its batch).
          for (std::uint32_t t = 0; t < n; ++t) std::fill(want.all().row(t), want.all().row(t) + n_embd, 0.0f);
          for (std::uint32_t e = 0; e < E; ++e)
            for (std::uint32_t t = 0; t < n; ++t) {
              // Token t's top-k of its logits (ties to the lower index), as moe_route picks.
              std::vector<std::uint32_t> order(E);
              for (std::uint32_t i = 0; i < E; ++i) order[i] = i;
              const float* l = logits.all().row(t);
              std::stable_sort(order.begin(), order.end(), [&](std::uint32_t a, std::uint32_t b) { return l[a] > l[b]; });
              std::uint32_t j = 0;
              while (j < k_used && order[j] != e) ++j;
              if (j >= kept) continue;  // not routed, or a rank another device computes
              float wgt;
              if (mp.gating == graph::moe_gating::softmax) {
                double sum = 0.0;
                for (std::uint32_t i = 0; i < E; ++i) sum += std::exp(double(l[i] - l[order[0]]));
                float wsum = 0.0f, wj = 0.0f;
                for (std::uint32_t i = 0; i < k_used; ++i) {
                  const float wi = float(std::exp(double(l[order[i]] - l[order[0]])) / sum);
                  wsum += wi;
                  if (i == j) wj = wi;
                }
                wgt = wj / std::max(wsum, 6.103515625e-5f);
              } else {
                wgt = kc::sigmoid(l[e]);
              }
              const bool in = weighting == graph::moe_weighting::input;
              for (std::uint32_t c = 0; c < n_embd; ++c) row_in.all().row(0)[c] = in ? x.all().row(t)[c] * wgt : x.all().row(t)[c];
              be.matmul(wg.slab(e), row_in.all(), row_g.all());
              be.matmul(wu.slab(e), row_in.all(), row_u.all());
              be.swiglu(row_g.all(), row_u.all(), row_g.all());
              std::fill(row_g.all().row(0), row_g.all().row(0) + ff_begin, 0.0f);
              be.matmul(wd.slab(e), row_g.all(), row_y.all());
              const float f = in ? 1.0f : wgt;
              for (std::uint32_t c = 0; c < n_embd; ++c) want.all().row(t)[c] += f * row_y.all().row(0)[c];
            }
          for (std::uint32_t t = 0; t < n; ++t)
            CHECK(std::memcmp(want.all().row(t), out.all().row(t), n_embd * 4) == 0);
        }
    }
  });
}

TEST_CASE("moe_experts: packed experts in one pass equal the per-expert matmuls bit for bit") {
  // Gate/up Q4_K, down Q6_K (a Q4_K_M mix): K-quant rows are whole 256-element blocks, so a
  // column range starts at a multiple of 256.
  check_packed_experts<quant::q4_k, quant::q6_k>(512, {0u, 256u});
  // Q8_0: 32-element blocks.
  check_packed_experts<quant::q8_0, quant::q8_0>(256, {0u, 32u, 64u, 192u});
}

TEST_CASE("moe_experts: a column range that does not start on a whole block is refused") {
  std::mt19937 rng(5);
  const auto gate = random_block_matrix<quant::q4_k>(256, 512 * 2, rng);
  const auto down = random_block_matrix<quant::q6_k>(512, 256 * 2, rng);
  for_each_tier([&](isa tier, const kernel_table& tab) {
    CAPTURE(kc::name_of(tier));
    if (!tab[std::size_t(quant::q4_k::gguf_type)].pack_group || !tab[std::size_t(quant::q6_k::gguf_type)].pack_group) return;
    kc::backend be(1, tab);
    const auto wg = be.load(info_of("blk.0.ffn_gate_exps.weight", gguf::type_id::q4_k, 256, 512, 2, std::as_bytes(std::span(gate))));
    const auto wd = be.load(info_of("blk.0.ffn_down_exps.weight", gguf::type_id::q6_k, 512, 256, 2, std::as_bytes(std::span(down))));
    REQUIRE(wd.packed);
    CHECK(kc::moe_runner::slice_align(wd) == 256);
    const auto x = be.alloc(1, 256), logits = be.alloc(1, 2), out = be.alloc(1, 256);
    const auto xin = be.alloc(1, 256), g = be.alloc(1, 512), u = be.alloc(1, 512), y = be.alloc(1, 256);
    be.reserve(1, 1);
    std::fill(x.all().row(0), x.all().row(0) + 256, 0.5f);
    logits.all().row(0)[0] = 1.0f;
    logits.all().row(0)[1] = 0.0f;
    graph::moe_params mp;
    mp.n_used = 1;
    be.moe_route(logits.all(), mp);
    const graph::moe_scratch<kc::tensor> s{logits.all(), xin.all(), g.all(), u.all(), y.all()};
    const graph::moe_weights<kc::weight> mw{nullptr, &wg, &wg, &wd};
    CHECK_THROWS_WITH(be.moe_experts(mw, mp, x.all(), s, out.all(), 128), doctest::Contains("not a multiple of 256"));
    CHECK_THROWS_WITH(be.moe_experts(mw, mp, x.all(), s, out.all(), 512), doctest::Contains("below the width"));
    be.moe_experts(mw, mp, x.all(), s, out.all(), 256);  // a whole block: runs
  });
}

}  // namespace
