// The attention tile kernel of every SIMD tier against attention_tile_reference on random
// caches: every row kind (f32, f16, q8_0, TurboQuant) on K and V, with and without the f16
// ring, head dims that are and are not multiples of 16, queries whose ranges start and end
// inside key blocks (causal and chunked); and a query's output must not depend on the other
// queries of its tile (bit for bit), which is what keeps batching from changing results.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"
#include "strata/kernels/cpu/attention.hpp"
#include "strata/kernels/cpu/kv_storage.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;
using strata::kernels::cpu::attention_side;
using strata::kernels::cpu::attention_tile;
using strata::kernels::cpu::kv_codec;

// A synthetic single-head cache of n_pos positions for one (K or V) side.
struct side_data {
  kv_codec codec;
  std::vector<std::uint8_t> bytes;
  std::vector<const std::uint8_t*> rows;
  std::vector<std::vector<fp16>> ring_rows;
  std::vector<const fp16*> ring;

  side_data(kv::kv_type type, std::uint32_t d, std::uint32_t n_pos, std::uint32_t ring_from, std::mt19937& rng)
      : codec(type, d), bytes(codec.head_bytes() * n_pos), rows(n_pos), ring_rows(n_pos), ring(n_pos, nullptr) {
    std::normal_distribution<float> nd;
    std::vector<float> x(d), scratch(d);
    for (std::uint32_t j = 0; j < n_pos; ++j) {
      for (auto& v : x) v = 1.5f * nd(rng);
      codec.encode(x.data(), bytes.data() + j * codec.head_bytes(), scratch.data());
      rows[j] = bytes.data() + j * codec.head_bytes();
      // The ring holds the most recent positions, except a hole (as after a ring wrap).
      if (kv::is_compressed(type) && j >= ring_from && j % 7 != 3) {
        for (const float v : x) ring_rows[j].push_back(to_fp16(v));
        ring[j] = ring_rows[j].data();
      }
    }
  }
  attention_side side() const {
    attention_side s = strata::kernels::cpu::attention_side_of(codec);
    s.rows = rows.data();
    s.ring = kv::is_compressed(codec.type()) ? ring.data() : nullptr;
    return s;
  }
};

struct query_spec {
  std::uint32_t first, last, recent_from;
};

// Runs one tile of the given queries (q vectors from qs) through `fn` and returns the outputs
// (out + Rᵀ·out_rot, as the backend combines them) of every query.
template <class Fn>
std::vector<std::vector<float>> run_tile(Fn fn, const side_data& k, const side_data& v, std::uint32_t d,
                                          const std::vector<query_spec>& spec, const std::vector<std::vector<float>>& qs,
                                          bool* handled = nullptr) {
  const std::size_t n = spec.size();
  std::vector<float> scratch(strata::kernels::cpu::attention_scratch_floats(d));
  std::vector<std::vector<float>> q_rot(n, std::vector<float>(d)), out(n, std::vector<float>(d, -7.0f)),
      out_rot(n, std::vector<float>(d, -7.0f));
  attention_tile t;
  t.head_dim = d;
  t.n_q = std::uint32_t(n);
  t.scale = 1.0f / std::sqrt(float(d));
  t.key_lo = 0;
  t.key_hi = std::uint32_t(k.rows.size() - 1);
  t.k = k.side();
  t.v = v.side();
  t.scratch = scratch.data();
  for (std::size_t i = 0; i < n; ++i) {
    t.q[i] = qs[i].data();
    q_rot[i] = qs[i];
    if (t.k.tq) t.k.tq->rotation().forward(q_rot[i].data());
    t.q_rot[i] = q_rot[i].data();
    t.out[i] = out[i].data();
    t.out_rot[i] = out_rot[i].data();
    t.first[i] = spec[i].first;
    t.last[i] = spec[i].last;
    t.recent_from[i] = spec[i].recent_from;
  }
  const bool ok = fn(t);
  if (handled) *handled = ok;
  for (std::size_t i = 0; ok && i < n; ++i) {
    if (!t.used_rot[i]) continue;
    t.v.tq->rotation().inverse(out_rot[i].data());
    for (std::uint32_t c = 0; c < d; ++c) out[i][c] += out_rot[i][c];
  }
  return out;
}

// n query vectors of d normal floats.
std::vector<std::vector<float>> random_queries(std::size_t n, std::uint32_t d, std::mt19937& rng) {
  std::normal_distribution<float> nd;
  std::vector<std::vector<float>> qs(n, std::vector<float>(d));
  for (auto& q : qs)
    for (auto& x : q) x = nd(rng);
  return qs;
}

// NMSE of the first n queries' outputs against the reference's.
double tile_nmse(const std::vector<std::vector<float>>& got, const std::vector<std::vector<float>>& want, std::size_t n,
                 std::uint32_t d) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i)
    for (std::uint32_t c = 0; c < d; ++c) {
      num += (double(got[i][c]) - want[i][c]) * (double(got[i][c]) - want[i][c]);
      den += double(want[i][c]) * want[i][c];
    }
  return num / den;
}

bool reference(attention_tile& t) noexcept {
  strata::kernels::cpu::attention_tile_reference(t);
  return true;
}

}  // namespace

TEST_CASE("attention tile: every tier equals the reference, and tiles do not change a query's bits") {
  const kv::kv_type types[] = {kv::kv_type::f32, kv::kv_type::f16, kv::kv_type::q8_0, kv::kv_type::tq3,
                               kv::kv_type::tq4};
  for_each_tier([&](isa tier, const strata::kernels::cpu::kernel_table& tab) {
    REQUIRE(bool(tab.attention));
    for (const std::uint32_t d : {128u, 64u, 96u, 80u, 72u}) {
      for (const kv::kv_type tk : types)
        for (const kv::kv_type tv : types) {
          if ((tk == kv::kv_type::q8_0 || tv == kv::kv_type::q8_0) && d % 32) continue;
          if ((kv::is_compressed(tk) && tk != kv::kv_type::q8_0 && d == 72) ||
              (kv::is_compressed(tv) && tv != kv::kv_type::q8_0 && d == 72))
            continue;  // TurboQuant needs head_dim a multiple of 16
          CAPTURE(strata::kernels::cpu::name_of(tier));
          CAPTURE(d);
          CAPTURE(kv::name_of(tk));
          CAPTURE(kv::name_of(tv));
          constexpr std::uint32_t n_pos = 75;
          std::mt19937 rng(d * 31 + unsigned(tk) * 7 + unsigned(tv));
          const side_data k(tk, d, n_pos, 40, rng), v(tv, d, n_pos, 40, rng);
          // Six queries: causal at positions 74, 73, 58 and 17, one chunked (chunk 32, first 64),
          // one at position 0; windows of 12 positions into the ring (starting mid-block).
          const std::vector<query_spec> spec = {{0, 74, 63}, {0, 73, 62}, {0, 58, 47}, {0, 17, 6}, {64, 74, 63}, {0, 0, 0}};
          const auto qs = random_queries(spec.size(), d, rng);
          const auto want = run_tile(reference, k, v, d, spec, qs);
          bool handled = false;
          const auto got = run_tile(tab.attention, k, v, d, spec, qs, &handled);
          if (!handled) {
            CHECK(d % 16 != 0);  // only a head_dim the vector width does not divide may be declined
            continue;
          }
          // Float sums of ≤ 75 keys × d products in different orders and a polynomial exp with
          // ≈ 2 ulp error against std::exp: NMSE ~1e-13; 1e-10 leaves room and still catches a
          // wrong key, a wrong ring/row choice or a missed rescale (≥ 1e-4).
          CHECK(tile_nmse(got, want, spec.size(), d) < 1e-10);
          // Each query alone in its tile gives the same bits as inside the six-query tile.
          for (std::size_t i = 0; i < spec.size(); ++i) {
            const auto one = run_tile(tab.attention, k, v, d, {spec[i]}, {qs[i]});
            CHECK(std::memcmp(one[0].data(), got[i].data(), d * sizeof(float)) == 0);
          }
        }
    }
  });
}

// Decode tiles (one token's GQA heads: the same keys and ring window for every query) read f32,
// f16 and q8_0 cache rows and the f16 ring straight from the cache, not through decoded
// scratch. Against the reference on random caches at several depths (block tails, one key, a
// window into the ring), 1-8 queries per token, head dims with and without a vector tail; and
// bit for bit against the same queries inside a two-token (prefill) tile, which decodes.
TEST_CASE("attention tile: decode tiles read rows directly and give a prefill tile's bits") {
  const kv::kv_type types[] = {kv::kv_type::f16, kv::kv_type::f32, kv::kv_type::q8_0, kv::kv_type::tq3};
  for_each_tier([&](isa tier, const strata::kernels::cpu::kernel_table& tab) {
    for (const std::uint32_t d : {128u, 64u, 96u, 80u, 72u}) {
      for (const kv::kv_type tk : types)
        for (const kv::kv_type tv : types) {
          if ((tk == kv::kv_type::q8_0 || tv == kv::kv_type::q8_0) && d % 32) continue;
          if ((tk == kv::kv_type::tq3 || tv == kv::kv_type::tq3) && d % 16) continue;
          CAPTURE(strata::kernels::cpu::name_of(tier));
          CAPTURE(d);
          CAPTURE(kv::name_of(tk));
          CAPTURE(kv::name_of(tv));
          constexpr std::uint32_t n_pos = 131, window = 12;
          std::mt19937 rng(d * 131 + unsigned(tk) * 17 + unsigned(tv));
          const side_data k(tk, d, n_pos, 100, rng), v(tv, d, n_pos, 100, rng);
          for (const std::uint32_t pos : {0u, 1u, 15u, 16u, 17u, 47u, 110u, 130u})
            for (const std::uint32_t gqa : {1u, 2u, 3u, 4u, 8u}) {
              CAPTURE(pos);
              CAPTURE(gqa);
              const auto spec_at = [&](std::uint32_t p) {
                return query_spec{0, p, p + 1 >= window ? p + 1 - window : 0};
              };
              std::vector<query_spec> spec(gqa, spec_at(pos));
              const auto qs = random_queries(gqa, d, rng);
              const auto want = run_tile(reference, k, v, d, spec, qs);
              bool handled = false;
              const auto got = run_tile(tab.attention, k, v, d, spec, qs, &handled);
              if (!handled) {
                CHECK(d % 16 != 0);
                continue;
              }
              CHECK(tile_nmse(got, want, gqa, d) < 1e-10);
              if (pos == 0) continue;
              // The previous token's heads, then these: a prefill tile (scratch path).
              std::vector<query_spec> two(gqa, spec_at(pos - 1));
              two.insert(two.end(), spec.begin(), spec.end());
              auto q2 = random_queries(gqa, d, rng);
              q2.insert(q2.end(), qs.begin(), qs.end());
              if (two.size() > strata::kernels::cpu::attention_max_queries) continue;
              const auto both = run_tile(tab.attention, k, v, d, two, q2);
              for (std::size_t i = 0; i < gqa; ++i)
                CHECK(std::memcmp(both[gqa + i].data(), got[i].data(), d * sizeof(float)) == 0);
            }
        }
    }
  });
}
