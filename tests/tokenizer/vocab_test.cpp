// tokenizer::vocab and tokenizer::tokenizer on bad input: GGUF metadata that is missing, of the
// wrong type or inconsistent gives a format_error naming the key; ids outside the vocabulary give
// a strata::error naming the id and the vocabulary size. Also the special ids and end-of-generation
// sets llama.cpp derives for the fixture vocabularies, and tiny hand-made vocabularies whose
// expected tokens follow from the merge rules by hand.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "strata/gguf/writer.hpp"
#include "strata/tokenizer/streaming_detokenizer.hpp"
#include "tokenizer/tokenizer_support.hpp"

namespace {

using namespace strata;
using tokenizer::token_id;

// A valid SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens, then `extra` (normal).
gguf::writer spm_writer(const std::vector<std::pair<std::string, float>>& extra) {
  std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
  std::vector<float> scores = {0, 0, 0};
  std::vector<std::int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    tokens.emplace_back(buf);
    scores.push_back(0);
    types.push_back(6);
  }
  for (const auto& [t, s] : extra) {
    tokens.push_back(t);
    scores.push_back(s);
    types.push_back(1);
  }
  gguf::writer w;
  w.set("general.architecture", "llama");
  w.set("tokenizer.ggml.model", "llama");
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_array("tokenizer.ggml.scores", scores);
  w.set_array("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.bos_token_id", std::uint32_t(1));
  w.set("tokenizer.ggml.eos_token_id", std::uint32_t(2));
  w.set("tokenizer.ggml.unknown_token_id", std::uint32_t(0));
  return w;
}

// A byte-level BPE vocabulary over the 256 byte spellings plus `merged` tokens and `merges`.
gguf::writer bpe_writer(const std::vector<std::string>& merged, const std::vector<std::string>& merges,
                        std::string pre = "qwen2") {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.push_back(tokenizer::byte_level::encode(std::string(1, char(b))));
  for (const auto& m : merged) tokens.push_back(m);
  tokens.push_back("<|endoftext|>");
  std::vector<std::int32_t> types(tokens.size(), 1);
  types.back() = 3;
  gguf::writer w;
  w.set("general.architecture", "qwen3");
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", std::string_view(pre));
  w.set_strings("tokenizer.ggml.tokens", tokens);
  w.set_array("tokenizer.ggml.token_type", types);
  w.set_strings("tokenizer.ggml.merges", merges);
  w.set("tokenizer.ggml.eos_token_id", std::uint32_t(tokens.size() - 1));
  return w;
}

tokenizer::tokenizer load(const gguf::writer& w) {
  const auto bytes = w.to_bytes();
  const gguf::reader r(bytes, "test.gguf");
  return tokenizer::tokenizer::from_gguf(r);
}

// The format_error message of loading `w`; fails the test if loading succeeds.
std::string load_error(const gguf::writer& w) {
  try {
    (void)load(w);
  } catch (const format_error& e) {
    return e.what();
  }
  FAIL("expected a format_error");
  return {};
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("vocab: missing, mistyped and inconsistent tokenizer metadata name the key") {
  SUBCASE("tokens missing") {
    auto w = spm_writer({});
    w.remove("tokenizer.ggml.tokens");
    const auto msg = load_error(w);
    CHECK(contains(msg, "test.gguf"));
    CHECK(contains(msg, "'tokenizer.ggml.tokens'"));
  }
  SUBCASE("tokens of the wrong type") {
    auto w = spm_writer({});
    w.set_array("tokenizer.ggml.tokens", std::vector<std::int32_t>{1, 2, 3});
    const auto msg = load_error(w);
    CHECK(contains(msg, "'tokenizer.ggml.tokens'"));
    CHECK(contains(msg, "expected array of string, found array of i32"));
  }
  SUBCASE("scores shorter than tokens") {
    auto w = spm_writer({{"a", -1.0f}});
    w.set_array("tokenizer.ggml.scores", std::vector<float>(10, 0.0f));
    const auto msg = load_error(w);
    CHECK(contains(msg, "'tokenizer.ggml.scores' has 10 entries but 'tokenizer.ggml.tokens' has 260"));
  }
  SUBCASE("scores of the wrong type") {
    auto w = spm_writer({});
    w.set_array("tokenizer.ggml.scores", std::vector<double>(259, 0.0));
    const auto msg = load_error(w);
    CHECK(contains(msg, "'tokenizer.ggml.scores'"));
    CHECK(contains(msg, "expected array of f32, found array of f64"));
  }
  SUBCASE("token types longer than tokens") {
    auto w = spm_writer({});
    w.set_array("tokenizer.ggml.token_type", std::vector<std::int32_t>(300, 1));
    CHECK(contains(load_error(w), "'tokenizer.ggml.token_type' has 300 entries"));
  }
  SUBCASE("special id out of range") {
    auto w = spm_writer({});
    w.set("tokenizer.ggml.eos_token_id", std::uint32_t(5000));
    const auto msg = load_error(w);
    CHECK(contains(msg, "'tokenizer.ggml.eos_token_id' = 5000 is out of range for a vocabulary of 259 tokens"));
  }
  SUBCASE("special id of the wrong type") {
    auto w = spm_writer({});
    w.set("tokenizer.ggml.bos_token_id", "one");
    CHECK(contains(load_error(w), "'tokenizer.ggml.bos_token_id'"));
  }
  SUBCASE("unsupported model") {
    auto w = spm_writer({});
    w.set("tokenizer.ggml.model", "bert");
    CHECK(contains(load_error(w), "'tokenizer.ggml.model': unsupported tokenizer model 'bert'"));
  }
  SUBCASE("model missing") {
    auto w = spm_writer({});
    w.remove("tokenizer.ggml.model");
    CHECK(contains(load_error(w), "'tokenizer.ggml.model'"));
  }
  SUBCASE("unsupported pre-tokenizer") {
    CHECK(contains(load_error(bpe_writer({}, {}, "deepseek-coder")),
                   "'tokenizer.ggml.pre': unsupported pre-tokenizer 'deepseek-coder'"));
  }
  SUBCASE("BPE without merges") {
    auto w = bpe_writer({}, {});
    w.remove("tokenizer.ggml.merges");
    CHECK(contains(load_error(w), "'tokenizer.ggml.merges'"));
  }
  SUBCASE("two tokens with the same text") {
    CHECK(contains(load_error(spm_writer({{"a", 0.0f}, {"a", 0.0f}})), "tokens 259 and 260 have the same text"));
  }
  SUBCASE("add_bos without a BOS token") {
    // BPE's built-in default BOS is id 11, outside this 3-token vocabulary.
    gguf::writer w;
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", "qwen2");
    w.set_strings("tokenizer.ggml.tokens", {"a", "b", "c"});
    w.set_strings("tokenizer.ggml.merges", {});
    w.set("tokenizer.ggml.add_bos_token", true);
    CHECK(contains(load_error(w), "no BOS token"));
  }
}

TEST_CASE("tokenizer: ids outside the vocabulary name the id and the vocabulary size") {
  const auto& tok = test::vocab_tokenizer("llama-spm");
  const std::vector<token_id> bad = {15043, 32000};
  CHECK_THROWS_WITH_AS(tok.decode(bad), "token id 32000 is out of range for a vocabulary of 32000 tokens", error);
  CHECK_THROWS_WITH_AS(tok.token_to_piece(-1, false), "token id -1 is out of range for a vocabulary of 32000 tokens",
                       error);
  tokenizer::streaming_detokenizer stream(tok);
  CHECK_THROWS_AS(stream.feed(1 << 20), error);
}

TEST_CASE("vocab: special ids, flags and end-of-generation tokens as llama.cpp derives them") {
  SUBCASE("llama-spm") {
    const auto& v = test::vocab_tokenizer("llama-spm").vocabulary();
    CHECK(v.kind() == tokenizer::model_kind::spm);
    CHECK(v.bos() == 1);
    CHECK(v.eos() == 2);
    CHECK(v.unk() == 0);
    CHECK(v.add_bos());
    CHECK_FALSE(v.add_eos());
    CHECK(v.add_space_prefix());
    CHECK_FALSE(v.clean_spaces());
    CHECK(std::vector<token_id>(v.eog_ids().begin(), v.eog_ids().end()) == std::vector<token_id>{2});
    CHECK(v.has_attr(259, tokenizer::token_attr::normal));
    CHECK(v.has_attr(3, tokenizer::token_attr::byte));
  }
  SUBCASE("llama-bpe") {
    const auto& v = test::vocab_tokenizer("llama-bpe").vocabulary();
    CHECK(v.kind() == tokenizer::model_kind::bpe);
    CHECK(v.pre().type == tokenizer::pre_type::llama3);
    CHECK(v.bos() == 128000);
    CHECK(v.eos() == 128001);
    CHECK(v.eot() == 128009);  // <|eot_id|>, found by name
    CHECK(v.add_bos());        // implied by the llama-bpe pre-tokenizer
    CHECK(v.clean_spaces());
    CHECK(v.ignore_merges());
    CHECK(std::vector<token_id>(v.eog_ids().begin(), v.eog_ids().end()) == std::vector<token_id>{128001, 128009});
    CHECK(v.special_tokens().size() == 256);
    CHECK(v.text(v.special_tokens().front()).size() >= v.text(v.special_tokens().back()).size());
  }
  SUBCASE("qwen3") {
    const auto& v = test::vocab_tokenizer("qwen3").vocabulary();
    CHECK(v.pre().type == tokenizer::pre_type::qwen2);
    CHECK(v.bos() == 151643);
    CHECK(v.eos() == 151645);
    CHECK(v.eot() == 151645);  // <|im_end|>
    CHECK_FALSE(v.add_bos());
    CHECK_FALSE(v.clean_spaces());
    // <|endoftext|>, <|im_end|>, the FIM pad / repo / file-separator tokens, and Qwen's plain
    // "</s>" (128247): llama.cpp's name list has it (for PaddleOCR) and makes it CONTROL too.
    CHECK(std::vector<token_id>(v.eog_ids().begin(), v.eog_ids().end()) ==
          std::vector<token_id>{128247, 151643, 151645, 151662, 151663, 151664});
    CHECK(v.has_attr(128247, tokenizer::token_attr::control));
    CHECK(v.has_attr(151667, tokenizer::token_attr::user_defined));  // <think>
    CHECK(v.has_attr(151669, tokenizer::token_attr::unused));         // [PAD151669]
  }
}

TEST_CASE("spm: highest-scoring merge first, byte fallback, space prefix after special tokens") {
  // "▁ab": ▁+a -> "▁a" (-1) competes with a+b -> "ab" (-2); the higher score wins, then "▁a"+"b"
  // is not a token, so the result is "▁a" "b".
  const auto tok = load(spm_writer({{"\xE2\x96\x81", -5}, {"a", -5}, {"b", -5}, {"\xE2\x96\x81" "a", -1}, {"ab", -2}}));
  const token_id sp = 259, b = 261, sp_a = 262;
  CHECK(tok.encode("ab", false, false) == std::vector<token_id>{sp_a, b});
  CHECK(tok.encode("ab", true, false) == std::vector<token_id>{1, sp_a, b});
  // Equal scores: the leftmost pair merges first. This vocabulary has no "▁": byte tokens.
  const auto tie = load(spm_writer({{"a", -5}, {"aa", -1}}));
  CHECK(tie.encode("aaa", false, false) == std::vector<token_id>{3 + 0xE2, 3 + 0x96, 3 + 0x81, 260, 259});
  // "é" is no token: its two UTF-8 bytes become <0xC3> <0xA9>; the space prefix is "▁".
  CHECK(tok.encode("\xC3\xA9", false, false) == std::vector<token_id>{sp, 3 + 0xC3, 3 + 0xA9});
  // A special token in the text (parse_special) makes the next text start with "▁" again.
  CHECK(tok.encode("a</s>a", false, true) == std::vector<token_id>{sp_a, 2, sp_a});
  CHECK(tok.decode(std::vector<token_id>{sp_a, b}) == "ab");  // first token loses its leading space
  CHECK(tok.decode(std::vector<token_id>{1, sp_a, b}) == " ab");
  CHECK(tok.decode(std::vector<token_id>{1, sp_a, b}, false, true) == " ab");  // llama.cpp keeps it too
}

TEST_CASE("bpe: lowest rank first, leftmost on ties, ignore_merges") {
  // merges: rank 0 "a b", rank 1 "b c", rank 2 "ab c"
  const auto tok = load(bpe_writer({"ab", "bc", "abc"}, {"a b", "b c", "ab c"}));
  const token_id ab = 256, bc = 257, abc = 258;
  CHECK(tok.encode("abc", false, false) == std::vector<token_id>{abc});
  CHECK(tok.encode("bcab", false, false) == std::vector<token_id>{bc, ab});
  CHECK(tok.encode("abab", false, false) == std::vector<token_id>{ab, ab});
  // "bbc": b+b has no merge, b+c merges: b, bc.
  CHECK(tok.encode("bbc", false, false) == std::vector<token_id>{'b', bc});
  // Pieces never merge across the pre-tokenizer split (qwen2 splits digits one by one).
  CHECK(tok.encode("ab12", false, false) == std::vector<token_id>{ab, '1', '2'});
  CHECK(tok.decode(std::vector<token_id>{abc, ' ', 'x'}) == "abc x");

  // ignore_merges (llama3): a piece that is a token is taken whole even when the merges would
  // not build it. "xyz" is a token but no merge leads there.
  const auto whole = load(bpe_writer({"xyz"}, {}, "llama-bpe"));
  CHECK(whole.encode("xyz", false, false) == std::vector<token_id>{256});
  const auto merged = load(bpe_writer({"xyz"}, {}, "qwen2"));
  CHECK(merged.encode("xyz", false, false) == std::vector<token_id>{'x', 'y', 'z'});
}
