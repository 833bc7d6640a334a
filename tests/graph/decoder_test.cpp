// graph::decoder: what it asks of a backend (trace_backend: which ops each architecture's layer
// plans produce, with which plain parameters and KV layers), its layer slices (-ngl: no embedding,
// no head, KV layers counted from the slice) and its errors; and, on the CPU backend, that a
// model cut into two slices computes the whole model's logits bit for bit.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "graph/trace_backend.hpp"
#include "strata/arch/all.hpp"
#include "strata/graph/decoder.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "support/error_of.hpp"
#include "support/fixtures.hpp"

namespace {

using namespace strata;
using test::trace_backend;

std::filesystem::path model_path(const std::string& name) { return test::fixture_dir() / "models" / name; }

using test::error_of;

// n tokens of sequence 0 at positions pos0.., logits for the last one only (or every one).
struct tokens {
  std::vector<std::int32_t> ids, pos;
  std::vector<std::uint32_t> seq;
  std::vector<std::uint8_t> want;
  tokens(std::uint32_t n, std::uint32_t pos0 = 0, bool every_row = false) {
    for (std::uint32_t i = 0; i < n; ++i) {
      ids.push_back(std::int32_t(7 + 13 * i) % 1000);
      pos.push_back(std::int32_t(pos0 + i));
      seq.push_back(0);
      want.push_back(every_row || i + 1 == n);
    }
  }
  graph::batch view() const { return {ids, pos, seq, want}; }
};

// Runs one step of `dec` on the trace backend (the block table is never read by it).
template <class Dec>
void trace_step(Dec& dec, trace_backend::kv_state& kv, const tokens& t, bool greedy = false) {
  kv::block_table table(64, 16, 1);
  std::vector<float> logits(dec.hparams().n_vocab * t.ids.size());
  std::vector<std::int32_t> ids(t.ids.size());
  if (greedy) dec.forward(t.view(), table, kv, {}, {}, {}, ids);
  else dec.forward(t.view(), table, kv, logits);
}

}  // namespace

TEST_CASE("decoder: llama4 layer plans become plain op parameters (NoPE temperature, chunks, MoE routing)") {
  gguf::file f(model_path("llama4-Q4_K_M.gguf"));
  trace_backend be;
  graph::decoder<arch::llama4, trace_backend> dec(be, f.gguf(), {.max_batch = 8});
  const auto& hp = dec.hparams();
  REQUIRE(hp.n_layer == 4);
  CHECK(be.reserved_tokens == 8);
  CHECK(be.reserved_routed == 8 * hp.n_expert_used);
  auto kv = be.make_kv({});
  trace_step(dec, kv, tokens(3, 5));

  const auto names = be.names();
  CHECK(names.front() == "begin");
  CHECK(names[1] == "embed");
  CHECK(names.back() == "finish");
  CHECK(be.step.tokens.size() == 3);
  CHECK(be.step.kv != nullptr);
  CHECK(be.step.output == graph::step_output::logits);
  // Layer 3 (every 4th) is NoPE: no RoPE, Q scaled by the temperature; the others rotate Q and K.
  CHECK(be.count("rope") == 2 * 3);
  REQUIRE(be.scales.size() == 1);
  CHECK(be.scales[0].scale == 0.1);
  CHECK(be.scales[0].floor_base == 8192.0f);
  for (const auto& r : be.ropes) {
    CHECK_FALSE(r.neox);
    CHECK(r.n_rot == hp.n_rot);
  }
  // Chunked attention on 3 of 4 layers, global on the NoPE layer.
  REQUIRE(be.attentions.size() == 4);
  for (std::uint32_t il = 0; il < 4; ++il) CHECK(be.attentions[il].chunk == (il == 3 ? 0u : hp.attn_chunk));
  CHECK(be.attentions[0].scale == doctest::Approx(1.0 / std::sqrt(double(hp.head_dim))));
  // MoE every 2nd layer: sigmoid gate weighting the expert input, plus the shared expert.
  REQUIRE(be.moes.size() == 2);
  for (const auto& m : be.moes) {
    CHECK(m.gating == graph::moe_gating::sigmoid);
    CHECK(m.weighting == graph::moe_weighting::input);
    CHECK(m.n_used == hp.n_expert_used);
  }
  CHECK(be.count("swiglu") == 2 + 2);  // dense layers 0, 2 and the shared experts of 1, 3
  // The KV of layer il is layer il of the cache, stored before it is read.
  std::vector<std::uint32_t> stored, read;
  for (const auto& o : be.ops) {
    if (o.name == "kv_store") stored.push_back(o.layer);
    if (o.name == "attention") {
      read.push_back(o.layer);
      CHECK(stored.size() == read.size());
    }
  }
  CHECK(stored == std::vector<std::uint32_t>{0, 1, 2, 3});
  // Head: one logits row out of 3 tokens, selected before the output norm, then read back.
  const auto sel = std::find(names.begin(), names.end(), "select_rows");
  REQUIRE(sel != names.end());
  CHECK(be.ops[std::size_t(sel - names.begin())].rows == 1);
  CHECK(names[names.size() - 2] == "read");
}

TEST_CASE("decoder: qwen3moe routes with a renormalised softmax and rotates NEOX pairs") {
  gguf::file f(model_path("qwen3moe-Q4_K_M.gguf"));
  trace_backend be;
  graph::decoder<arch::qwen3_moe, trace_backend> dec(be, f.gguf(), {.max_batch = 4});
  auto kv = be.make_kv({});
  trace_step(dec, kv, tokens(2, 0, true), true);
  const auto& hp = dec.hparams();
  REQUIRE(be.moes.size() == hp.n_layer);
  for (const auto& m : be.moes) {
    CHECK(m.gating == graph::moe_gating::softmax);
    CHECK(m.weighting == graph::moe_weighting::output);
  }
  for (const auto& r : be.ropes) CHECK(r.neox);
  CHECK(be.scales.empty());
  CHECK(be.step.output == graph::step_output::argmax);
  CHECK(be.count("select_rows") == 0);  // every row produces logits
  CHECK(be.count("argmax") == 1);
  CHECK(be.count("read") == 0);
  // QK norm before RoPE, weighted per head: 2 norms per layer besides the attention and FFN norms.
  std::size_t head_norms = 0;
  for (const auto& o : be.ops)
    head_norms += o.name == "rms_norm" && (o.weight.find("attn_q_norm") != std::string::npos ||
                                           o.weight.find("attn_k_norm") != std::string::npos);
  CHECK(head_norms == 2 * hp.n_layer);
}

TEST_CASE("decoder: a layer slice loads only its tensors, takes and hands out hidden states") {
  gguf::file f(model_path("llama-Q4_K_M.gguf"));
  trace_backend be;
  graph::decoder<arch::llama, trace_backend> dec(
      be, f.gguf(), {.max_batch = 4, .first_layer = 1, .n_layers = 2, .embed = false, .head = false});
  CHECK(dec.n_layers() == 2);
  for (const auto& n : be.loaded) {
    CHECK(n.rfind("token_embd", 0) == std::string::npos);
    CHECK(n.rfind("output", 0) == std::string::npos);
    CHECK(n.rfind("blk.0.", 0) == std::string::npos);
    CHECK(n.rfind("blk.3.", 0) == std::string::npos);
  }
  CHECK(std::count(be.loaded.begin(), be.loaded.end(), "rope_freqs.weight") == 1);
  auto kv = be.make_kv({});
  const tokens t(3);
  kv::block_table table(64, 16, 1);
  std::vector<float> hidden(3 * dec.hparams().n_embd);
  dec.forward(t.view(), table, kv, {}, hidden, hidden);
  const auto names = be.names();
  CHECK(names[1] == "write");
  CHECK(names[names.size() - 2] == "read");
  CHECK(be.count("embed") == 0);
  CHECK(be.count("kv_store") == 2);
  CHECK(be.ops[std::size_t(std::find(names.begin(), names.end(), "kv_store") - names.begin())].layer == 0);
  for (const auto& o : be.ops)
    if (o.name == "rope") CHECK(o.weight == "rope_freqs.weight");  // Llama 3.1 frequency factors
  CHECK(be.step.output == graph::step_output::hidden);
}

TEST_CASE("decoder: an embedding step reads the flagged rows' final-norm states and skips the LM head") {
  gguf::file f(model_path("qwen3-Q4_K_M.gguf"));
  trace_backend be;
  graph::decoder<arch::qwen3, trace_backend> dec(be, f.gguf(), {.max_batch = 4});
  auto kv = be.make_kv({});
  kv::block_table table(64, 16, 1);
  std::vector<float> embd(2 * dec.hparams().n_embd);
  tokens t(3);
  t.want = {1, 0, 1};
  dec.forward(t.view(), table, kv, {}, {}, {}, {}, embd);
  CHECK(be.step.output == graph::step_output::hidden);
  const auto names = be.names();
  REQUIRE(names.size() >= 4);
  CHECK(names[names.size() - 4] == "select_rows");  // the 2 flagged rows, then the output norm
  CHECK(names[names.size() - 3] == "rms_norm");
  CHECK(be.ops[names.size() - 3].weight == "output_norm.weight");
  CHECK(names[names.size() - 2] == "read");
  CHECK(be.ops[names.size() - 2].rows == 2);
  for (const auto& o : be.ops)
    if (o.name == "matmul") CHECK(o.weight != "token_embd.weight");  // qwen3's tied LM head is not applied
  CHECK(error_of([&] { dec.forward(t.view(), table, kv, {}, {}, {}, {}, std::span(embd).first(10)); }) ==
        "embedding buffer too small");
}

TEST_CASE("decoder: bad slices and bad steps are errors naming the limit") {
  gguf::file f(model_path("llama-Q4_K_M.gguf"));
  trace_backend be;
  CHECK(error_of([&] { graph::decoder<arch::llama, trace_backend>(be, f.gguf(), {.first_layer = 4}); }) ==
        "layer slice starts at 4 but the model has 4 layers");
  CHECK(error_of([&] { graph::decoder<arch::llama, trace_backend>(be, f.gguf(), {.first_layer = 2, .n_layers = 3}); }) ==
        "layer slice [2, 5) exceeds the model's 4 layers");

  graph::decoder<arch::llama, trace_backend> dec(be, f.gguf(), {.max_batch = 4, .max_outputs = 2});
  auto kv = be.make_kv({});
  kv::block_table table(64, 16, 1);
  std::vector<float> logits(4 * 1024);
  CHECK(error_of([&] { dec.forward(tokens(5).view(), table, kv, logits); }) == "batch of 5 tokens exceeds the maximum 4");
  CHECK(error_of([&] { dec.forward(tokens(3, 0, true).view(), table, kv, logits); }) ==
        "batch asks for 3 logits rows, the maximum is 2");
  CHECK(error_of([&] { dec.forward(tokens(2, 0, true).view(), table, kv, std::span(logits).first(1024)); }) ==
        "logits buffer too small");
  tokens bad(1);
  bad.ids[0] = 1024;
  CHECK(error_of([&] { dec.forward(bad.view(), table, kv, logits); }) == "token id 1024 out of range (vocabulary size 1024)");

  graph::decoder<arch::llama, trace_backend> tail(be, f.gguf(), {.max_batch = 4, .first_layer = 2, .embed = false});
  std::vector<float> hidden(256);
  CHECK(error_of([&] { tail.forward(tokens(2).view(), table, kv, logits, hidden); }) ==
        "hidden-state input too small for the batch");
  be.ops.clear();
  tail.forward(tokens(0).view(), table, kv, logits);  // an empty step does nothing
  CHECK(be.ops.empty());
}

TEST_CASE("decoder slices on the CPU backend compute the whole model's logits bit for bit") {
  gguf::file f(model_path("qwen3-Q4_K_M.gguf"));
  const auto hp = arch::qwen3::load_hparams(f.gguf());
  kv::kv_config cfg;
  cfg.n_head_kv = hp.n_head_kv;
  cfg.head_dim = hp.head_dim;
  cfg.n_ctx = 64;
  using cpu = kernels::cpu::backend;
  cpu whole_be(2, kernels::cpu::reference_table()), head_be(2, kernels::cpu::reference_table()),
      tail_be(2, kernels::cpu::reference_table());
  graph::decoder<arch::qwen3, cpu> whole(whole_be, f.gguf(), {.max_batch = 8});
  graph::decoder<arch::qwen3, cpu> first(head_be, f.gguf(), {.max_batch = 8, .n_layers = 1, .head = false});
  graph::decoder<arch::qwen3, cpu> rest(tail_be, f.gguf(), {.max_batch = 8, .first_layer = 1, .embed = false});
  cfg.n_layer = hp.n_layer;
  auto whole_kv = whole_be.make_kv(cfg);
  cfg.n_layer = 1;
  auto first_kv = head_be.make_kv(cfg);
  cfg.n_layer = hp.n_layer - 1;
  auto rest_kv = tail_be.make_kv(cfg);
  kv::block_table table(cfg);  // one table for every decoder: same slots, same positions
  std::vector<float> a(8 * hp.n_vocab), b(a.size()), hidden(8 * hp.n_embd);
  for (const auto& t : {tokens(6, 0, true), tokens(1, 6), tokens(2, 7, true)}) {
    const auto bv = t.view();
    table.reserve_step(bv.seq_ids, bv.positions);
    whole.forward(bv, table, whole_kv, a);
    first.forward(bv, table, first_kv, {}, {}, hidden);
    rest.forward(bv, table, rest_kv, b, hidden);
    table.commit_step(bv.seq_ids, bv.tokens);
    const std::size_t n = bv.n_outputs() * hp.n_vocab;
    CHECK(std::memcmp(a.data(), b.data(), n * sizeof(float)) == 0);
  }
}

namespace {

// The rows of the last op named `name` in be's trace.
std::uint32_t rows_of(const trace_backend& be, const std::string& name) {
  for (auto it = be.ops.rbegin(); it != be.ops.rend(); ++it)
    if (it->name == name) return it->rows;
  return 0;
}

}  // namespace

TEST_CASE("decoder: a recording backend's steps are padded with copies of the last token (step_rows)") {
  using test::padding_trace_backend;
  gguf::file f(model_path("qwen3-Q4_K_M.gguf"));
  padding_trace_backend be;
  graph::decoder<arch::qwen3, padding_trace_backend> dec(be, f.gguf(), {.max_batch = 8});
  auto kv = be.make_kv({});
  kv::block_table table(64, 16, 4);
  std::vector<float> logits(8 * dec.hparams().n_vocab);
  using ids = std::vector<std::int32_t>;
  using seqs = std::vector<std::uint32_t>;
  using flags = std::vector<std::uint8_t>;

  SUBCASE("decode of three streams: every row produces logits, the host gets three") {
    const ids tok{5, 6, 7}, pos{10, 3, 0};
    const seqs seq{0, 1, 2};
    const flags want{1, 1, 1};
    dec.forward({tok, pos, seq, want}, table, kv, logits);
    CHECK(be.step_tokens == ids{5, 6, 7, 7, 7, 7, 7, 7});
    CHECK(be.step_positions == ids{10, 3, 0, 0, 0, 0, 0, 0});
    CHECK(be.step_seq_ids == seqs{0, 1, 2, 2, 2, 2, 2, 2});
    CHECK(be.step_logits == flags{1, 1, 1, 1, 1, 1, 1, 1});
    CHECK(be.step.outputs == 8);
    CHECK(be.step.padding == 5);
    CHECK(rows_of(be, "embed") == 8);
    CHECK(rows_of(be, "attention") == 8);
    CHECK(be.count("select_rows") == 0);  // every row is an output: the norm reads them in place
    CHECK(rows_of(be, "read") == 8);
    CHECK(be.host_rows == 3);
    std::vector<std::int32_t> next(3);
    dec.forward({tok, pos, seq, want}, table, kv, {}, {}, {}, next);  // greedy: three ids
    CHECK(rows_of(be, "argmax") == 8);
    CHECK(be.host_rows == 3);
  }
  SUBCASE("a prompt of five tokens: copies want no logits, one output row") {
    dec.forward(tokens(5, 20).view(), table, kv, logits);
    CHECK(be.step_tokens.size() == 8);
    CHECK(be.step_positions == ids{20, 21, 22, 23, 24, 24, 24, 24});
    CHECK(be.step_logits == flags{0, 0, 0, 0, 1, 0, 0, 0});
    CHECK(be.step.outputs == 1);
    CHECK(be.step.padding == 3);
    CHECK(rows_of(be, "select_rows") == 1);
    CHECK(be.host_rows == 1);
  }
  SUBCASE("three of five rows want logits: the output rows are padded on their own") {
    tokens t(5);
    t.want = {1, 0, 1, 0, 1};
    dec.forward(t.view(), table, kv, logits);
    CHECK(be.step_logits == flags{1, 0, 1, 0, 1, 0, 0, 0});
    CHECK(be.step.outputs == 8);  // step_rows(3)
    CHECK(rows_of(be, "select_rows") == 8);
    CHECK(rows_of(be, "read") == 8);
    CHECK(be.host_rows == 3);
  }
  SUBCASE("sizes the backend runs as they are are not padded") {
    dec.forward(tokens(2, 0, true).view(), table, kv, logits);
    CHECK(be.step_tokens.size() == 2);
    CHECK(be.step.outputs == 2);
    CHECK(be.step.padding == 0);
    CHECK(be.host_rows == 2);
  }
  SUBCASE("output rows stay within max_outputs") {
    padding_trace_backend be2;
    graph::decoder<arch::qwen3, padding_trace_backend> few(be2, f.gguf(), {.max_batch = 8, .max_outputs = 4});
    auto kv2 = be2.make_kv({});
    few.forward(tokens(3, 0, true).view(), table, kv2, logits);
    CHECK(be2.step_logits == flags{1, 1, 1, 0, 0, 0, 0, 0});  // 8 logits rows would exceed 4
    CHECK(be2.step.outputs == 4);
    CHECK(rows_of(be2, "select_rows") == 4);
    CHECK(be2.host_rows == 3);
  }
  SUBCASE("a slice without the embedding takes hidden states as they come") {
    padding_trace_backend be3;
    graph::decoder<arch::qwen3, padding_trace_backend> tail(be3, f.gguf(), {.max_batch = 8, .first_layer = 1, .embed = false});
    auto kv3 = be3.make_kv({});
    std::vector<float> hidden(3 * tail.hparams().n_embd);
    tail.forward(tokens(3).view(), table, kv3, logits, hidden);
    CHECK(be3.step_tokens.size() == 3);
    CHECK(rows_of(be3, "write") == 3);
  }
}
