// gguf::reader against real llama.cpp files: every fixture model parses, its tensor table
// (names, types, shapes, order) matches the manifest exactly, the data section accounts for
// every byte of the file, and typed-accessor errors name the file and the key.
#include <doctest/doctest.h>
#include <simdjson.h>

#include <string>

#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"
#include "support/fixtures.hpp"
#include "support/manifest.hpp"

namespace {

using namespace strata;
using strata::test::manifest_model;

std::uint64_t align_up(std::uint64_t x, std::uint64_t a) { return (x + a - 1) / a * a; }

// The data section is the tensors back to back in file order, each padded to the alignment
// (llama.cpp's gguf writer and gguf-py both lay files out this way), ending at the file's end.
void check_layout(const gguf::reader& r) {
  const auto ts = r.tensors();
  CHECK(r.data_offset() % r.alignment() == 0);
  std::uint64_t expect = 0;
  std::uint64_t end = 0;
  for (const auto& t : ts) {
    INFO("tensor " << std::string(t.name));
    CHECK(t.offset == expect);
    CHECK(t.file_offset == r.data_offset() + t.offset);
    CHECK(t.nbytes == t.n_rows() * t.row_bytes());
    CHECK(t.data.size() == t.nbytes);
    CHECK(t.data.data() == r.bytes().data() + t.file_offset);
    end = t.offset + t.nbytes;
    expect = align_up(end, r.alignment());
  }
  if (ts.empty()) {
    // Vocab-only files: gguf-py writes no padding after the infos when there is no data.
    CHECK(r.data_offset() >= r.file_size());
    CHECK(r.data_offset() - r.file_size() < r.alignment());
  } else {
    CHECK(r.data_offset() + end <= r.file_size());
    CHECK(r.file_size() - (r.data_offset() + end) < r.alignment());  // only the final padding
    CHECK(r.data_offset() + expect == r.file_size());
  }
}

void check_against_manifest(const gguf::reader& r, const manifest_model& m) {
  INFO("model " << m.name << " (" << m.path.string() << ")");
  CHECK(r.file_size() == m.size_bytes);
  CHECK(r.version() == 3);
  CHECK(r.get_string(gguf::keys::architecture) == m.arch);
  REQUIRE(r.tensors().size() == m.tensors.size());
  for (std::size_t i = 0; i < m.tensors.size(); ++i) {
    const auto& t = r.tensors()[i];
    const auto& e = m.tensors[i];
    INFO("tensor " << i << " " << e.name);
    CHECK(t.name == e.name);
    CHECK(gguf::name_of(t.type) == e.type);
    REQUIRE(t.n_dims == e.ne.size());
    for (std::size_t d = 0; d < gguf::max_dims; ++d) CHECK(t.ne[d] == (d < e.ne.size() ? e.ne[d] : 1));
    CHECK(r.find_tensor(e.name) == &t);
  }
  check_layout(r);
}

}  // namespace

TEST_CASE("reader: local fixture models match their manifest") {
  const auto models = test::local_models();
  REQUIRE(models.size() == 5);  // tools/trim_manifest.py: one K-quant per arch + llama-F32
  for (const auto& m : models) {
    const gguf::file f(m.path);
    check_against_manifest(f.gguf(), m);
  }
}

TEST_CASE("reader: every stored shared fixture model matches the shared manifest") {
  const auto models = test::shared_models();
  if (models.empty()) {
    MESSAGE("skipped: no shared fixture set at " STRATA_SHARED_FIXTURES);
    return;
  }
  CHECK(models.size() >= 24);
  for (const auto& m : models) {
    const gguf::file f(m.path);
    check_against_manifest(f.gguf(), m);
  }
}

TEST_CASE("reader: hyperparameters agree with the manifest's architecture table") {
  simdjson::dom::parser parser;
  const auto doc = parser.load((test::fixture_dir() / "models" / "manifest.json").string());
  for (const auto& m : test::local_models()) {
    INFO("model " << m.name);
    const gguf::file f(m.path);
    const auto& r = f.gguf();
    const auto a = doc["architectures"][m.arch];
    const auto key = [&](std::string_view s) { return gguf::keys::arch_key(m.arch, s); };
    CHECK(r.get_uint(key(gguf::keys::embedding_length)) == a["n_embd"].get_uint64().value());
    CHECK(r.get_uint(key(gguf::keys::block_count)) == a["n_layer"].get_uint64().value());
    CHECK(r.get_uint(key(gguf::keys::head_count)) == a["n_head"].get_uint64().value());
    CHECK(r.get_uint(key(gguf::keys::head_count_kv)) == a["n_head_kv"].get_uint64().value());
    CHECK(r.get_uint(key(gguf::keys::context_length)) == a["n_ctx_train"].get_uint64().value());
    // rms_eps is stored as f32; the manifest has the decimal value it was made from.
    CHECK(r.get_number(key(gguf::keys::rms_eps)) == doctest::Approx(a["rms_eps"].get_double().value()).epsilon(1e-6));
    const auto& tokens = r.at(gguf::keys::tok_tokens);
    CHECK(tokens.size() == a["n_vocab"].get_uint64().value());
    CHECK(tokens.strings().size() == tokens.size());
    CHECK(r.at(gguf::keys::tok_token_type).to_vector<std::int32_t>().size() == tokens.size());
    CHECK(r.get_string(gguf::keys::tok_model) == "gpt2");
  }
}

TEST_CASE("reader: shared vocab-only GGUFs parse") {
  const auto files = test::shared_tokenizer_ggufs();
  if (files.empty()) {
    MESSAGE("skipped: no shared fixture set at " STRATA_SHARED_FIXTURES);
    return;
  }
  for (const auto& p : files) {
    INFO(p.string());
    const gguf::file f(p);
    const auto& r = f.gguf();
    CHECK(r.tensors().empty());
    const auto arch = r.get_string(gguf::keys::architecture);
    CHECK((arch == "llama" || arch == "qwen3"));
    const auto& tokens = r.at(gguf::keys::tok_tokens);
    CHECK(tokens.size() >= 32000);
    CHECK(r.at(gguf::keys::tok_token_type).size() == tokens.size());
    check_layout(r);
  }
}

TEST_CASE("reader: typed accessor errors name the file and the key") {
  const auto path = test::fixture_dir() / "models" / "llama-Q4_K_M.gguf";
  const gguf::file f(path);
  const auto& r = f.gguf();
  const std::string file = path.string();

  const auto message_of = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const format_error& e) {
      return e.what();
    }
    FAIL("no format_error thrown");
    return {};
  };

  SUBCASE("missing key") {
    const auto msg = message_of([&] { (void)r.get<std::uint32_t>("llama.no_such_key"); });
    CHECK(msg.find(file) != std::string::npos);
    CHECK(msg.find("missing metadata key 'llama.no_such_key'") != std::string::npos);
    CHECK(message_of([&] { (void)r.get_string("general.nope"); }).find("'general.nope'") != std::string::npos);
    CHECK(message_of([&] { (void)r.at("x"); }).find(file) != std::string::npos);
    CHECK_FALSE(r.find_uint("llama.no_such_key").has_value());
    CHECK_FALSE(r.find_string("llama.no_such_key").has_value());
    CHECK_FALSE(r.contains("llama.no_such_key"));
  }
  SUBCASE("wrong scalar type") {
    const auto msg = message_of([&] { (void)r.get<std::uint32_t>("general.architecture"); });
    CHECK(msg.find(file) != std::string::npos);
    CHECK(msg.find("metadata key 'general.architecture'") != std::string::npos);
    CHECK(msg.find("expected u32, found string") != std::string::npos);
    // u32 stored: exact-type get of another width fails, the widening accessors succeed.
    CHECK(message_of([&] { (void)r.get<std::uint64_t>("llama.block_count"); })
              .find("'llama.block_count': expected u64, found u32") != std::string::npos);
    CHECK(r.get<std::uint32_t>("llama.block_count") == 4);
    CHECK(r.get_uint("llama.block_count") == 4);
    CHECK(r.get_int("llama.block_count") == 4);
    CHECK(r.get_number("llama.block_count") == 4.0);
    CHECK(message_of([&] { (void)r.get_string("llama.block_count"); })
              .find("'llama.block_count': expected string, found u32") != std::string::npos);
    CHECK(message_of([&] { (void)r.get_uint("llama.rope.freq_base"); })
              .find("'llama.rope.freq_base': expected an integer, found f32") != std::string::npos);
    CHECK(message_of([&] { (void)r.get_bool("llama.block_count"); })
              .find("'llama.block_count': expected bool, found u32") != std::string::npos);
    CHECK(message_of([&] { (void)r.get_number("tokenizer.ggml.tokens"); })
              .find("expected a number, found array of string") != std::string::npos);
    // Optional forms: absent is nullopt, present with the wrong type is still an error.
    CHECK(message_of([&] { (void)r.find_uint("general.architecture"); }).find(file) != std::string::npos);
    CHECK(r.find_bool("tokenizer.ggml.add_bos_token") == true);
  }
  SUBCASE("arrays") {
    const auto& tokens = r.at("tokenizer.ggml.tokens");
    CHECK(tokens.is_array());
    CHECK(tokens.describe_type() == "array of string");
    CHECK_THROWS_WITH_AS(tokens.to_vector<std::int32_t>(), "expected array of i32, found array of string", error);
    const auto& types = r.at("tokenizer.ggml.token_type");
    CHECK_THROWS_WITH_AS(types.at<std::int32_t>(types.size()), "array index 1024 out of range 1024", error);
    CHECK(types.at<std::int32_t>(0) == types.to_vector<std::int32_t>()[0]);
  }
  SUBCASE("missing tensor") {
    const auto msg = message_of([&] { (void)r.tensor("blk.9.attn_q.weight"); });
    CHECK(msg.find(file) != std::string::npos);
    CHECK(msg.find("missing tensor 'blk.9.attn_q.weight'") != std::string::npos);
    CHECK(r.find_tensor("blk.9.attn_q.weight") == nullptr);
  }
}

TEST_CASE("reader: gguf::open owns its mapping and survives a move") {
  const auto path = test::fixture_dir() / "models" / "qwen3-Q4_K_M.gguf";
  auto f = gguf::open(path);
  const std::size_t n = f->tensors().size();
  REQUIRE(n > 0);
  const auto first = std::string(f->tensors()[0].name);
  const gguf::file moved = std::move(f);  // views still point into the same mapping
  CHECK(moved->tensors().size() == n);
  CHECK(std::string(moved->tensors()[0].name) == first);
  CHECK(moved->get_string(gguf::keys::architecture) == "qwen3");
  CHECK(moved.path() == path);
  try {
    (void)gguf::open(test::fixture_dir() / "models" / "no-such-model.gguf");
    FAIL("opening a missing file must throw");
  } catch (const error& e) {
    CHECK(std::string(e.what()).find("no-such-model.gguf: cannot open") != std::string::npos);
  }
}
