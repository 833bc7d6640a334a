// llama.cpp's example grammars (its grammars/*.gbnf, not copied here) parse and match what they
// describe. They are read from the directory named by STRATA_LLAMA_CPP_GRAMMARS when it is set
// (e.g. exported with `git -C <llama.cpp> show HEAD:grammars/json.gbnf`); otherwise the case says
// so and checks nothing. Our own grammars in the same styles are in gbnf_test.cpp.
#include <doctest/doctest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "helpers.hpp"

using namespace grammar_test;

TEST_CASE("llama.cpp's example grammars (STRATA_LLAMA_CPP_GRAMMARS)") {
  const char* dir = std::getenv("STRATA_LLAMA_CPP_GRAMMARS");
  if (dir == nullptr) {
    MESSAGE("STRATA_LLAMA_CPP_GRAMMARS not set: skipped");
    return;
  }
  struct sample {
    const char* text;
    bool ok;
  };
  struct grammar_case {
    const char* file;
    std::vector<sample> samples;
  };
  const std::vector<grammar_case> cases = {
      {"arithmetic.gbnf", {{"1+2=3\n", true}, {"a*(b+c) = 7\n", true}, {"1+=2\n", false}, {"1=2", false}}},
      {"c.gbnf", {{"int main(){return 0;}", true}, {"float f(int x){x = x*2;return x;}", true}, {"int main() {}", false}}},
      {"chess.gbnf", {{"1. e4 e5\n2. Nf3 Nc6\n", true}, {"1. e4 e5\n2. O-O exd8=Q+\n", true}, {"1. e4 e5\n", false}, {"1. e9 e5\n2. a3 a6\n", false}}},
      {"english.gbnf", {{"Hello, world! It's 42.", true}, {"h\xC3\xA9llo", false}}},
      {"japanese.gbnf", {{"\xE3\x81\x93\xE3\x82\x93\xE3\x81\xAB\xE3\x81\xA1\xE3\x81\xAF \xE4\xB8\x96\xE7\x95\x8C", true}, {"hello", false}}},
      {"json.gbnf", {{R"({"a": [1, 2.5e3, true, null], "b": {"c": "d\u00e9"}})", true}, {"[1]", false}, {R"({"a": 01})", false}}},
      {"json_arr.gbnf", {{"[\n1,\n\"x\"]", true}, {"[\n]", true}, {"[1]", false}}},
      {"list.gbnf", {{"- milk\n- eggs\n", true}, {"- milk", false}, {"milk\n", false}}},
  };
  for (const auto& c : cases) {
    CAPTURE(std::string(c.file));
    std::ifstream f(std::filesystem::path(dir) / c.file);
    REQUIRE(f.good());
    std::stringstream ss;
    ss << f.rdbuf();
    auto a = compile(ss.str());
    for (const auto& s : c.samples) {
      CAPTURE(std::string(s.text));
      CHECK(accepts(*a, s.text) == s.ok);
    }
  }
}
