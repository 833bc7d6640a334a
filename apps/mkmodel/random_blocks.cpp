// Random-but-valid tensor bytes. Quantized blocks: every byte random (codes, sub-block scales),
// then the fp16 super-scales d (and dmin / m) overwritten with a positive value from a table of
// 256 jittered scales, and int8 fields kept off -128 (ggml's quantizers never produce it).
// The super-scale d0 = sigma / sqrt(M · E[j²]), with M the second moment of a dequantized
// element at d = 1 (unit_second_moment) and j the jitter, gives weights of std ≈ sigma.
#include "random_blocks.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "strata/core/bf16.hpp"
#include "strata/core/fp16.hpp"

namespace strata::mkmodel {

namespace {

using gguf::type_id;

constexpr std::uint64_t chunk_target_bytes = 256u << 10;  // generation unit (whole blocks)
constexpr int quantile_bits = 12;                          // float types: 4096-level N(0,1) table

constexpr std::uint64_t mix64(std::uint64_t z) noexcept {  // splitmix64 finaliser
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

struct rng {  // splitmix64: one multiply-xorshift per 8 bytes, plenty for filler data
  std::uint64_t s;
  std::uint64_t next() noexcept { return mix64(s += 0x9E3779B97F4A7C15ull); }
  float uniform() noexcept { return float(next() >> 40) * 0x1p-24f; }  // [0, 1)
};

// Standard normal quantiles at (i + 0.5) / 4096, by bisection on erfc (computed once).
const std::vector<float>& normal_quantiles() {
  static const std::vector<float> q = [] {
    std::vector<float> t(std::size_t(1) << quantile_bits);
    for (std::size_t i = 0; i < t.size(); ++i) {
      const double p = (double(i) + 0.5) / double(t.size());
      double lo = -10, hi = 10;  // Phi(x) = erfc(-x / sqrt 2) / 2 is increasing
      for (int it = 0; it < 80; ++it) {
        const double mid = 0.5 * (lo + hi);
        (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
      }
      t[i] = float(0.5 * (lo + hi));
    }
    return t;
  }();
  return q;
}

// Moments of a uniform integer code on [lo, hi].
struct moments { double m1, m2; };
moments uniform_int(int lo, int hi) {
  double s1 = 0, s2 = 0;
  for (int k = lo; k <= hi; ++k) s1 += k, s2 += double(k) * k;
  const double n = hi - lo + 1;
  return {s1 / n, s2 / n};
}
// A random int8 with -128 mapped to -127.
moments int8_no_min() {
  double s1 = 0, s2 = 0;
  for (int k = -128; k <= 127; ++k) {
    const double v = std::max(k, -127);
    s1 += v, s2 += v * v;
  }
  return {s1 / 256, s2 / 256};
}
// E[(s·q − c·m)²] for independent s, q, m (k-quant "scale·code − min" elements).
double scale_min_moment(moments s, moments q, moments m, double c) {
  return s.m2 * q.m2 - 2 * c * s.m1 * q.m1 * m.m1 + c * c * m.m2;
}

// Where the super-scales live in each block and how the min relates to d.
struct block_layout {
  std::uint32_t d_off;      // fp16 d
  int min_off;              // fp16 dmin (k-quants) or m (Q4_1/Q5_1); -1 if none
  double min_ratio;         // dmin = ratio·d, or m = −ratio·d for Q4_1/Q5_1 (zero-mean weights)
  bool min_negative;        // store −ratio·d (legacy "x = d·q + m" types)
  std::uint32_t i8_lo, i8_hi;  // int8 byte range to keep off -128 (empty if lo == hi)
};

block_layout layout_of(type_id t) {
  switch (t) {
    case type_id::q4_0: return {0, -1, 0, false, 0, 0};
    case type_id::q4_1: return {0, 2, 7.5, true, 0, 0};
    case type_id::q5_0: return {0, -1, 0, false, 0, 0};
    case type_id::q5_1: return {0, 2, 15.5, true, 0, 0};
    case type_id::q8_0: return {0, -1, 0, false, 2, 34};
    case type_id::q2_k: return {80, 82, 1.5, false, 0, 0};
    case type_id::q3_k: return {108, -1, 0, false, 0, 0};
    case type_id::q4_k: return {0, 2, 7.5, false, 0, 0};
    case type_id::q5_k: return {0, 2, 15.5, false, 0, 0};
    case type_id::q6_k: return {208, -1, 0, false, 192, 208};
    default: return {};
  }
}

// Scale jitter: block k of a table gets d0 · (0.75 + 0.5·k/255).
double jitter(int k) { return 0.75 + 0.5 * k / 255.0; }
double jitter_second_moment() {
  double s = 0;
  for (int k = 0; k < 256; ++k) s += jitter(k) * jitter(k);
  return s / 256;
}

void fill_random_bytes(rng& g, std::span<std::byte> out) {
  std::size_t i = 0;
  for (; i + 8 <= out.size(); i += 8) {
    const std::uint64_t v = g.next();
    std::memcpy(out.data() + i, &v, 8);
  }
  if (i < out.size()) {
    const std::uint64_t v = g.next();
    std::memcpy(out.data() + i, &v, out.size() - i);
  }
}

void put_half(std::byte* p, fp16 h) { std::memcpy(p, &h.bits, 2); }

void gen_quant_chunk(const fill_spec& s, rng& g, std::span<std::byte> out) {
  const block_layout L = layout_of(s.type);
  const std::uint32_t bb = gguf::block_bytes(s.type);
  const double d0 = s.sigma / std::sqrt(unit_second_moment(s.type) * jitter_second_moment());
  fp16 d_tab[256], min_tab[256];
  for (int k = 0; k < 256; ++k) {
    const double d = d0 * jitter(k);
    d_tab[k] = to_fp16(float(d));
    const double dr = double(to_float(d_tab[k]));  // the min follows the stored (rounded) d
    min_tab[k] = to_fp16(float(L.min_negative ? -L.min_ratio * dr : L.min_ratio * dr));
  }
  fill_random_bytes(g, out);
  for (std::size_t off = 0; off < out.size(); off += bb) {
    std::byte* b = out.data() + off;
    const int k = std::to_integer<int>(b[L.d_off]);  // the random byte under d picks the jitter
    put_half(b + L.d_off, d_tab[k]);
    if (L.min_off >= 0) put_half(b + L.min_off, min_tab[k]);
    for (std::uint32_t i = L.i8_lo; i < L.i8_hi; ++i)
      if (b[i] == std::byte{0x80}) b[i] = std::byte{0x81};
  }
}

void gen_float_chunk(const fill_spec& s, rng& g, std::uint64_t first_elem, std::span<std::byte> out) {
  const std::size_t esz = gguf::block_bytes(s.type), n = out.size() / esz;
  if (s.role == tensor_role::rope_freqs && s.values) {
    for (std::size_t i = 0; i < n; ++i) std::memcpy(out.data() + i * 4, &(*s.values)[first_elem + i], 4);
    return;
  }
  if (s.role == tensor_role::norm) {  // RMSNorm weights: 1 ± 5%
    for (std::size_t i = 0; i < n; ++i) {
      const float v = 1.0f + 0.1f * (g.uniform() - 0.5f);
      std::memcpy(out.data() + i * 4, &v, 4);
    }
    return;
  }
  // Encode the scaled quantile table once per chunk, then every element is one table copy.
  const auto& q = normal_quantiles();
  std::vector<std::byte> table(q.size() * esz);
  for (std::size_t k = 0; k < q.size(); ++k) {
    const float v = s.sigma * q[k];
    std::byte* p = table.data() + k * esz;
    if (s.type == type_id::f32) std::memcpy(p, &v, 4);
    else if (s.type == type_id::f16) put_half(p, to_fp16(v));
    else { const bf16 h = to_bf16(v); std::memcpy(p, &h.bits, 2); }
  }
  const auto fill = [&]<std::size_t Size>() {
    constexpr std::uint64_t mask = (1u << quantile_bits) - 1;
    constexpr int per_draw = 64 / quantile_bits;
    std::size_t i = 0;
    for (; i + per_draw <= n; i += per_draw) {
      std::uint64_t bits = g.next();
      for (int k = 0; k < per_draw; ++k, bits >>= quantile_bits)
        std::memcpy(out.data() + (i + k) * Size, table.data() + (bits & mask) * Size, Size);
    }
    for (std::uint64_t bits = g.next(); i < n; ++i, bits >>= quantile_bits)
      std::memcpy(out.data() + i * Size, table.data() + (bits & mask) * Size, Size);
  };
  if (esz == 2) fill.template operator()<2>();
  else fill.template operator()<4>();
  if (s.row_scale && s.type == type_id::f32 && s.row_elems) {
    for (std::size_t i = 0; i < n; ++i) {
      float v;
      std::memcpy(&v, out.data() + i * 4, 4);
      v *= (*s.row_scale)[(first_elem + i) / s.row_elems];
      std::memcpy(out.data() + i * 4, &v, 4);
    }
  }
}

void gen_chunk(const fill_spec& s, std::uint64_t chunk, std::uint64_t chunk_bytes, std::span<std::byte> out) {
  rng g{mix64(s.seed ^ mix64(chunk + 1))};
  if (gguf::block_elems(s.type) == 1) gen_float_chunk(s, g, chunk * chunk_bytes / gguf::block_bytes(s.type), out);
  else gen_quant_chunk(s, g, out);
}

template <class F>
void parallel_for(std::size_t n, unsigned threads, F&& f) {
  const std::size_t nt = std::min<std::size_t>(std::max(threads, 1u), n);
  if (nt <= 1) {
    for (std::size_t i = 0; i < n; ++i) f(i);
    return;
  }
  std::atomic<std::size_t> next{0};
  std::exception_ptr err;
  std::mutex err_mu;
  const auto work = [&] {
    try {
      for (std::size_t i; (i = next.fetch_add(1)) < n;) f(i);
    } catch (...) {
      const std::lock_guard lock(err_mu);
      if (!err) err = std::current_exception();
      next = n;
    }
  };
  std::vector<std::thread> pool;
  for (std::size_t t = 1; t < nt; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (err) std::rethrow_exception(err);
}

}  // namespace

bool random_fill_supported(type_id t) noexcept {
  switch (t) {
    case type_id::f32: case type_id::f16: case type_id::bf16:
    case type_id::q4_0: case type_id::q4_1: case type_id::q5_0: case type_id::q5_1: case type_id::q8_0:
    case type_id::q2_k: case type_id::q3_k: case type_id::q4_k: case type_id::q5_k: case type_id::q6_k:
      return true;
    default: return false;
  }
}

double unit_second_moment(type_id t) noexcept {
  const moments u4 = uniform_int(0, 15), u5 = uniform_int(0, 31), u6 = uniform_int(0, 63);
  switch (t) {
    case type_id::q4_0: return uniform_int(-8, 7).m2;                   // x = d·(q − 8)
    case type_id::q4_1: return u4.m2 - 2 * 7.5 * u4.m1 + 7.5 * 7.5;    // x = d·q + m, m = −7.5·d
    case type_id::q5_0: return uniform_int(-16, 15).m2;                 // x = d·(q − 16)
    case type_id::q5_1: return u5.m2 - 2 * 15.5 * u5.m1 + 15.5 * 15.5;  // m = −15.5·d
    case type_id::q8_0: return int8_no_min().m2;                        // x = d·q
    case type_id::q2_k: return scale_min_moment(u4, uniform_int(0, 3), u4, 1.5);  // 4-bit sc/m
    case type_id::q3_k: return uniform_int(-32, 31).m2 * uniform_int(-4, 3).m2;   // d·(sc−32)·q
    case type_id::q4_k: return scale_min_moment(u6, u4, u6, 7.5);       // 6-bit sc/m, dmin = 7.5·d
    case type_id::q5_k: return scale_min_moment(u6, u5, u6, 15.5);
    case type_id::q6_k: return int8_no_min().m2 * uniform_int(-32, 31).m2;  // d·sc·(q − 32)
    default: return 1.0;
  }
}

std::uint64_t tensor_seed(std::uint64_t seed, std::string_view name) noexcept {
  std::uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (const char c : name) h = (h ^ std::uint8_t(c)) * 0x100000001B3ull;
  return mix64(mix64(seed) ^ h);
}

void fill_tensor(const fill_spec& s, std::uint64_t offset, std::span<std::byte> out, unsigned threads) {
  if (out.empty()) return;
  const std::uint64_t bb = gguf::block_bytes(s.type);
  const std::uint64_t cb = std::max<std::uint64_t>(1, chunk_target_bytes / bb) * bb;
  const std::uint64_t end = offset + out.size();
  const std::uint64_t c0 = offset / cb, c1 = (end - 1) / cb;
  parallel_for(std::size_t(c1 - c0 + 1), threads, [&](std::size_t k) {
    const std::uint64_t c = c0 + k, cs = c * cb, ce = std::min(cs + cb, s.nbytes);
    const std::uint64_t lo = std::max(cs, offset), hi = std::min(ce, end);
    if (lo == cs && hi == ce) {
      gen_chunk(s, c, cb, out.subspan(std::size_t(cs - offset), std::size_t(ce - cs)));
    } else {  // chunk cut by the request: generate it whole, copy the overlap
      thread_local std::vector<std::byte> tmp;
      tmp.resize(std::size_t(ce - cs));
      gen_chunk(s, c, cb, tmp);
      std::memcpy(out.data() + (lo - offset), tmp.data() + (lo - cs), std::size_t(hi - lo));
    }
  });
}

}  // namespace strata::mkmodel
