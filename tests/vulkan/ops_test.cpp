// The GPU's row ops against the CPU backend on random inputs (llama.cpp test-backend-ops style,
// NMSE gates from vk_harness.hpp): rms_norm, rope, scale_by_position (the Llama 4
// temperature), swiglu, add and select_rows. Each scenario is one template run on both backends; its steps use distinct token
// counts because a GPU backend records one graph per batch shape and replays it after that.
#include <doctest/doctest.h>

#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/error_of.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

using results = std::vector<std::vector<float>>;

struct ops_inputs {
  static constexpr std::uint32_t rows = 64;  // rows of each input table
  static constexpr std::uint32_t C = 2064;   // row width: 16 full passes of 128 threads and a tail of 16
  static constexpr std::uint32_t H = 8, D = 64;  // heads for the split-head norms and RoPE
  vkt::weight_store store;
  const gguf::tensor_info *a, *b, *q, *norm_w, *head_w, *freq_factors;

  explicit ops_inputs(std::mt19937& rng) {
    a = &store.add_f32("test.a", vkt::normal_floats(std::size_t(rows) * C, rng, 3.0f), C, rows);
    b = &store.add_f32("test.b", vkt::normal_floats(std::size_t(rows) * C, rng), C, rows);
    q = &store.add_f32("test.q", vkt::normal_floats(std::size_t(rows) * H * D, rng), H * D, rows);
    auto w = vkt::normal_floats(C, rng, 0.5f);
    for (auto& v : w) v += 1.0f;
    norm_w = &store.add_f32("test.norm", w, C);
    head_w = &store.add_f32("test.head_norm", vkt::normal_floats(D, rng, 0.5f), D);
    std::uniform_real_distribution<float> ff(1.0f, 8.0f);
    std::vector<float> f;
    for (std::uint32_t i = 0; i < D / 2; ++i) f.push_back(i < 4 ? 1.0f : ff(rng));
    freq_factors = &store.add_f32("test.rope_freqs", f, D / 2);
  }
};

// n tokens reading table rows `first`.. (distinct per step), positions from `pos`.
vkt::batch_data tokens(std::uint32_t n, std::int32_t first, std::vector<std::int32_t> pos = {}) {
  auto b = vkt::batch_data::rows(n, first);
  if (!pos.empty()) b.positions = pos;
  return b;
}

template <class Backend>
results run_norms(Backend& be, const ops_inputs& in) {
  const auto a = be.load(*in.a), q = be.load(*in.q), w = be.load(*in.norm_w), hw = be.load(*in.head_w);
  const auto x = be.alloc(16, ops_inputs::C + 8), y = be.alloc(16, ops_inputs::C), qb = be.alloc(16, ops_inputs::H * ops_inputs::D);
  be.reserve(16, 0);
  auto kv = be.make_kv(vkt::small_kv());
  const float eps = 1e-6f;
  results r;
  for (const bool weighted : {true, false}) {  // rows of a strided view into a second buffer
    const std::uint32_t n = weighted ? 5 : 6;
    const auto b = tokens(n, weighted ? 0 : 10);
    r.push_back(vkt::run_step(be, b, [&] {
      const auto xi = x.view(n).first_cols(ops_inputs::C);
      be.embed(a, xi);
      be.rms_norm(xi, weighted ? &w : nullptr, 1e-5f, y.view(n));
      return y.view(n);
    }));
  }
  for (const bool weighted : {true, false}) {  // in place on split heads (QK norm)
    const std::uint32_t n = weighted ? 7 : 9;
    const auto b = tokens(n, weighted ? 20 : 30);
    r.push_back(vkt::run_step(be, b, [&] {
      const auto qv = qb.view(n), qh = qv.split_rows(ops_inputs::H);
      be.embed(q, qv);
      be.rms_norm(qh, weighted ? &hw : nullptr, eps, qh);
      return qv;
    }));
  }
  return r;
}

template <class Backend>
results run_ropes(Backend& be, const ops_inputs& in) {
  const auto q = be.load(*in.q), freqs = be.load(*in.freq_factors);
  const auto qb = be.alloc(16, ops_inputs::H * ops_inputs::D);
  be.reserve(16, 0);
  auto kv = be.make_kv(vkt::small_kv());
  results r;
  std::uint32_t n = 3;
  for (const bool ff : {false, true})
    for (const bool neox : {false, true}) {
      const graph::rope_params rp{neox, ops_inputs::D, ff ? 500000.0f : 10000.0f, ff ? 0.25f : 1.0f};
      std::vector<std::int32_t> pos{0, 1, 2, 31, 32, 200, 1023, 4097, 8191, 12000};
      pos.resize(n);
      const auto b = tokens(n, std::int32_t(4 * n), pos);
      r.push_back(vkt::run_step(be, b, [&] {
        const auto qv = qb.view(n);
        be.embed(q, qv);
        be.rope(qv, ops_inputs::H, rp, ff ? &freqs : nullptr);
        return qv;
      }));
      n += 2;
    }
  return r;
}

// scale_by_position with Llama 4's temperature (positions around the 8192 steps), swiglu (into a third buffer and in
// place, as the decoder runs it), add (out of place and in place) and select_rows.
template <class Backend>
results run_elementwise(Backend& be, const ops_inputs& in) {
  constexpr std::uint32_t C = ops_inputs::C;
  const auto a = be.load(*in.a), bw = be.load(*in.b), q = be.load(*in.q);
  const auto x = be.alloc(16, C), y = be.alloc(16, C + 16), o = be.alloc(16, C), qb = be.alloc(16, ops_inputs::H * ops_inputs::D);
  be.reserve(16, 0);
  auto kv = be.make_kv(vkt::small_kv());
  results r;
  {
    const auto b = tokens(8, 0, {0, 8190, 8191, 8192, 16383, 16384, 100000, 1000000});
    r.push_back(vkt::run_step(be, b, [&] {
      be.embed(q, qb.view(8));
      be.scale_by_position(qb.view(8), {0.1, 8192.0f});
      return qb.view(8);
    }));
  }
  for (const bool in_place : {false, true}) {
    const std::uint32_t n = in_place ? 3 : 2;
    const auto b = tokens(n, in_place ? 40 : 50);
    r.push_back(vkt::run_step(be, b, [&] {
      const auto g = x.view(n), u = y.view(n).first_cols(C);
      be.embed(a, g);
      be.embed(bw, u);
      be.swiglu(g, u, in_place ? g : o.view(n));
      return in_place ? g : o.view(n);
    }));
  }
  for (const bool in_place : {false, true}) {
    const std::uint32_t n = in_place ? 5 : 4;
    const auto b = tokens(n, in_place ? 11 : 22);
    r.push_back(vkt::run_step(be, b, [&] {
      const auto s = x.view(n), t = y.view(n).first_cols(C);
      be.embed(a, s);
      be.embed(bw, t);
      be.add(s, t, in_place ? s : o.view(n));
      return in_place ? s : o.view(n);
    }));
  }
  {
    auto b = tokens(7, 3);
    b.logits = {1, 0, 0, 1, 1, 0, 1};
    r.push_back(vkt::run_step(be, b, [&] {
      be.embed(a, x.view(7));
      be.select_rows(x.view(7), o.view(4));
      return o.view(4);
    }));
  }
  return r;
}

// A prefill-sized step whose dispatches exceed the device's workgroup-count limit in x (65535
// on lavapipe and NVIDIA), so the backend spills them into z: RoPE over 1030 tokens x 64 heads
// x 128 pairs (65920 workgroups of 128) and the QK norm over 65920 head rows.
struct large_inputs {
  static constexpr std::uint32_t rows = 64, H = 64, D = 256, n = 1030;
  vkt::weight_store store;
  const gguf::tensor_info* q;
  explicit large_inputs(std::mt19937& rng) {
    q = &store.add_f32("test.q", vkt::normal_floats(std::size_t(rows) * H * D, rng), H * D, rows);
  }
};

template <class Backend>
results run_large(Backend& be, const large_inputs& in) {
  constexpr std::uint32_t H = large_inputs::H, D = large_inputs::D, n = large_inputs::n;
  const auto q = be.load(*in.q);
  const auto qb = be.alloc(n, H * D);
  be.reserve(n, 0);
  auto kv = be.make_kv(vkt::small_kv());
  const graph::rope_params rp{false, D, 10000.0f, 1.0f};
  auto b = vkt::batch_data::rows(n);
  for (std::uint32_t i = 0; i < n; ++i) b.tokens[i] = std::int32_t(i % large_inputs::rows);
  results r;
  r.push_back(vkt::run_step(be, b, [&] {
    const auto qv = qb.view(n), qh = qv.split_rows(H);
    be.embed(q, qv);
    be.rope(qv, H, rp, nullptr);
    be.rms_norm(qh, nullptr, 1e-6f, qh);
    return qv;
  }));
  return r;
}

template <class Inputs = ops_inputs, class F>
void compare(const char* op, const std::vector<std::string>& names, const std::vector<double>& tols, F&& run) {
  std::mt19937 rng(2024);
  const Inputs in(rng);
  results g, c;
  {
    gpu::backend be;
    g = run(be, in);
  }
  {
    vkt::cpu_backend be;
    c = run(be, in);
  }
  REQUIRE(g.size() == names.size());
  REQUIRE(c.size() == names.size());
  for (std::size_t i = 0; i < names.size(); ++i) {
    CAPTURE(names[i]);
    const double e = test::nmse(g[i], c[i]);
    MESSAGE(std::string(op) << " " << names[i] << ": NMSE GPU vs CPU " << e << " (tolerance " << tols[i] << ")");
    CHECK(e <= tols[i]);
  }
}

TEST_CASE("vulkan ops: rms_norm (weighted, unweighted, in place on split heads) vs CPU") {
  if (!vkt::available()) return;
  compare("rms_norm", {"weighted", "unweighted", "split heads weighted in place", "split heads unweighted in place"},
          {vkt::tol_float_op, vkt::tol_float_op, vkt::tol_float_op, vkt::tol_float_op},
          [](auto& be, const ops_inputs& in) { return run_norms(be, in); });
}

TEST_CASE("vulkan ops: rope (normal, NEOX, with freq factors and freq scale) vs CPU") {
  if (!vkt::available()) return;
  compare("rope", {"normal", "neox", "normal + freq factors", "neox + freq factors"},
          {vkt::tol_rope, vkt::tol_rope, vkt::tol_rope, vkt::tol_rope},
          [](auto& be, const ops_inputs& in) { return run_ropes(be, in); });
}

TEST_CASE("vulkan ops: scale_by_position (llama4 temperature), swiglu, add, select_rows vs CPU") {
  if (!vkt::available()) return;
  compare("elementwise",
          {"scale_by_position (llama4 temperature)", "swiglu", "swiglu in place", "add", "add in place", "select_rows"},
          {vkt::tol_float_op, vkt::tol_float_op, vkt::tol_float_op, vkt::tol_exact, vkt::tol_exact, vkt::tol_exact},
          [](auto& be, const ops_inputs& in) { return run_elementwise(be, in); });
}

TEST_CASE("vulkan ops: dispatches past the workgroup-count limit (rope and QK norm of a 1030-token step) vs CPU") {
  if (!vkt::available()) return;
  compare<large_inputs>("large step", {"rope + split-head rms_norm"}, {vkt::tol_rope},
                        [](auto& be, const large_inputs& in) { return run_large(be, in); });
}

// argmax over rows wider than a workgroup's batch of loads (1,024 threads x 8, then a tail):
// ties resolve to the lowest index wherever the equal maxima fall (one thread's two batches,
// two threads, the last column), a constant row and a row of -inf give index 0.
TEST_CASE("vulkan ops: argmax (lowest index among ties) vs the host") {
  if (!vkt::available()) return;
  constexpr std::uint32_t C = 3 * 8 * 1024 + 48, R = 6;  // rows a multiple of 16 (a weight table)
  std::mt19937 rng(99);
  auto t = vkt::normal_floats(std::size_t(R) * C, rng);
  const auto row = [&](std::uint32_t r) { return t.begin() + std::ptrdiff_t(r) * C; };
  std::fill(row(1), row(2), 1.0f);
  row(2)[C - 1] = 9.0f;
  for (const std::uint32_t c : {11266u, 2050u, 9000u}) row(3)[c] = 9.0f;  // 2050 and 11266: one thread, two batches
  std::fill(row(4), row(5), -std::numeric_limits<float>::infinity());
  row(4)[C - 2] = row(4)[C - 1] = 0.5f;
  std::fill(row(5), row(5) + C, -std::numeric_limits<float>::infinity());
  std::vector<std::int32_t> want(R);
  for (std::uint32_t r = 0; r < R; ++r) want[r] = std::int32_t(std::max_element(row(r), row(r) + C) - row(r));
  CHECK(want[3] == 2050);
  vkt::weight_store store;
  const auto& info = store.add_f32("test.logits", t, C, R);
  gpu::backend be;
  const auto table = be.load(info);
  const auto x = be.alloc(R, C);
  be.reserve(R, 0);
  auto kv = be.make_kv(vkt::small_kv());
  const auto b = vkt::batch_data::rows(R, 0);
  std::vector<std::int32_t> got(R, -1);
  be.begin(graph::step_inputs{b.view(), nullptr});
  be.embed(table, x.view(R));
  be.argmax(x.view(R), got);
  be.finish();
  CHECK(got == want);
}

// read() and argmax() hand back the first rows their host span holds (a padded step's own rows,
// graph/decoder.hpp), in a recorded step and when it replays; a span without one row is an error.
TEST_CASE("vulkan ops: read and argmax hand back the rows the host span holds") {
  if (!vkt::available()) return;
  constexpr std::uint32_t C = 96, R = 8;
  std::mt19937 rng(5);
  const auto t = vkt::normal_floats(std::size_t(R) * C, rng);
  std::vector<std::int32_t> want(R);
  for (std::uint32_t r = 0; r < R; ++r)
    want[r] = std::int32_t(std::max_element(t.begin() + r * C, t.begin() + (r + 1) * C) - (t.begin() + r * C));
  vkt::weight_store store;
  const auto& info = store.add_f32("test.rows", t, C, R);
  const auto b = vkt::batch_data::rows(R, 0);
  const auto check = [&](auto& be) {
    const auto table = be.load(info);
    const auto x = be.alloc(R, C);
    be.reserve(R, 0);
    auto kv = be.make_kv(vkt::small_kv());
    for (int pass = 0; pass < 2; ++pass) {  // recorded, then replayed (Vulkan)
      CAPTURE(pass);
      std::vector<float> rows(3 * C + 5, -1.0f);  // three rows and part of a fourth
      be.begin(graph::step_inputs{b.view(), nullptr});
      be.embed(table, x.view(R));
      be.read(x.view(R), rows);
      be.finish();
      CHECK(std::equal(rows.begin(), rows.begin() + 3 * C, t.begin()));
      CHECK(std::all_of(rows.begin() + 3 * C, rows.end(), [](float v) { return v == -1.0f; }));
      std::vector<std::int32_t> ids(5, -1);
      be.begin(graph::step_inputs{b.view(), nullptr, graph::step_output::argmax});
      be.embed(table, x.view(R));
      be.argmax(x.view(R), ids);
      be.finish();
      CHECK(ids == std::vector<std::int32_t>(want.begin(), want.begin() + 5));
    }
    std::vector<float> short_row(C - 1);
    be.begin(graph::step_inputs{b.view(), nullptr});
    be.embed(table, x.view(R));
    CHECK(test::error_of([&] { be.read(x.view(R), short_row); }) == "read: destination of 95 floats holds no row of 96");
    CHECK(test::error_of([&] { be.argmax(x.view(R), {}); }) == "argmax: no room for an id");
  };
  {
    gpu::backend be;
    check(be);
  }
  vkt::cpu_backend cpu;
  check(cpu);
}

#endif

}  // namespace
