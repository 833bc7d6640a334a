// JSON parsing (strict, errors with line and column, streaming prefixes) and json.dumps
// compatibility: expected texts are Python 3.11's json.dumps(json.loads(input), ensure_ascii=False)
// with the default separators, indent=4, and separators=(",", ":").
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/json/parse.hpp"
#include "strata/json/write.hpp"

using namespace strata::json;

namespace {
struct dumps_case {
  const char* input;
  const char* python;         // json.dumps(v, ensure_ascii=False)
  const char* python_indent;  // indent=4
  const char* python_compact; // separators=(",", ":")
};
const dumps_case dumps_cases[] = {
    {"{\"b\": 1, \"a\": [1.0, -0, 0.5e1, 1E400, -1e-7, 12345678901234567890, 1e16, 123456789012345678.0], \"c\": {\"x\": null, \"y\": true, \"z\": false}}",
     "{\"b\": 1, \"a\": [1.0, 0, 5.0, Infinity, -1e-07, 12345678901234567890, 1e+16, 1.2345678901234568e+17], \"c\": {\"x\": null, \"y\": true, \"z\": false}}",
     "{\n    \"b\": 1,\n    \"a\": [\n        1.0,\n        0,\n        5.0,\n        Infinity,\n        -1e-07,\n        12345678901234567890,\n        1e+16,\n        1.2345678901234568e+17\n    ],\n    \"c\": {\n        \"x\": null,\n        \"y\": true,\n        \"z\": false\n    }\n}",
     "{\"b\":1,\"a\":[1.0,0,5.0,Infinity,-1e-07,12345678901234567890,1e+16,1.2345678901234568e+17],\"c\":{\"x\":null,\"y\":true,\"z\":false}}"},
    {"[\"\\u00e9\\ud83d\\ude42\", \"tab\\there\", \"\\u0001\\u001f\\u007f\", \"/\\/\", \"line\\nbreak\", \"quote\\\"back\\\\\"]",
     "[\"é🙂\", \"tab\\there\", \"\\u0001\\u001f\x7f\", \"//\", \"line\\nbreak\", \"quote\\\"back\\\\\"]",
     "[\n    \"é🙂\",\n    \"tab\\there\",\n    \"\\u0001\\u001f\x7f\",\n    \"//\",\n    \"line\\nbreak\",\n    \"quote\\\"back\\\\\"\n]",
     "[\"é🙂\",\"tab\\there\",\"\\u0001\\u001f\x7f\",\"//\",\"line\\nbreak\",\"quote\\\"back\\\\\"]"},
    {"{\"k\": {}, \"l\": [], \"m\": [[]], \"n\": {\"o\": {\"p\": [1, 2]}}}",
     "{\"k\": {}, \"l\": [], \"m\": [[]], \"n\": {\"o\": {\"p\": [1, 2]}}}",
     "{\n    \"k\": {},\n    \"l\": [],\n    \"m\": [\n        []\n    ],\n    \"n\": {\n        \"o\": {\n            \"p\": [\n                1,\n                2\n            ]\n        }\n    }\n}",
     "{\"k\":{},\"l\":[],\"m\":[[]],\"n\":{\"o\":{\"p\":[1,2]}}}"},
    {"{\"a\": 1, \"a\": 2, \"b\": 3}", "{\"a\": 2, \"b\": 3}", "{\n    \"a\": 2,\n    \"b\": 3\n}", "{\"a\":2,\"b\":3}"},
    {"[0.1, 0.30000000000000004, 1e-4, 1.5e-5, 2e15, 9007199254740993, -123.0e-2, 3.14159265358979]",
     "[0.1, 0.30000000000000004, 0.0001, 1.5e-05, 2000000000000000.0, 9007199254740993, -1.23, 3.14159265358979]",
     "[\n    0.1,\n    0.30000000000000004,\n    0.0001,\n    1.5e-05,\n    2000000000000000.0,\n    9007199254740993,\n    -1.23,\n    3.14159265358979\n]",
     "[0.1,0.30000000000000004,0.0001,1.5e-05,2000000000000000.0,9007199254740993,-1.23,3.14159265358979]"},
};
}  // namespace

TEST_CASE("json: dumps writes what Python's json.dumps writes") {
  for (const auto& c : dumps_cases) {
    CAPTURE(std::string(c.input));
    const value v = parse(c.input);
    CHECK(dumps(v) == c.python);
    CHECK(dumps(v, {.indent = 4}) == c.python_indent);
    CHECK(dumps(v, {.compact = true}) == c.python_compact);
  }
  CHECK(python_float_repr(5e-324) == "5e-324");
  CHECK(python_float_repr(-0.0) == "-0.0");
  CHECK(python_float_repr(1e15) == "1000000000000000.0");
  CHECK(python_float_repr(123456.789e3) == "123456789.0");
}

TEST_CASE("json: lone surrogates become U+FFFD") {
  CHECK(parse(R"("\ud800x\udc00")").as_string() == "\xEF\xBF\xBDx\xEF\xBF\xBD");
  CHECK(parse(R"("\ud83d\u0041")").as_string() == "\xEF\xBF\xBD" "A");
}

TEST_CASE("json: errors name line and column") {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {"", "json: line 1, column 1: unexpected end of input in a value"},
      {"{\"a\" 1}", "json: line 1, column 6: expected ':' after the object key, found '1'"},
      {"{\"a\": 1,}", "json: line 1, column 9: expected a string key in the object, found '}'"},
      {"[1 2]", "json: line 1, column 4: expected ',' or ']' in the array, found '2'"},
      {"[01]", "json: line 1, column 3: leading zero in a number"},
      {"[1.]", "json: line 1, column 4: expected a digit after '.', found ']'"},
      {"\"a\tb\"", "json: line 1, column 3: raw control character 0x09 in a string (write it as an escape)"},
      {"\"\\x\"", "json: line 1, column 2: unknown escape '\\x' in a string"},
      {"\"\\u12G4\"", "json: line 1, column 6: invalid \\u escape"},
      {"[\n  tru ]", "json: line 2, column 3: invalid literal (expected true)"},
      {"{} x", "json: line 1, column 4: unexpected 'x' after the JSON value"},
      {"\"\xFF\"", "json: line 1, column 2: invalid UTF-8 byte 0xFF in a string"},
      {"[1, 2", "json: line 1, column 6: unexpected end of input in an array"},
  };
  for (const auto& [text, msg] : bad) {
    CAPTURE(std::string(text));
    CHECK_THROWS_WITH_AS(parse(text), msg, parse_error);
  }
  CHECK_THROWS_WITH_AS(parse(std::string(300, '[') + std::string(300, ']')), "json: line 1, column 257: nesting deeper than 256",
                       parse_error);
}

TEST_CASE("json: streaming prefixes are incomplete, not invalid") {
  const std::string full = R"({"name": "get_weather", "arguments": {"city": "Zürich", "days": [1, 2.5e1, true, null]}} tail)";
  const auto done = parse_prefix(full);
  REQUIRE(done);
  CHECK(full.substr(done->end) == " tail");
  CHECK(done->v.find("name")->as_string() == "get_weather");
  const std::size_t value_end = done->end;
  for (std::size_t n = 0; n < value_end; ++n) {
    CAPTURE(n);
    CHECK_FALSE(parse_prefix(std::string_view(full).substr(0, n)));
  }
  CHECK_THROWS_AS(parse_prefix("{\"a\": x"), parse_error);
  CHECK_THROWS_AS(parse_prefix("[1,,"), parse_error);
  CHECK_FALSE(parse_prefix("12"));  // a number may go on
  CHECK(parse_prefix("12 ")->v.number_text() == "12");
  CHECK_FALSE(parse_prefix("\"\xC3"));  // a character cut in two
}

TEST_CASE("json: value accessors") {
  value v = parse(R"({"a": 1, "b": "x"})");
  CHECK(v.find("a")->is_integer());
  CHECK(v.find("c") == nullptr);
  v.set("a", value::boolean(true));
  v.set("c", value());
  CHECK(dumps(v) == R"({"a": true, "b": "x", "c": null})");
  CHECK_THROWS_WITH_AS(v.find("b")->items(), "json: expected array, got string", strata::error);
}
