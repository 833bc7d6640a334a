// strata-mkmodel's generator (apps/mkmodel): tiny presets reproduce the fixture models' tensor
// names, types and shapes for every file type in the fixture manifests and their hyper-parameter
// keys; output is deterministic per seed and independent of the thread count; every generated
// tensor dequantizes to finite values of the intended scale; big presets are checked from the
// plan alone (no data is generated for them).
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <unordered_set>

#include "generate.hpp"
#include "random_blocks.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/quant/all.hpp"
#include "support/fixtures.hpp"
#include "support/manifest.hpp"
#include "vocab.hpp"

namespace mk = strata::mkmodel;
namespace gguf = strata::gguf;
using strata::test::manifest_model;

namespace {

// Tolerances of the value checks. The super-scales are calibrated analytically for random codes,
// so the sample std of a tensor differs from sigma only by sampling error (< 1% for >= 16k
// elements), the 4096-level quantile table of the float types (-0.3%) and fp16 rounding of tiny
// (subnormal) Q6_K/Q5_K scales (< 1%): 10% is a loose bound that still catches a wrong formula.
constexpr double weight_sigma = 0.02, router_sigma = 0.1, sigma_rel_tol = 0.10;
constexpr double router_rel_tol = 0.15;  // tiny routers have 1024 elements: the rms has a 2.2% sampling sd
constexpr double norm_mean_tol = 0.01;  // norms are 1 ± 5% uniform: mean within 1%

std::vector<std::byte> generate(const mk::options& o) { return mk::plan_model(o).writer.to_bytes(); }

mk::options opts(std::string preset, std::string type) {
  mk::options o;
  o.preset = std::move(preset);
  o.type = std::move(type);
  return o;
}

// All fixture models with a tensor list: the local manifest's and the shared one's (every entry,
// shipped or not: unshipped variants keep their tensor lists). Empty if neither exists.
std::vector<manifest_model> fixture_models() {
  std::map<std::string, manifest_model> by_name;
  const auto local = strata::test::fixture_dir() / "models" / "manifest.json";
  if (std::filesystem::exists(local))
    for (auto& m : strata::test::load_manifest(local, strata::test::fixture_dir())) by_name.emplace(m.name, std::move(m));
  if (const auto dir = strata::test::shared_fixture_dir(); !dir.empty())
    for (auto& m : strata::test::load_manifest(dir / "manifest.json", dir)) by_name.emplace(m.name, std::move(m));
  std::vector<manifest_model> out;
  for (auto& [n, m] : by_name) out.push_back(std::move(m));
  return out;
}

std::string shape(std::span<const std::uint64_t> ne) {
  std::string s;
  for (auto d : ne) {
    if (!s.empty()) s += ',';
    s += std::to_string(d);
  }
  return s;
}

// Dequantizes a whole tensor with Strata's reference formats.
std::vector<float> dequant(const gguf::tensor_info& t) {
  std::vector<float> y(t.n_elements());
  strata::quant::visit(t.type, [&](auto fmt) {
    using F = decltype(fmt);
    std::vector<typename F::block> blocks(t.nbytes / sizeof(typename F::block));
    std::memcpy(blocks.data(), t.data.data(), t.nbytes);
    strata::quant::dequant_row<F>(blocks.data(), y.data(), y.size());
  });
  return y;
}

}  // namespace

TEST_CASE("tiny presets reproduce the fixture models' tensors and hyper-parameters") {
  const auto models = fixture_models();
  if (models.empty()) {
    MESSAGE("no fixture manifest (tests/fixtures/models or ../shared/fixtures): skipped");
    return;
  }
  int compared = 0;
  for (const auto& fm : models) {
    CAPTURE(fm.name);
    const mk::options o = opts("tiny-" + fm.arch, fm.variant);
    REQUIRE(mk::find_preset(o.preset));
    REQUIRE(mk::find_ftype(o.type));
    const auto bytes = generate(o);
    const gguf::reader r(bytes, fm.name);
    REQUIRE(r.tensors().size() == fm.tensors.size());
    for (const auto& want : fm.tensors) {
      CAPTURE(want.name);
      const auto* got = r.find_tensor(want.name);
      REQUIRE(got);
      CHECK(gguf::name_of(got->type) == want.type);
      CHECK(shape(std::span(got->ne).first(got->n_dims)) == shape(want.ne));
    }
    ++compared;

    // Every hyper-parameter key of the fixture file, with the same value.
    if (!std::filesystem::exists(fm.path)) continue;
    const gguf::file f(fm.path);
    CHECK(r.get_uint("general.file_type") == f->get_uint("general.file_type"));
    for (const auto& [key, v] : f->metadata()) {
      if (!key.starts_with(fm.arch + ".")) continue;
      CAPTURE(key);
      REQUIRE(r.contains(key));
      CHECK(r.at(key).type() == v.type());
      CHECK(r.get_number(key) == v.as_number());
    }
    for (const char* key : {"tokenizer.ggml.model", "tokenizer.ggml.pre"}) CHECK(r.get_string(key) == f->get_string(key));
    for (const char* key : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"})
      CHECK(r.get_uint(key) == f->get_uint(key));
    CHECK(r.find_uint("tokenizer.ggml.padding_token_id") == f->find_uint("tokenizer.ggml.padding_token_id"));
    CHECK(r.get_bool("tokenizer.ggml.add_bos_token") == f->get_bool("tokenizer.ggml.add_bos_token"));
    CHECK(r.at("tokenizer.ggml.tokens").size() == f->at("tokenizer.ggml.tokens").size());
    CHECK(r.get_string("tokenizer.chat_template") == f->get_string("tokenizer.chat_template"));
    if (const auto* rope = f->find_tensor("rope_freqs.weight")) {  // exact converter arithmetic
      const auto& ours = r.tensor("rope_freqs.weight");
      REQUIRE(ours.nbytes == rope->nbytes);
      CHECK(std::memcmp(ours.data.data(), rope->data.data(), rope->nbytes) == 0);
    }
  }
  MESSAGE("compared " << compared << " fixture models");
}

TEST_CASE("output is deterministic per seed and independent of the thread count") {
  mk::options o = opts("tiny-qwen3moe", "Q4_K_M");
  o.seed = 7;
  o.threads = 1;
  const auto a = generate(o);
  o.threads = 5;
  const auto b = generate(o);
  CHECK(a == b);
  o.seed = 8;
  const auto c = generate(o);
  REQUIRE(c.size() == a.size());
  CHECK(c != a);
  const gguf::reader ra(a), rc(c);
  CHECK(ra.data_offset() == rc.data_offset());  // only the tensor data changes
  CHECK(std::memcmp(a.data(), c.data(), ra.data_offset()) == 0);

  // The file written through the asynchronous sink is byte-identical to the in-memory one.
  const auto dir = std::filesystem::temp_directory_path() / "strata_mkmodel_test";
  std::filesystem::create_directories(dir);
  const auto path = dir / "tiny-qwen3moe.gguf";
  o.seed = 7;
  const auto st = mk::write_model(mk::plan_model(o), path);
  CHECK(st.bytes == a.size());
  CHECK(strata::test::read_bytes(path) == a);
  CHECK_FALSE(std::filesystem::exists(path.string() + ".tmp"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("tensor bytes do not depend on how they are requested") {
  // The writer asks for 16 MiB pieces; any cut (here odd-sized, crossing the ~256 KiB generation
  // chunks and the 144-byte blocks) and any thread count must give the same bytes.
  for (const auto type : {gguf::type_id::q4_k, gguf::type_id::f16, gguf::type_id::q8_0}) {
    CAPTURE(gguf::name_of(type));
    mk::fill_spec fs;
    fs.type = type;
    fs.seed = mk::tensor_seed(3, "blk.0.ffn_up.weight");
    fs.nbytes = std::uint64_t(gguf::block_bytes(type)) * 9000;
    std::vector<std::byte> whole(fs.nbytes), pieces(fs.nbytes);
    mk::fill_tensor(fs, 0, whole, 1);
    for (std::uint64_t off = 0; off < fs.nbytes; off += 100003) {
      const auto n = std::min<std::uint64_t>(100003, fs.nbytes - off);
      mk::fill_tensor(fs, off, std::span(pieces).subspan(off, n), 3);
    }
    CHECK(whole == pieces);
  }
}

TEST_CASE("every generated tensor is valid and has the intended scale") {
  for (const char* type : {"F32", "F16", "BF16", "Q8_0", "Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K", "Q6_K"}) {
    CAPTURE(type);
    auto o = opts("tiny-llama4", type);
    o.pure = true;
    const auto bytes = generate(o);
    const gguf::reader r(bytes);
    for (const auto& t : r.tensors()) {
      CAPTURE(t.name);
      const auto y = dequant(t);
      double s1 = 0, s2 = 0;
      bool finite = true;
      for (float v : y) finite = finite && std::isfinite(v), s1 += v, s2 += double(v) * v;
      REQUIRE(finite);
      const double mean = s1 / double(y.size());
      const std::string name(t.name);
      if (name == "rope_freqs.weight") continue;  // exact factors, checked against the fixtures
      if (name.find("_norm") != std::string::npos) {
        CHECK(std::abs(mean - 1.0) < norm_mean_tol);
      } else {
        const bool router = name.find("ffn_gate_inp") != std::string::npos;
        const double want = router ? router_sigma : weight_sigma;
        CHECK(std::abs(std::sqrt(s2 / double(y.size())) - want) < (router ? router_rel_tol : sigma_rel_tol) * want);
        CHECK(std::abs(mean) < 0.15 * want);  // zero-mean by construction (Q4_0/Q5_0: -d/2 = -0.1 sigma)
      }
    }
  }
}

TEST_CASE("type mixes follow llama-quantize on the real presets") {
  // Counts llama.cpp prints for real Q4_K_M files, derived from the same rules: Llama 3.1 8B
  // "f32: 66, q4_K: 193, q6_K: 33" (attn_v and ffn_down Q6_K on 16 of 32 layers, output Q6_K).
  const auto m = mk::plan_model(opts("llama-3.1-8b", "Q4_K_M"));
  std::map<std::string, int> count;
  for (const auto& t : m.tensors) ++count[std::string(gguf::name_of(t.type))];
  CHECK(count["F32"] == 66);
  CHECK(count["Q4_K"] == 193);
  CHECK(count["Q6_K"] == 33);

  const auto q2 = mk::plan_model(opts("qwen3-30b-a3b", "Q2_K"));
  for (const auto& t : q2.tensors) {
    CAPTURE(t.name);
    if (t.name.ends_with("attn_v.weight")) CHECK(t.type == gguf::type_id::q4_k);  // n_gqa = 8 >= 4
    if (t.name.ends_with("ffn_down_exps.weight")) CHECK(t.type == gguf::type_id::q3_k);
    if (t.name.ends_with("attn_output.weight")) CHECK(t.type == gguf::type_id::q3_k);  // 128 experts, not 8
  }
}

TEST_CASE("big presets have the real tensor shapes (plan only, no data)") {
  struct expect {
    const char* preset;
    std::size_t tensors;
    std::vector<std::pair<const char*, std::vector<std::uint64_t>>> shapes;
    double gb_lo, gb_hi;  // Q4_K_M file size bounds (real files: 5.03, 4.92, 42.5, 18.6, 65.6 GB)
  };
  const expect cases[] = {
      {"qwen3-0.6b", 2 + 28 * 11,  // tied: no output.weight
       {{"token_embd.weight", {1024, 151936}}, {"blk.27.attn_q.weight", {1024, 2048}},
        {"blk.0.attn_k.weight", {1024, 1024}}, {"blk.0.attn_output.weight", {2048, 1024}},
        {"blk.3.ffn_down.weight", {3072, 1024}}},
       0.35, 0.55},
      {"qwen3-8b", 2 + 36 * 11 + 1,
       {{"token_embd.weight", {4096, 151936}}, {"output.weight", {4096, 151936}},
        {"blk.35.attn_q.weight", {4096, 4096}}, {"blk.0.attn_k.weight", {4096, 1024}},
        {"blk.0.attn_q_norm.weight", {128}}, {"blk.7.ffn_down.weight", {12288, 4096}}},
       4.9, 5.1},
      {"llama-3.1-8b", 3 + 32 * 9 + 1,
       {{"rope_freqs.weight", {64}}, {"blk.31.ffn_gate.weight", {4096, 14336}}, {"blk.0.attn_v.weight", {4096, 1024}}},
       4.8, 5.0},
      {"llama-3.1-70b", 3 + 80 * 9 + 1,
       {{"token_embd.weight", {8192, 128256}}, {"blk.79.attn_q.weight", {8192, 8192}},
        {"blk.0.attn_k.weight", {8192, 1024}}, {"blk.79.ffn_down.weight", {28672, 8192}}},
       41.5, 43.5},  // bartowski's Meta-Llama-3.1-70B-Instruct-Q4_K_M.gguf: 42.5 GB
      {"qwen3-30b-a3b", 3 + 48 * 12,
       {{"blk.0.attn_q.weight", {2048, 4096}}, {"blk.0.attn_output.weight", {4096, 2048}},
        {"blk.47.ffn_gate_inp.weight", {2048, 128}}, {"blk.47.ffn_up_exps.weight", {2048, 768, 128}},
        {"blk.47.ffn_down_exps.weight", {768, 2048, 128}}},
       18.2, 19.0},
      {"llama4-scout-17b-16e", 4 + 48 * 13,
       {{"token_embd.weight", {5120, 202048}}, {"rope_freqs.weight", {64}}, {"blk.0.attn_q.weight", {5120, 5120}},
        {"blk.3.ffn_gate_exps.weight", {5120, 8192, 16}}, {"blk.3.ffn_down_exps.weight", {8192, 5120, 16}},
        {"blk.47.ffn_up_shexp.weight", {5120, 8192}}, {"blk.47.ffn_gate_inp.weight", {5120, 16}}},
       64.0, 67.0},
  };
  for (const auto& c : cases) {
    CAPTURE(c.preset);
    const auto m = mk::plan_model(opts(c.preset, "Q4_K_M"));
    CHECK(m.tensors.size() == c.tensors);
    std::map<std::string, std::vector<std::uint64_t>> ne;
    for (const auto& t : m.tensors) ne[t.name] = t.ne;
    for (const auto& [name, want] : c.shapes) {
      CAPTURE(name);
      REQUIRE(ne.count(name));
      CHECK(ne[name] == want);
    }
    if (std::string(c.preset).starts_with("llama4")) CHECK(ne.count("blk.0.ffn_gate.weight") == 0);  // all MoE
    const double gb = double(m.writer.file_size()) / 1e9;
    CHECK(gb > c.gb_lo);
    CHECK(gb < c.gb_hi);
  }
  auto short_scout = opts("llama4-scout-17b-16e", "Q4_K_M");  // --layers: real shapes, fewer blocks
  short_scout.n_layer = 4;
  const auto s4 = mk::plan_model(short_scout);
  CHECK(s4.tensors.size() == 4 + 4 * 13);
  CHECK(s4.p.n_layer == 4);
  const auto* p = mk::find_preset("llama-3.1-8b");
  const auto f = mk::llama3_rope_factors(*p);
  REQUIRE(f.size() == 64);
  CHECK(f.front() == 1.0f);  // short wavelengths kept
  CHECK(f.back() == 8.0f);   // long wavelengths divided by the factor
}

TEST_CASE("synthetic vocabularies: real special ids, valid merges, exact size") {
  struct expect {
    const char* preset;
    std::uint32_t bos, eos;
    std::vector<std::pair<std::uint32_t, const char*>> tokens;
  };
  const expect cases[] = {
      {"llama-3.1-8b", 128000, 128009,
       {{128000, "<|begin_of_text|>"}, {128006, "<|start_header_id|>"}, {128009, "<|eot_id|>"},
        {128255, "<|reserved_special_token_247|>"}}},
      {"qwen3-8b", 151643, 151645,
       {{151643, "<|endoftext|>"}, {151644, "<|im_start|>"}, {151645, "<|im_end|>"}, {151667, "<think>"},
        {151935, "[PAD151935]"}}},
      {"llama4-scout-17b-16e", 200000, 200008,
       {{200005, "<|header_start|>"}, {200008, "<|eot|>"}, {200016, "<|python_start|>"}, {200018, "<|finetune_right_pad|>"},
        {200090, "<|image|>"}, {200092, "<|patch|>"}}},
      {"tiny-llama", 1019, 1023, {{1019, "<|begin_of_text|>"}, {1023, "<|eot_id|>"}}},
      {"tiny-qwen3", 1021, 1023, {{1021, "<|endoftext|>"}, {1023, "<|im_end|>"}}},
  };
  for (const auto& c : cases) {
    CAPTURE(c.preset);
    const auto& p = *mk::find_preset(c.preset);
    const auto v = mk::make_vocab(p);
    REQUIRE(v.tokens.size() == p.n_vocab);
    REQUIRE(v.types.size() == p.n_vocab);
    CHECK(v.bos == c.bos);
    CHECK(v.eos == c.eos);
    for (const auto& [id, text] : c.tokens) CHECK(v.tokens[id] == text);
    CHECK(v.types[v.bos] == int(mk::token_type::control));
    CHECK(v.merges.size() == std::min<std::size_t>(4096, c.bos - 256));
    const std::unordered_set<std::string> vocab(v.tokens.begin(), v.tokens.end());
    CHECK(vocab.size() == v.tokens.size());
    for (const auto& m : v.merges) {  // both parts and the result are tokens
      const auto sp = m.find(' ', 1);
      REQUIRE(sp != std::string::npos);
      const bool valid = vocab.count(m.substr(0, sp)) && vocab.count(m.substr(sp + 1)) &&
                         vocab.count(m.substr(0, sp) + m.substr(sp + 1));
      CHECK(valid);
    }
  }
  // The 256 byte tokens are GPT-2's, in the real vocabularies' order.
  if (const auto dir = strata::test::shared_fixture_dir(); !dir.empty()) {
    const gguf::file f(dir / "tokenizer" / "ggml-vocab-llama-bpe.gguf");
    const auto real = f->at("tokenizer.ggml.tokens").strings();
    const auto ours = mk::byte_level_tokens();
    for (std::size_t i = 0; i < 256; ++i) CHECK(ours[i] == real[i]);
  }
}

TEST_CASE("--vocab copies the tokenizer of another GGUF") {
  const auto dir = strata::test::shared_fixture_dir();
  if (dir.empty()) {
    MESSAGE("no shared fixtures: skipped");
    return;
  }
  const auto vocab = dir / "tokenizer" / "ggml-vocab-qwen3.gguf";
  auto o = opts("qwen3-8b", "Q4_K_M");
  o.vocab = vocab;
  const auto m = mk::plan_model(o);
  CHECK(m.writer.file_size() > 5'000'000'000u);
  o = opts("tiny-qwen3", "Q8_0");
  o.vocab = vocab;
  CHECK_THROWS_WITH_AS(mk::plan_model(o),
                       doctest::Contains("151936 tokens"), strata::error);
}

TEST_CASE("bad input gives clear errors") {
  CHECK_THROWS_WITH_AS(mk::plan_model(opts("qwen4", "Q4_K_M")), doctest::Contains("qwen3-8b"),
                       mk::usage_error);
  CHECK_THROWS_WITH_AS(mk::plan_model(opts("tiny-llama", "Q9_K")), doctest::Contains("Q4_K_M"),
                       mk::usage_error);
  const auto m = mk::plan_model(opts("tiny-llama", "Q4_0"));
  const std::filesystem::path bad = "/nonexistent-strata-dir/x.gguf";
  CHECK_THROWS_WITH_AS(mk::write_model(m, bad), doctest::Contains("cannot open"), strata::error);
  CHECK_FALSE(std::filesystem::exists(bad.string() + ".tmp"));
  CHECK_THROWS_WITH_AS(mk::write_model(m, std::filesystem::temp_directory_path()), doctest::Contains("directory"),
                       strata::error);
  if (std::filesystem::exists("/dev/full"))  // a full disk reports errno's text
    CHECK_THROWS_WITH_AS(mk::write_model(m, "/dev/full"), doctest::Contains("No space left"), strata::error);
}
