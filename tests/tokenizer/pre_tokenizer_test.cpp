// pre_tokenizer splits worked out by hand from each regex list (leftmost-first alternation), for
// the pre-tokenizers the llama.cpp vectors do not cover (gpt2, default, llama4/gpt-4o) and for the
// places where PCRE2 on its own would differ from llama.cpp (U+180E is no whitespace there);
// plus the GPT-2 byte map and the lenient UTF-8 reading.
#include <doctest/doctest.h>

#include <set>
#include <string>
#include <vector>

#include "strata/tokenizer/byte_level.hpp"
#include "strata/tokenizer/clean_spaces.hpp"
#include "strata/tokenizer/lenient_utf8.hpp"
#include "strata/tokenizer/pre_tokenizer.hpp"

namespace {

using namespace strata::tokenizer;

std::vector<std::string> split(pre_type t, std::string_view s) {
  const pre_tokenizer pre(t);
  std::vector<text_piece> pieces, scratch;
  pre.split(s, pieces, scratch);
  std::vector<std::string> out;
  std::size_t expect_begin = 0;
  for (const auto p : pieces) {
    CHECK(p.begin == expect_begin);  // pieces tile the text
    expect_begin = p.end;
    out.emplace_back(s.substr(p.begin, p.end - p.begin));
  }
  CHECK(expect_begin == s.size());
  return out;
}

using pieces = std::vector<std::string>;

}  // namespace

TEST_CASE("pre_tokenizer: llama3 and qwen2") {
  CHECK(split(pre_type::llama3, "Hello world's 12345 \n\n  x\tyz!!\n") ==
        pieces{"Hello", " world", "'s", " ", "123", "45", " \n\n", " ", " x", "\tyz", "!!\n"});
  CHECK(split(pre_type::llama3, "WE'RE it'S") == pieces{"WE", "'RE", " it", "'S"});
  CHECK(split(pre_type::llama3, "a   ") == pieces{"a", "   "});  // \s+(?!\S) runs to the end
  CHECK(split(pre_type::qwen2, "x 12") == pieces{"x", " ", "1", "2"});
  // U+180E is not whitespace for llama.cpp (PCRE2 10.42's own \s would say it is) ...
  CHECK(split(pre_type::llama3, "a\xE1\xA0\x8E\xE1\xA0\x8E" "b") == pieces{"a", "\xE1\xA0\x8E\xE1\xA0\x8E", "b"});
  // ... while U+0085 and U+3000 are.
  CHECK(split(pre_type::llama3, "a\xC2\x85\xC2\x85" "b") == pieces{"a", "\xC2\x85", "\xC2\x85" "b"});
  CHECK(split(pre_type::llama3, "a\xE3\x80\x80\xE3\x80\x80" "b") == pieces{"a", "\xE3\x80\x80", "\xE3\x80\x80" "b"});
  CHECK(split(pre_type::llama3, "").empty());
}

TEST_CASE("pre_tokenizer: code points newer than PCRE2's Unicode tables classify as in llama.cpp") {
  // U+31350 (CJK Extension H, Unicode 15.0) and U+2EBF0 (Extension I, 15.1) are letters ...
  CHECK(split(pre_type::llama3, "a\xF0\xB1\x8D\x90\xF0\xAE\xAF\xB0" "b.") ==
        pieces{"a\xF0\xB1\x8D\x90\xF0\xAE\xAF\xB0" "b", "."});
  // ... Kawi digits (U+11F50, 15.0) are numbers, one piece each for qwen2 ...
  CHECK(split(pre_type::qwen2, "x\xF0\x91\xBD\x90\xF0\x91\xBD\x91") ==
        pieces{"x", "\xF0\x91\xBD\x90", "\xF0\x91\xBD\x91"});
  // ... and Kawi punctuation (U+11F43) is split off by the default pre-tokenizer's first regex.
  CHECK(split(pre_type::standard, " \xF0\x91\xBD\x83" "a") == pieces{" ", "\xF0\x91\xBD\x83", "a"});
}

TEST_CASE("pre_tokenizer: gpt2 (text no alternative matches becomes its own piece)") {
  CHECK(split(pre_type::gpt2, "Hello world's  123\n\nok") ==
        pieces{"Hello", " world", "'s", " ", " 123", "\n", "\n", "ok"});
  CHECK(split(pre_type::gpt2, "I'M") == pieces{"I", "'", "M"});  // contractions are lower-case only
}

TEST_CASE("pre_tokenizer: default (four chained regexes)") {
  CHECK(split(pre_type::standard, "a+b=12345,x") == pieces{"a", "+", "b", "=", "123", "45", ",", "x"});
}

TEST_CASE("pre_tokenizer: gpt-4o / llama4 (case-aware letter runs)") {
  CHECK(split(pre_type::gpt4o, "HelloWorld's DON'T x1") == pieces{"Hello", "World's", " DON'T", " x", "1"});
  // Non-ASCII letters count as both cases: no split inside "éÉ", "Éa".
  CHECK(split(pre_type::gpt4o, "\xC3\xA9\xC3\x89 \xC3\x89" "a") == pieces{"\xC3\xA9\xC3\x89", " \xC3\x89" "a"});
  CHECK(split(pre_type::gpt4o, "a/b\n/") == pieces{"a", "/b", "\n", "/"});
}

TEST_CASE("pre_tokenizer: a 1 MiB letter run (deep JIT backtracking) is one piece") {
  const std::string s(1u << 20, 'a');
  for (const auto t : {pre_type::gpt4o, pre_type::llama3, pre_type::gpt2}) {
    const auto p = split(t, s);
    REQUIRE(p.size() == 1);
    CHECK(p[0].size() == s.size());
  }
}

TEST_CASE("byte_level: the GPT-2 byte map is a bijection onto printable code points") {
  std::set<char32_t> seen;
  for (unsigned b = 0; b < 256; ++b) {
    const char32_t cp = byte_level::byte_to_cp[b];
    CHECK(seen.insert(cp).second);
    CHECK(cp > 0x20);
    CHECK(byte_level::cp_to_byte(cp) == std::optional<std::uint8_t>(std::uint8_t(b)));
    const std::string raw(1, char(b));
    CHECK(byte_level::decode(byte_level::encode(raw)) == std::optional<std::string>(raw));
  }
  CHECK(byte_level::encode(" \n") == "\xC4\xA0\xC4\x8A");  // "ĠĊ"
  CHECK_FALSE(byte_level::decode("a b").has_value());       // ' ' stands for no byte
  CHECK_FALSE(byte_level::decode("\xC1\x81").has_value());  // overlong 'A' is not the spelling of 'A'
}

TEST_CASE("lenient_utf8: llama.cpp's reading of invalid bytes") {
  std::string bytes, re;
  lenient_utf8::repair("a\x80\xC3(\xE2\x82", bytes, re);
  CHECK(bytes == "a\xEF\xBF\xBD\xEF\xBF\xBD(\xEF\xBF\xBD\xEF\xBF\xBD");
  lenient_utf8::repair("\xC0\x80\xED\xA0\x80", bytes, re);  // overlong NUL, surrogate
  CHECK(bytes == std::string("\0\xED\xA0\x80", 4));
  CHECK(re == std::string("\0\xEE\x80\x80", 4));  // the regex sees U+E000 in its place
  lenient_utf8::repair("\xF5\x80\x80\x80", bytes, re);  // would be above U+10FFFF
  CHECK(bytes == "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(lenient_utf8::lead_length(0xF0) == 4);
  CHECK(lenient_utf8::lead_length(0x80) == 1);
}

TEST_CASE("clean_spaces: llama.cpp's three passes") {
  const auto clean = [](std::string s) {
    clean_spaces(s);
    return s;
  };
  CHECK(clean("Hi , you ? x . y !") == "Hi, you? x. y!");
  CHECK(clean("a ' b") == "a'b");
  CHECK(clean(" ' ' ") == "'' ");  // the second quote's left space was consumed by the first
  CHECK(clean("it 's I 'm we 're you 've I 'll he 'd don 't") == "it's I'm we're you've I 'll he 'd don 't");
  CHECK(clean(" .") == ".");
  CHECK(clean("") == "");
  // Cutting where is_clean_cut allows never changes the result.
  const std::string s = "word , more 's text ' here ? and abcd efgh ijkl .";
  for (std::size_t cut = 0; cut <= s.size(); ++cut)
    if (is_clean_cut(s, cut)) CHECK(clean(s.substr(0, cut)) + clean(s.substr(cut)) == clean(s));
}
