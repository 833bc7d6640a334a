// streaming_detokenizer: the concatenation of feed() outputs and flush() equals
// utf8::sanitize(decode(ids)) for random id sequences (uniform ids, byte tokens that split
// multi-byte characters, encoded random text), and every chunk it emits is valid UTF-8.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "strata/core/utf8.hpp"
#include "strata/tokenizer/streaming_detokenizer.hpp"
#include "tokenizer/tokenizer_support.hpp"

namespace {

using namespace strata;
using tokenizer::token_id;

// Ids whose pieces are single bytes >= 0x80 (pieces of multi-byte characters).
std::vector<token_id> partial_byte_tokens(const tokenizer::tokenizer& tok) {
  std::vector<token_id> out;
  for (token_id id = 0; id < tok.n_vocab(); ++id) {
    const auto p = tok.token_to_piece(id, true);
    if (p.size() == 1 && static_cast<unsigned char>(p[0]) >= 0x80) out.push_back(id);
  }
  return out;
}

void check_stream(const tokenizer::tokenizer& tok, const std::vector<token_id>& ids, bool render_special) {
  tokenizer::streaming_detokenizer stream(tok, render_special);
  std::string got;
  for (const token_id id : ids) {
    const std::string chunk = stream.feed(id);
    CHECK(utf8::is_valid(chunk));
    got += chunk;
  }
  const std::string tail = stream.flush();
  CHECK(utf8::is_valid(tail));
  got += tail;
  CHECK(got == utf8::sanitize(tok.decode(ids, render_special)));
}

}  // namespace

TEST_CASE("streaming_detokenizer: concatenation == one-shot decode on random id sequences") {
  for (const auto& name : test::vocab_names()) {
    const auto& tok = test::vocab_tokenizer(name);
    const auto bytes = partial_byte_tokens(tok);
    REQUIRE(bytes.size() >= 128);
    std::mt19937 rng(21);
    test::text_generator gen(22);
    CAPTURE(name);
    for (int i = 0; i < 150; ++i) {
      std::vector<token_id> ids;
      const int kind = i % 3;
      if (kind == 0) {  // encoded text, with byte tokens spliced in
        ids = tok.encode(gen() + gen(), i % 2 == 0, true);
        for (int k = 0; k < 3; ++k)
          ids.insert(ids.begin() + std::ptrdiff_t(rng() % (ids.size() + 1)), bytes[rng() % bytes.size()]);
      } else if (kind == 1) {  // mostly byte tokens: split and broken characters
        for (int k = 0; k < 12; ++k)
          ids.push_back(rng() % 4 ? bytes[rng() % bytes.size()] : token_id(rng() % tok.n_vocab()));
      } else {  // anything
        for (int k = 0; k < 12; ++k) ids.push_back(token_id(rng() % tok.n_vocab()));
      }
      CAPTURE(test::ids_string(ids));
      check_stream(tok, ids, false);
      check_stream(tok, ids, true);
    }
  }
}

TEST_CASE("streaming_detokenizer: holds an unfinished character until it completes") {
  const auto& tok = test::vocab_tokenizer("llama-spm");
  const auto byte = [&](int b) {
    constexpr char hex[] = "0123456789ABCDEF";
    return tok.vocabulary().find("<0x" + std::string{hex[b >> 4], hex[b & 15]} + ">");
  };
  tokenizer::streaming_detokenizer stream(tok);
  CHECK(stream.feed(tok.encode("Hi", false, false)[0]) == "Hi");
  CHECK(stream.feed(byte(0xE4)).empty());  // 你 = E4 BD A0
  CHECK(stream.feed(byte(0xBD)).empty());
  CHECK(stream.feed(byte(0xA0)) == "\xE4\xBD\xA0");
  CHECK(stream.feed(byte(0xE4)).empty());
  CHECK(stream.feed(byte('!')) == "\xEF\xBF\xBD!");  // cannot complete any more
  CHECK(stream.feed(byte(0xF0)).empty());
  CHECK(stream.flush() == "\xEF\xBF\xBD");
}

TEST_CASE("streaming_detokenizer: Llama 3 space clean-up waits for the next character") {
  const auto& tok = test::vocab_tokenizer("llama-bpe");
  const auto ids = tok.encode("Hi , you 're here ?", false, false);
  REQUIRE(tok.decode(ids) == "Hi, you're here?");
  tokenizer::streaming_detokenizer stream(tok);
  std::string got;
  for (const token_id id : ids) got += stream.feed(id);
  CHECK(got.size() < std::string("Hi, you're here?").size());  // the tail is still held
  CHECK(got + stream.flush() == "Hi, you're here?");
}
