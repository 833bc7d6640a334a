// backend::matmul_shared (several matrices over one input in one pool job) and
// backend::swiglu_ffn (gate and up with SwiGLU and down's quantization in one job, then down)
// against the ops they replace, on random data: the outputs must be the same bits, for decode-
// and prefill-sized steps, Q4_K_M's format mix, Q8_0 (whose activations carry extras), formats
// without a packed layout (the fallback), every tier, 1 and 2 threads.
#include <doctest/doctest.h>

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

// A random rows x k matrix of Fmt as GGUF bytes.
struct matrix {
  gguf::type_id type;
  std::uint32_t k, rows;
  std::vector<std::byte> bytes;
};

template <class Fmt>
matrix random_gguf_matrix(std::uint32_t k, std::uint32_t rows, std::mt19937& rng) {
  matrix m{Fmt::gguf_type, k, rows, {}};
  for (std::uint32_t r = 0; r < rows; ++r) {
    const auto row = random_weights<Fmt>(k, rng, r % 3 == 1);
    const auto b = std::as_bytes(std::span(row));
    m.bytes.insert(m.bytes.end(), b.begin(), b.end());
  }
  return m;
}

kc::weight load(kc::backend& be, const matrix& m, const char* name) {
  gguf::tensor_info t;
  t.name = name;
  t.type = m.type;
  t.n_dims = 2;
  t.ne = {m.k, m.rows, 1, 1};
  t.data = std::span(m.bytes);
  return be.load(t);
}

void fill_random(kc::tensor x, std::mt19937& rng) {
  for (std::uint32_t t = 0; t < x.rows; ++t) {
    const auto r = random_floats(x.cols, rng);
    std::memcpy(x.row(t), r.data(), x.cols * 4);
  }
}

bool same_bits(kc::tensor a, kc::tensor b) {
  for (std::uint32_t t = 0; t < a.rows; ++t)
    if (std::memcmp(a.row(t), b.row(t), a.cols * 4) != 0) return false;
  return true;
}

constexpr std::uint32_t n_embd = 256, n_ff = 768, max_tok = 17;

// FFN matrices (gate, up, down) and attention projections (q, k, v) of one format mix.
struct layer_mix {
  const char* name;
  matrix gate, up, down, q, k, v;
};

std::vector<layer_mix> mixes(std::mt19937& rng) {
  std::vector<layer_mix> m;
  // Q4_K_M: Q4_K gate/up/q/k, Q6_K down and v (the act format is Q8_K for both).
  m.push_back({"q4_k_m", random_gguf_matrix<quant::q4_k>(n_embd, n_ff, rng), random_gguf_matrix<quant::q4_k>(n_embd, n_ff, rng),
               random_gguf_matrix<quant::q6_k>(n_ff, n_embd, rng), random_gguf_matrix<quant::q4_k>(n_embd, 2 * n_embd, rng),
               random_gguf_matrix<quant::q4_k>(n_embd, 80, rng), random_gguf_matrix<quant::q6_k>(n_embd, 80, rng)});
  // Q8_0: activations carry prepare_act's extras; q has rows that are not a whole group.
  m.push_back({"q8_0", random_gguf_matrix<quant::q8_0>(n_embd, n_ff, rng), random_gguf_matrix<quant::q8_0>(n_embd, n_ff, rng),
               random_gguf_matrix<quant::q8_0>(n_ff, n_embd, rng), random_gguf_matrix<quant::q8_0>(n_embd, 200, rng),
               random_gguf_matrix<quant::q8_0>(n_embd, 64, rng), random_gguf_matrix<quant::q8_0>(n_embd, 64, rng)});
  // No packed layout (Q4_0, Q5_K): the separate ops run; Q8_0's v differs in act format.
  m.push_back({"rows", random_gguf_matrix<quant::q4_0>(n_embd, n_ff, rng), random_gguf_matrix<quant::q4_0>(n_embd, n_ff, rng),
               random_gguf_matrix<quant::q5_k>(n_ff, n_embd, rng), random_gguf_matrix<quant::q4_k>(n_embd, 2 * n_embd, rng),
               random_gguf_matrix<quant::q4_k>(n_embd, 80, rng), random_gguf_matrix<quant::q8_0>(n_embd, 80, rng)});
  return m;
}

TEST_CASE("swiglu_ffn and matmul_shared equal the separate ops bit for bit") {
  std::mt19937 rng(18);
  const auto layers = mixes(rng);
  for_each_tier([&](isa tier, const kernel_table& tab) {
    CAPTURE(kc::name_of(tier));
    for (const auto& mix : layers)
      for (unsigned threads : {1u, 2u}) {
        CAPTURE(mix.name);
        CAPTURE(threads);
        kc::backend be(threads, tab);
        const auto wg = load(be, mix.gate, "blk.0.ffn_gate.weight"), wu = load(be, mix.up, "blk.0.ffn_up.weight"),
                   wd = load(be, mix.down, "blk.0.ffn_down.weight"), wq = load(be, mix.q, "blk.0.attn_q.weight"),
                   wk = load(be, mix.k, "blk.0.attn_k.weight"), wv = load(be, mix.v, "blk.0.attn_v.weight");
        const auto x = be.alloc(max_tok, n_embd), g = be.alloc(max_tok, n_ff), u = be.alloc(max_tok, n_ff),
                   out = be.alloc(max_tok, n_embd), g2 = be.alloc(max_tok, n_ff), u2 = be.alloc(max_tok, n_ff),
                   want = be.alloc(max_tok, n_embd);
        const auto q = be.alloc(max_tok, mix.q.rows), k = be.alloc(max_tok, mix.k.rows), v = be.alloc(max_tok, mix.v.rows),
                   q2 = be.alloc(max_tok, mix.q.rows), k2 = be.alloc(max_tok, mix.k.rows), v2 = be.alloc(max_tok, mix.v.rows);
        be.reserve(max_tok, 0);
        for (const std::uint32_t n : {1u, 2u, 3u, max_tok}) {
          CAPTURE(n);
          const kc::tensor xn = x.view(n);
          fill_random(xn, rng);
          be.swiglu_ffn(wg, wu, wd, xn, g.view(n), u.view(n), out.view(n));
          be.matmul(wg, xn, g2.view(n));
          be.matmul(wu, xn, u2.view(n));
          be.swiglu(g2.view(n), u2.view(n), g2.view(n));
          be.matmul(wd, g2.view(n), want.view(n));
          CHECK(same_bits(g.view(n), g2.view(n)));  // SwiGLU's output, before down
          CHECK(same_bits(out.view(n), want.view(n)));

          be.matmul_shared(xn, {{&wq, q.view(n)}, {&wk, k.view(n)}, {&wv, v.view(n)}});
          be.matmul(wq, xn, q2.view(n));
          be.matmul(wk, xn, k2.view(n));
          be.matmul(wv, xn, v2.view(n));
          CHECK(same_bits(q.view(n), q2.view(n)));
          CHECK(same_bits(k.view(n), k2.view(n)));
          CHECK(same_bits(v.view(n), v2.view(n)));
        }
      }
  });
}

// The decode split (work_split.hpp: items per thread, a floor on an item's weight bytes) and the
// pool's batched done count change which thread runs which rows, never a row's bits: one-token
// matmul, matmul_shared and swiglu_ffn on 4 threads under several splits equal 1 thread's.
TEST_CASE("decode work splits and the pool's done counting leave the outputs' bits unchanged") {
  std::mt19937 rng(19);
  const auto layers = mixes(rng);
  const auto split = [](unsigned chunks, std::size_t min_bytes) {
    kc::work_split s;
    s.decode_chunks_per_thread = chunks;
    s.decode_min_item_bytes = min_bytes;
    return s;
  };
  const kc::work_split splits[] = {split(8, 0), split(1, 0), split(8, 32u << 10), split(2, 1u << 20), split(64, 4u << 10)};
  const auto& tab = rt::select_kernel_table(rt::best_isa());
  for (const auto& mix : layers) {
    CAPTURE(mix.name);
    kc::backend ref(1, tab);
    const auto rg = load(ref, mix.gate, "blk.0.ffn_gate.weight"), ru = load(ref, mix.up, "blk.0.ffn_up.weight"),
               rd = load(ref, mix.down, "blk.0.ffn_down.weight"), rq = load(ref, mix.q, "blk.0.attn_q.weight");
    const auto x = ref.alloc(1, n_embd), g = ref.alloc(1, n_ff), u = ref.alloc(1, n_ff), want = ref.alloc(1, n_embd),
               want_q = ref.alloc(1, mix.q.rows);
    ref.reserve(1, 0);
    fill_random(x.all(), rng);
    ref.swiglu_ffn(rg, ru, rd, x.all(), g.all(), u.all(), want.all());
    ref.matmul(rq, x.all(), want_q.all());
    for (const bool batched : {true, false})
      for (const auto& sp : splits) {
        CAPTURE(batched);
        CAPTURE(sp.decode_chunks_per_thread);
        CAPTURE(sp.decode_min_item_bytes);
        kc::backend be(4, tab);
        be.set_work_split(sp);
        be.pool().set_batched_done(batched);
        const auto wg = load(be, mix.gate, "blk.0.ffn_gate.weight"), wu = load(be, mix.up, "blk.0.ffn_up.weight"),
                   wd = load(be, mix.down, "blk.0.ffn_down.weight"), wq = load(be, mix.q, "blk.0.attn_q.weight"),
                   wk = load(be, mix.k, "blk.0.attn_k.weight");
        const auto g2 = be.alloc(1, n_ff), u2 = be.alloc(1, n_ff), out = be.alloc(1, n_embd), q = be.alloc(1, mix.q.rows),
                   q2 = be.alloc(1, mix.q.rows), k = be.alloc(1, mix.k.rows);
        be.reserve(1, 0);
        be.swiglu_ffn(wg, wu, wd, x.all(), g2.all(), u2.all(), out.all());
        CHECK(same_bits(out.all(), want.all()));
        be.matmul(wq, x.all(), q.all());
        CHECK(same_bits(q.all(), want_q.all()));
        be.matmul_shared(x.all(), {{&wq, q2.all()}, {&wk, k.all()}});
        CHECK(same_bits(q2.all(), want_q.all()));
      }
  }
}

// Token parts (work_split::prefill_min_items_per_thread): a batch's gemm items cut by token
// ranges of whole 16-token tiles as well as by groups give the same bits as one thread's whole
// calls, for matmul, matmul_shared and swiglu_ffn (whose down runs that way), every tier, batch
// sizes with and without a partial last tile; swiglu_ffn's SwiGLU both as its own token-split
// job (work_split::swiglu_pass_min_tokens) and on the thread finishing each block.
TEST_CASE("prefill token parts and the SwiGLU pass leave the outputs' bits unchanged") {
  std::mt19937 rng(20);
  const auto layers = mixes(rng);
  constexpr std::uint32_t max_rows = 70;
  for_each_tier([&](isa tier, const kernel_table& tab) {
    CAPTURE(kc::name_of(tier));
    for (const auto& mix : layers) {
      CAPTURE(mix.name);
      kc::backend ref(1, tab), be(3, tab);
      kc::work_split split;
      split.prefill_min_items_per_thread = 64;  // more parts than the tiles allow: every tile its own
      split.swiglu_pass_min_tokens = 40;        // 48 and 70 tokens: SwiGLU as its own job; 33: per block
      be.set_work_split(split);
      const auto rg = load(ref, mix.gate, "blk.0.ffn_gate.weight"), ru = load(ref, mix.up, "blk.0.ffn_up.weight"),
                 rd = load(ref, mix.down, "blk.0.ffn_down.weight"), rq = load(ref, mix.q, "blk.0.attn_q.weight"),
                 rk = load(ref, mix.k, "blk.0.attn_k.weight");
      const auto wg = load(be, mix.gate, "blk.0.ffn_gate.weight"), wu = load(be, mix.up, "blk.0.ffn_up.weight"),
                 wd = load(be, mix.down, "blk.0.ffn_down.weight"), wq = load(be, mix.q, "blk.0.attn_q.weight"),
                 wk = load(be, mix.k, "blk.0.attn_k.weight");
      const auto x = ref.alloc(max_rows, n_embd), g = ref.alloc(max_rows, n_ff), u = ref.alloc(max_rows, n_ff),
                 want = ref.alloc(max_rows, n_embd), want_q = ref.alloc(max_rows, mix.q.rows),
                 want_k = ref.alloc(max_rows, mix.k.rows);
      const auto g2 = be.alloc(max_rows, n_ff), u2 = be.alloc(max_rows, n_ff), out = be.alloc(max_rows, n_embd),
                 q = be.alloc(max_rows, mix.q.rows), k = be.alloc(max_rows, mix.k.rows), q2 = be.alloc(max_rows, mix.q.rows);
      ref.reserve(max_rows, 0);
      be.reserve(max_rows, 0);
      for (const std::uint32_t n : {33u, 48u, max_rows}) {
        CAPTURE(n);
        const kc::tensor xn = x.view(n);
        fill_random(xn, rng);
        ref.swiglu_ffn(rg, ru, rd, xn, g.view(n), u.view(n), want.view(n));
        ref.matmul(rq, xn, want_q.view(n));
        ref.matmul(rk, xn, want_k.view(n));
        be.swiglu_ffn(wg, wu, wd, xn, g2.view(n), u2.view(n), out.view(n));
        CHECK(same_bits(out.view(n), want.view(n)));
        be.matmul(wq, xn, q2.view(n));
        CHECK(same_bits(q2.view(n), want_q.view(n)));
        be.matmul_shared(xn, {{&wq, q.view(n)}, {&wk, k.view(n)}});
        CHECK(same_bits(q.view(n), want_q.view(n)));
        CHECK(same_bits(k.view(n), want_k.view(n)));
      }
    }
  });
}

}  // namespace
