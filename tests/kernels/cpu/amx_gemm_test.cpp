// The AMX tier's packed GEMM (kernels/cpu/x86/amx_gemm.hpp) against the scalar gemm_reference,
// bit for bit, for every format it handles: random weights (quantized rows and raw random block
// bytes, which reach every scale digit, Q6_K's −128 and Q4_K's 63), 1..40 tokens (below the AMX
// threshold, whole 16-token tiles and their tails), odd row counts (a partial last group), several
// K and group ranges that start past 0; and a fixture model (qwen3 Q4_K_M: Q4_K and Q6_K
// matrices) whose prompt and decode logits on the amx table are avx512_vnni's bit for bit.
// Without AMX (CPU, kernel permission or build) every case says so and checks nothing.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu/kernel_checks.hpp"
#include "strata/arch/all.hpp"
#include "strata/graph/decoder.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace strata;
using namespace strata::test::kernels;
using strata::kernels::cpu::gemm_args;
using strata::kernels::cpu::pack_rows;
using strata::kernels::cpu::packed_groups;

bool have_amx() {
  if (int(rt::best_isa()) >= int(isa::amx)) return true;
  MESSAGE("skipping: no AMX tier on this CPU/kernel/build (best tier " << strata::kernels::cpu::name_of(rt::best_isa()) << ")");
  return false;
}

template <class Fmt>
void check_format(std::size_t n_rows, std::size_t blocks, bool raw, std::mt19937& rng, std::size_t max_tok = 40) {
  const auto& r = strata::kernels::cpu::reference_table()[std::size_t(Fmt::gguf_type)];
  const auto& amx = rt::select_kernel_table(isa::amx)[std::size_t(Fmt::gguf_type)];
  REQUIRE(bool(r.pack_group));
  REQUIRE(bool(amx.gemm != r.gemm));
  const std::size_t k = blocks * Fmt::block_elems;
  CAPTURE(Fmt::name);
  CAPTURE(n_rows);
  CAPTURE(k);
  CAPTURE(raw);
  std::vector<typename Fmt::block> w;
  for (std::size_t n = 0; n < n_rows; ++n) {
    const auto row = random_weights<Fmt>(k, rng, raw || n % 3 == 1);
    w.insert(w.end(), row.begin(), row.end());
  }
  const std::size_t groups = packed_groups(n_rows), group_bytes = pack_rows * r.row_bytes(k);
  std::vector<std::uint8_t> packed(groups * group_bytes);
  for (std::size_t g = 0; g < groups; ++g) r.pack_group(w.data(), n_rows, k, g, packed.data() + g * group_bytes);
  const std::size_t stride = r.gemm_act_bytes(k) + 12;  // rows not back to back, as the backend may lay them out
  std::vector<std::uint8_t> act(max_tok * stride);
  for (std::size_t t = 0; t < max_tok; ++t) {
    const auto x = t % 5 == 4 ? tie_floats(k, rng) : random_floats(k, rng);
    r.quantize_act_row(x.data(), act.data() + t * stride, k);
    if (r.prepare_act) r.prepare_act(act.data() + t * stride, k);
  }
  const std::size_t y_stride = n_rows + 5;
  const auto args = [&](std::size_t n_tok, std::vector<float>& y) {
    gemm_args a;
    a.w = packed.data();
    a.group_bytes = group_bytes;
    a.group_begin = 0;
    a.group_end = groups;
    a.act = act.data();
    a.act_stride = stride;
    a.act_row_bytes = r.act_row_bytes(k);
    a.n_tok = n_tok;
    y.assign(n_tok * y_stride, -1.0f);
    a.y = y.data();
    a.y_stride = y_stride;
    a.n_rows = n_rows;
    a.k = k;
    return a;
  };
  std::vector<float> want, got;
  r.gemm(args(max_tok, want));
  for (std::size_t n_tok = 1; n_tok <= max_tok; ++n_tok) {
    CAPTURE(n_tok);
    amx.gemm(args(n_tok, got));
    std::size_t bad = 0;
    for (std::size_t t = 0; t < n_tok; ++t) {
      bad += std::memcmp(got.data() + t * y_stride, want.data() + t * y_stride, n_rows * 4) != 0;
      for (std::size_t n = n_rows; n < y_stride; ++n) bad += got[t * y_stride + n] != -1.0f;  // padding rows untouched
    }
    CHECK(bad == 0);
  }
  {  // an empty group range writes nothing
    auto a = args(std::min<std::size_t>(max_tok, 35), got);
    a.group_begin = a.group_end = groups;
    amx.gemm(a);
    std::size_t bad = 0;
    for (const float v : got) bad += v != -1.0f;
    CHECK(bad == 0);
  }
  if (groups > 1) {  // a range that starts at group 1, whole AMX tiles and a tail
    auto a = args(std::min<std::size_t>(max_tok, 35 + (max_tok - 40)), got);
    a.group_begin = 1;
    amx.gemm(a);
    std::size_t bad = 0;
    for (std::size_t t = 0; t < a.n_tok; ++t) {
      bad += std::memcmp(got.data() + t * y_stride + pack_rows, want.data() + t * y_stride + pack_rows, (n_rows - pack_rows) * 4) != 0;
      bad += got[t * y_stride] != -1.0f;
    }
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("amx gemm: Q8_0, Q4_K and Q6_K equal the reference bit for bit for 1..40 tokens") {
  if (!have_amx()) return;
  std::mt19937 rng(41);
  for (const bool raw : {false, true})
    for (const std::size_t n_rows : {std::size_t(1), std::size_t(16), std::size_t(37), std::size_t(50)}) {
      for (const std::size_t blocks : {1u, 3u, 4u, 9u}) check_format<quant::q8_0>(n_rows, blocks, raw, rng);
      for (const std::size_t blocks : {1u, 2u, 3u}) {
        check_format<quant::q4_k>(n_rows, blocks, raw, rng);
        check_format<quant::q6_k>(n_rows, blocks, raw, rng);
      }
    }
}

// Q8_0's kernel cuts K into segments of 32 blocks (the running sums wait in memory between
// them), takes groups in batches of at most 256 KiB of B scratch and 16-token tiles in pairs:
// K of 33 and 70 blocks (a 1- and a 6-block last segment), 117 rows (8 groups: several batches
// at 70 blocks, a partial last group) and up to 70 tokens (4 tiles and a tail).
TEST_CASE("amx gemm: Q8_0 over several K segments, group batches and token tiles equals the reference") {
  if (!have_amx()) return;
  std::mt19937 rng(43);
  for (const bool raw : {false, true})
    for (const std::size_t blocks : {33u, 70u}) check_format<quant::q8_0>(117, blocks, raw, rng, 70);
}

// The K-quant kernel cuts K into segments (as many blocks as keep the call's groups' B tiles
// within 256 KiB, at least 2; the running sums wait in y between them): 9 blocks and 117 rows
// (8 groups: 3 segments of Q4_K, 5 of Q6_K, the last shorter) and up to 70 tokens (tile pairs,
// a single tile and a tail).
TEST_CASE("amx gemm: Q4_K and Q6_K over several K segments and token tiles equal the reference") {
  if (!have_amx()) return;
  std::mt19937 rng(44);
  for (const bool raw : {false, true}) {
    check_format<quant::q4_k>(117, 9, raw, rng, 70);
    check_format<quant::q6_k>(117, 9, raw, rng, 70);
  }
}

TEST_CASE("amx gemm: other formats keep the avx512_vnni kernels") {
  if (!have_amx()) return;
  const auto &amx = rt::select_kernel_table(isa::amx), &vnni = rt::select_kernel_table(isa::avx512_vnni);
  std::size_t own = 0;
  for (std::size_t i = 0; i < amx.size(); ++i) {
    CHECK(bool(amx[i].dot_row == vnni[i].dot_row));
    CHECK(bool(amx[i].quantize_act_row == vnni[i].quantize_act_row));
    CHECK(bool(amx[i].pack_group == vnni[i].pack_group));
    own += amx[i].gemm != vnni[i].gemm;
  }
  CHECK(own == 3);  // Q8_0, Q4_K, Q6_K
  CHECK(bool(amx.attention == vnni.attention));
}

TEST_CASE("amx gemm: a fixture model's prompt and decode logits equal avx512_vnni's bit for bit") {
  if (!have_amx()) return;
  gguf::file f(test::fixture_dir() / "models" / "qwen3-Q4_K_M.gguf");
  const auto hp = arch::qwen3::load_hparams(f.gguf());
  kv::kv_config cfg;
  cfg.n_layer = hp.n_layer;
  cfg.n_head_kv = hp.n_head_kv;
  cfg.head_dim = hp.head_dim;
  cfg.n_ctx = 64;
  using cpu = kernels::cpu::backend;
  std::vector<float> logits[2];
  for (int i = 0; i < 2; ++i) {
    cpu be(2, rt::select_kernel_table(i ? isa::amx : isa::avx512_vnni));
    graph::decoder<arch::qwen3, cpu> dec(be, f.gguf(), {.max_batch = 40});
    auto kv = be.make_kv(cfg);
    kv::block_table table(cfg);
    // A 37-token prompt (two AMX tiles and a tail), logits for every row, then one decode step.
    for (const std::uint32_t n : {37u, 1u}) {
      const std::uint32_t pos0 = n == 1 ? 37 : 0;
      std::vector<std::int32_t> ids, pos;
      std::vector<std::uint32_t> seq(n, 0);
      std::vector<std::uint8_t> want(n, 1);
      for (std::uint32_t j = 0; j < n; ++j) {
        ids.push_back(std::int32_t(5 + 11 * (pos0 + j)) % std::int32_t(hp.n_vocab));
        pos.push_back(std::int32_t(pos0 + j));
      }
      const graph::batch b{ids, pos, seq, want};
      std::vector<float> out(std::size_t(n) * hp.n_vocab);
      table.reserve_step(b.seq_ids, b.positions);
      dec.forward(b, table, kv, out);
      table.commit_step(b.seq_ids, b.tokens);
      logits[i].insert(logits[i].end(), out.begin(), out.end());
    }
  }
  REQUIRE(logits[0].size() == logits[1].size());
  CHECK(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * sizeof(float)) == 0);
}
