// Loading hyper-parameters from GGUF metadata (arch/*.hpp load_hparams): every rejected file
// names the file and the key or tensor at fault; defaults are the documented ones; layer plans
// follow the keys (Llama 4's NoPE / chunk / MoE interleave). The files are built in memory.
#include <doctest/doctest.h>

#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "strata/arch/all.hpp"
#include "strata/gguf/writer.hpp"
#include "support/error_of.hpp"

namespace {

using namespace strata;

// A minimal model file of `arch`: the keys every family reads, a 4-row token_embd, and what
// `edit` changes. The reader views the bytes, which therefore never move.
struct model_file {
  std::string bytes;
  std::optional<gguf::reader> reader;
};
template <class Edit>
std::unique_ptr<model_file> make_file(const std::string& arch, Edit&& edit) {
  gguf::writer w;
  const auto k = [&](std::string_view s) { return arch + "." + std::string(s); };
  w.set(std::string(gguf::keys::architecture), std::string_view(arch));
  w.set(k(gguf::keys::context_length), std::uint32_t(256));
  w.set(k(gguf::keys::embedding_length), std::uint32_t(32));
  w.set(k(gguf::keys::block_count), std::uint32_t(4));
  w.set(k(gguf::keys::head_count), std::uint32_t(4));
  w.set(k(gguf::keys::head_count_kv), std::uint32_t(2));
  w.set(k(gguf::keys::feed_forward_length), std::uint32_t(64));
  w.set(k(gguf::keys::rms_eps), 1e-5f);
  std::vector<std::uint64_t> embd_shape{32, 4};
  edit(w, k, embd_shape);
  const std::vector<float> embd(embd_shape[0] * embd_shape[1], 0.5f);
  w.add_tensor("token_embd.weight", gguf::type_id::f32, embd_shape, std::as_bytes(std::span(embd)));
  std::ostringstream out;
  w.write(out);
  auto f = std::make_unique<model_file>();
  f->bytes = out.str();
  f->reader.emplace(std::as_bytes(std::span(f->bytes)), "test.gguf");
  return f;
}
std::unique_ptr<model_file> make_file(const std::string& arch) {
  return make_file(arch, [](auto&, auto&, auto&) {});
}

std::string load_error(const std::string& arch, auto&& edit) {
  const auto f = make_file(arch, edit);
  const auto e = test::error_of([&] { arch::visit(arch, [&](auto a) { return decltype(a)::load_hparams(*f->reader); }); });
  return e.empty() ? "(loaded)" : e;
}

bool has(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("hparams: a minimal llama file loads with the documented defaults") {
  const auto f = make_file("llama");
  const auto hp = arch::llama::load_hparams(*f->reader);
  CHECK(hp.arch == "llama");
  CHECK(hp.n_embd == 32);
  CHECK(hp.n_head_kv == 2);
  CHECK(hp.head_dim == 8);       // n_embd / n_head
  CHECK(hp.n_rot == 8);          // head_dim
  CHECK(hp.n_vocab == 4);        // rows of token_embd.weight
  CHECK(hp.rope_base == 10000.0f);
  CHECK(hp.rope_freq_scale == 1.0f);
  CHECK(hp.tied_output);         // no output.weight
  CHECK(arch::supported_names() == "llama, qwen3, qwen3moe, llama4");
}

TEST_CASE("hparams: missing and inconsistent keys are errors naming the file and the key") {
  using W = gguf::writer;
  CHECK(load_error("llama", [](W& w, auto& k, auto&) { w.remove(k(gguf::keys::context_length)); }) ==
        "test.gguf: missing metadata key 'llama.context_length'");
  CHECK(load_error("qwen3", [](W& w, auto& k, auto&) { w.remove(k(gguf::keys::rms_eps)); }) ==
        "test.gguf: missing metadata key 'qwen3.attention.layer_norm_rms_epsilon'");
  CHECK(load_error("llama", [](W& w, auto& k, auto&) { w.remove(k(gguf::keys::feed_forward_length)); }) ==
        "test.gguf: missing metadata key 'llama.feed_forward_length'");
  CHECK(has(load_error("llama", [](W& w, auto& k, auto&) { w.set(k(gguf::keys::block_count), std::uint32_t(0)); }),
            "must be non-zero"));
  CHECK(has(load_error("llama", [](W& w, auto& k, auto&) { w.set(k(gguf::keys::head_count_kv), std::uint32_t(3)); }),
            "head_count 4 is not a multiple of head_count_kv 3"));
  CHECK(has(load_error("llama", [](W& w, auto& k, auto&) { w.set(k(gguf::keys::value_length), std::uint32_t(16)); }),
            "value_length 16 != key_length 8"));
  CHECK(has(load_error("llama", [](W& w, auto& k, auto&) { w.set(k(gguf::keys::rope_dimension_count), std::uint32_t(4)); }),
            "rope.dimension_count 4 != head dim 8"));
  CHECK(has(load_error("llama", [](W& w, auto& k, auto&) { w.set(k("rope.scaling.type"), std::string_view("yarn")); }),
            "rope.scaling.type 'yarn' is not supported"));
  CHECK(has(load_error("llama", [](W& w, auto& k, auto&) { w.set(k(gguf::keys::context_length), std::uint64_t(1) << 33); }),
            "metadata key 'llama.context_length' = 8589934592 is out of range"));
  CHECK(has(load_error("llama", [](W&, auto&, std::vector<std::uint64_t>& embd) { embd = {16, 4}; }),
            "tensor 'token_embd.weight' has shape"));
}

TEST_CASE("hparams: MoE keys are checked for qwen3moe and llama4") {
  using W = gguf::writer;
  const auto moe = [](std::uint32_t n, std::uint32_t used) {
    return [=](W& w, auto& k, auto&) {
      w.set(k(gguf::keys::expert_count), n);
      w.set(k(gguf::keys::expert_used_count), used);
      w.set(k(gguf::keys::expert_feed_forward_length), std::uint32_t(16));
      w.set(k("interleave_moe_layer_step"), std::uint32_t(2));
    };
  };
  CHECK(load_error("qwen3moe", moe(8, 2)) == "(loaded)");
  CHECK(has(load_error("qwen3moe", moe(8, 9)), "expert_used_count 9 must be in 1..8"));
  CHECK(has(load_error("qwen3moe", moe(8, 0)), "expert_used_count 0 must be in 1..8"));
  CHECK(load_error("qwen3moe", [](W& w, auto& k, auto&) { w.set(k(gguf::keys::expert_used_count), std::uint32_t(2)); }) ==
        "test.gguf: missing metadata key 'qwen3moe.expert_count'");
  CHECK(load_error("llama4", [&](W& w, auto& k, auto& e) {
          moe(4, 1)(w, k, e);
          w.remove(k("interleave_moe_layer_step"));
        }) == "test.gguf: missing metadata key 'llama4.interleave_moe_layer_step'");
}

TEST_CASE("hparams: llama4 layer plans (NoPE every 4th layer with temperature, chunked layers, MoE interleave)") {
  const auto f = make_file("llama4", [](gguf::writer& w, auto& k, auto&) {
    w.set(k(gguf::keys::expert_count), std::uint32_t(4));
    w.set(k(gguf::keys::expert_used_count), std::uint32_t(1));
    w.set(k(gguf::keys::expert_feed_forward_length), std::uint32_t(16));
    w.set(k("interleave_moe_layer_step"), std::uint32_t(2));
  });
  const auto hp = arch::llama4::load_hparams(*f->reader);
  CHECK(hp.attn_chunk == 8192);
  CHECK(hp.use_qk_l2_norm);  // expert_count != 128
  for (std::uint32_t il = 0; il < 4; ++il) {
    CAPTURE(il);
    const auto p = arch::llama4::plan(hp, il);
    CHECK(p.rope == (il != 3));
    CHECK(p.moe == (il % 2 == 1));
    CHECK(p.attn_chunk == (il == 3 ? 0u : 8192u));
    CHECK(p.attn_temp_scale == (il == 3 ? 0.1 : 0.0));
    CHECK(p.qk_norm == (il != 3));
  }
  // sliding_window 0: no chunking; the NoPE rule then only reaches the last layer.
  const auto g = make_file("llama4", [](gguf::writer& w, auto& k, auto&) {
    w.set(k(gguf::keys::expert_count), std::uint32_t(128));
    w.set(k(gguf::keys::expert_used_count), std::uint32_t(1));
    w.set(k(gguf::keys::expert_feed_forward_length), std::uint32_t(16));
    w.set(k("interleave_moe_layer_step"), std::uint32_t(1));
    w.set(k("attention.sliding_window"), std::uint32_t(0));
  });
  const auto hq = arch::llama4::load_hparams(*g->reader);
  CHECK(hq.attn_chunk == 0);
  CHECK_FALSE(hq.use_qk_l2_norm);
  CHECK(arch::llama4::plan(hq, 2).rope);
  CHECK_FALSE(arch::llama4::plan(hq, 3).rope);
}

TEST_CASE("hparams: an unknown architecture names the supported ones") {
  const auto f = make_file("gpt2");
  CHECK(test::error_of([&] { arch::visit("gpt2", [&](auto a) { return decltype(a)::load_hparams(*f->reader); }); }) ==
        "unknown architecture 'gpt2' (supported: llama, qwen3, qwen3moe, llama4)");
}
