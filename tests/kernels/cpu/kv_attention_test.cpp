// backend::attention over compressed KV caches: for every type pair, head dims 128 and 96 (two
// Hadamard segments), two sequences and a small full-precision window, the output equals
// softmax attention in double over what the cache holds — f16-rounded rows for positions inside
// the query's window, the decoded compressed rows (q8_0 dequantized, TurboQuant x̃ = Rᵀỹ)
// outside it. This checks the fused path (rotated query, rotated value sums, one inverse
// rotation per head) and the window rule, independently of any model.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace {

using namespace strata;
using kv::kv_type;

void check_attention(kv_type tk, kv_type tv, std::uint32_t d, const kernels::cpu::kernel_table& tab) {
  constexpr std::uint32_t n_head = 4, n_head_kv = 2, n_pos = 40, window = 5, n_seq = 2;
  kv::kv_config cfg;
  cfg.n_layer = 1;
  cfg.n_head_kv = n_head_kv;
  cfg.head_dim = d;
  cfg.n_ctx = 96;  // 6 blocks of 16: 3 per sequence
  cfg.n_seq = n_seq;
  cfg.block_size = 16;
  cfg.type_k = tk;
  cfg.type_v = tv;
  cfg.full_precision_window = window;
  cfg.max_batch = 4;
  kernels::cpu::backend be(2, tab);
  be.reserve(n_seq * 3, 0);  // the query batch below: 3 tokens per sequence
  auto kv = be.make_kv(cfg);
  kv::block_table table(cfg);
  std::mt19937 rng(d + 7 * unsigned(tk) + 49 * unsigned(tv));
  std::normal_distribution<float> nd;
  const std::size_t row = std::size_t(n_head_kv) * d;
  std::vector<float> keys(n_seq * n_pos * row), vals(keys.size());
  for (auto& x : keys) x = 2.0f * nd(rng);
  for (auto& x : vals) x = nd(rng);
  for (std::uint32_t s = 0; s < n_seq; ++s) {
    table.reserve_append(s, n_pos);
    for (std::uint32_t j = 0; j < n_pos; ++j) {
      const std::size_t o = (std::size_t(s) * n_pos + j) * row;
      kv.store(0, s, j, table.slot(s, j), &keys[o], &vals[o]);
    }
  }
  // Queries: the last 3 positions of each sequence (one batch, like a decode step of 2 sequences
  // with 3 tokens each), so windows of different queries overlap the ring differently.
  std::vector<std::int32_t> toks, pos;
  std::vector<std::uint32_t> seqs;
  for (std::uint32_t s = 0; s < n_seq; ++s)
    for (std::uint32_t p = n_pos - 3; p < n_pos; ++p) toks.push_back(0), pos.push_back(std::int32_t(p)), seqs.push_back(s);
  const std::vector<std::uint8_t> want(toks.size(), 1);
  const graph::batch b{toks, pos, seqs, want};
  std::vector<float> q(toks.size() * n_head * d), out(q.size());
  for (auto& x : q) x = nd(rng);
  const float scale = 1.0f / std::sqrt(float(d));
  be.begin({b, &table});
  be.attention(kv, 0, {q.data(), std::uint32_t(toks.size()), n_head * d, n_head * d}, {n_head, n_head_kv, d, 0, scale},
               {out.data(), std::uint32_t(toks.size()), n_head * d, n_head * d});

  std::vector<float> kd(d), vd(d);
  double num = 0, den = 0;
  for (std::size_t t = 0; t < toks.size(); ++t)
    for (std::uint32_t h = 0; h < n_head; ++h) {
      const std::uint32_t s = seqs[t], p = std::uint32_t(pos[t]), hk = h / (n_head / n_head_kv);
      const float* qh = &q[(t * n_head + h) * d];
      std::vector<double> w(p + 1), o(d, 0.0);
      double mx = -1e300, sum = 0;
      std::vector<std::vector<float>> vrows(p + 1, std::vector<float>(d));
      for (std::uint32_t j = 0; j <= p; ++j) {
        const std::size_t off = (std::size_t(s) * n_pos + j) * row + std::size_t(hk) * d;
        const bool recent = p - j < window;
        if (recent && kv::is_compressed(tk)) for (std::uint32_t c = 0; c < d; ++c) kd[c] = to_float(to_fp16(keys[off + c]));
        else kv.load_k(0, table.slot(s, j), hk, kd.data());
        if (recent && kv::is_compressed(tv)) for (std::uint32_t c = 0; c < d; ++c) vrows[j][c] = to_float(to_fp16(vals[off + c]));
        else kv.load_v(0, table.slot(s, j), hk, vrows[j].data());
        double dot = 0;
        for (std::uint32_t c = 0; c < d; ++c) dot += double(qh[c]) * kd[c];
        w[j] = dot * scale;
        mx = std::max(mx, w[j]);
      }
      for (auto& x : w) sum += (x = std::exp(x - mx));
      for (std::uint32_t j = 0; j <= p; ++j)
        for (std::uint32_t c = 0; c < d; ++c) o[c] += w[j] / sum * vrows[j][c];
      for (std::uint32_t c = 0; c < d; ++c) {
        const double diff = out[(t * n_head + h) * d + c] - o[c];
        num += diff * diff;
        den += o[c] * o[c];
      }
    }
  // fp32 sums over ≤ 40 keys and d coordinates against double: ~1e-6 relative per element.
  CHECK(num / den < 1e-9);
}

}  // namespace

TEST_CASE("attention over compressed KV equals attention over the cached values") {
  const kv_type types[] = {kv_type::f16, kv_type::q8_0, kv_type::tq4, kv_type::tq3, kv_type::tq2};
  for (const std::uint32_t d : {128u, 96u})
    for (const kv_type k : types)
      for (const kv_type v : types) {
        if (d % 32 && (k == kv_type::q8_0 || v == kv_type::q8_0)) continue;
        if (!kv::is_compressed(k) && !kv::is_compressed(v)) continue;
        CAPTURE(d);
        CAPTURE(kv::name_of(k));
        CAPTURE(kv::name_of(v));
        check_attention(k, v, d, kernels::cpu::reference_table());
        check_attention(k, v, d, rt::select_kernel_table(rt::best_isa()));
      }
}

TEST_CASE("KV row kernels: the fast set equals the scalar reference bit for bit") {
  const auto fast = kernels::cpu::kv_rows::best(), ref = kernels::cpu::kv_rows::reference();
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (const std::size_t n : {16u, 64u, 96u, 128u, 256u}) {
    CAPTURE(n);
    std::vector<float> a(n), b(n), y1(n, 1.0f), y2(n, 1.0f), w1(n), w2(n);
    std::vector<fp16> h(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = nd(rng), b[i] = nd(rng), h[i] = to_fp16(nd(rng));
    CHECK(fast.dot(a.data(), b.data(), n) == ref.dot(a.data(), b.data(), n));
    fast.axpy(0.37f, a.data(), y1.data(), n);
    ref.axpy(0.37f, a.data(), y2.data(), n);
    CHECK(y1 == y2);
    fast.widen_f16(h.data(), w1.data(), n);
    ref.widen_f16(h.data(), w2.data(), n);
    CHECK(w1 == w2);
    std::vector<fp16> n1(n), n2(n);
    a[n / 2] = std::numeric_limits<float>::quiet_NaN(), a[n / 3] = 1e9f, a[1] = 6.1e-5f;  // NaN, overflow, subnormal
    fast.narrow_f16(a.data(), n1.data(), n);
    ref.narrow_f16(a.data(), n2.data(), n);
    CHECK(std::memcmp(n1.data(), n2.data(), n * sizeof(fp16)) == 0);
  }
}

// Decode attention with fewer items than threads splits each KV head's query heads over more
// tiles (work_split::decode_attention_split_heads): the outputs are the same bits as one tile
// per KV head and as one thread, f16 and compressed caches, one and two sequences.
TEST_CASE("decode attention split over query heads gives the same bits") {
  constexpr std::uint32_t n_head = 16, n_head_kv = 2, d = 128, n_pos = 40;
  const auto& tab = rt::select_kernel_table(rt::best_isa());
  for (const kv_type tk : {kv_type::f16, kv_type::q8_0})
    for (const std::uint32_t n_seq : {1u, 2u}) {
      CAPTURE(int(tk));
      CAPTURE(n_seq);
      kv::kv_config cfg;
      cfg.n_layer = 1;
      cfg.n_head_kv = n_head_kv;
      cfg.head_dim = d;
      cfg.n_ctx = 96;
      cfg.n_seq = 2;
      cfg.block_size = 16;
      cfg.type_k = tk;
      cfg.max_batch = 4;
      std::mt19937 rng(5 + n_seq);
      std::normal_distribution<float> nd;
      std::vector<float> keys(std::size_t(n_seq) * n_pos * n_head_kv * d), vals(keys.size()), q(n_seq * n_head * d);
      for (auto& x : keys) x = nd(rng);
      for (auto& x : vals) x = nd(rng);
      for (auto& x : q) x = nd(rng);
      std::vector<std::int32_t> toks(n_seq, 0), pos(n_seq, std::int32_t(n_pos - 1));
      std::vector<std::uint32_t> seqs;
      for (std::uint32_t s = 0; s < n_seq; ++s) seqs.push_back(s);
      const std::vector<std::uint8_t> want(n_seq, 1);
      const graph::batch b{toks, pos, seqs, want};
      const auto run = [&](unsigned threads, bool split) {
        kernels::cpu::backend be(threads, tab);
        kernels::cpu::work_split ws;
        ws.decode_attention_split_heads = split;
        be.set_work_split(ws);
        be.reserve(4, 0);
        auto kv = be.make_kv(cfg);
        kv::block_table table(cfg);
        for (std::uint32_t s = 0; s < n_seq; ++s) {
          table.reserve_append(s, n_pos);
          for (std::uint32_t j = 0; j < n_pos; ++j) {
            const std::size_t o = (std::size_t(s) * n_pos + j) * n_head_kv * d;
            kv.store(0, s, j, table.slot(s, j), &keys[o], &vals[o]);
          }
        }
        std::vector<float> out(q.size());
        be.begin({b, &table});
        be.attention(kv, 0, {q.data(), n_seq, n_head * d, n_head * d}, {n_head, n_head_kv, d, 0, 1.0f / std::sqrt(float(d))},
                     {out.data(), n_seq, n_head * d, n_head * d});
        return out;
      };
      const auto one = run(1, true), whole = run(8, false), split = run(8, true);
      CHECK(std::memcmp(one.data(), whole.data(), one.size() * 4) == 0);
      CHECK(std::memcmp(one.data(), split.data(), one.size() * 4) == 0);
    }
}

