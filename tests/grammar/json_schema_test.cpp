// JSON Schema -> GBNF: accepted and rejected documents per keyword, integer/number ranges checked
// exhaustively against the bounds, the regex subset, errors for unsupported constructs, and
// random walks through schema grammars whose every finished document parses and obeys the schema.
#include <doctest/doctest.h>

#include <random>
#include <string>
#include <vector>

#include "helpers.hpp"
#include "strata/grammar/json_schema.hpp"
#include "strata/json/parse.hpp"

using namespace grammar_test;

namespace {

struct doc {
  const char* text;
  bool ok;
};

std::shared_ptr<automaton> schema_automaton(std::string_view schema, const schema_options& opt = {}) {
  const schema_grammar g = json_schema_to_gbnf(schema, opt);
  return compile(g.gbnf);
}

void check_schema(std::string_view schema, const std::vector<doc>& docs, const schema_options& opt = {}) {
  CAPTURE(std::string(schema));
  const schema_grammar g = json_schema_to_gbnf(schema, opt);
  CAPTURE(g.gbnf);
  auto a = compile(g.gbnf);
  for (const auto& d : docs) {
    const std::string text = d.text;
    CAPTURE(text);
    CHECK(accepts(*a, text) == d.ok);
  }
}

}  // namespace

TEST_CASE("json schema: primitive types, enum, const, type lists, nullable") {
  check_schema(R"({"type": "string"})", {{R"("hi \"there\" \u00e9")", true}, {"\"\"", true}, {"\"a\nb\"", false}, {"1", false}});
  check_schema(R"({"type": "integer"})", {{"0", true}, {"-12", true}, {"012", false}, {"1.5", false}, {"1e3", false},
                                          {"123456789012345678", true}, {"1234567890123456789", false}});
  check_schema(R"({"type": "number"})", {{"-0.5e-3", true}, {"12", true}, {"1.", false}, {".5", false}, {"+1", false}});
  check_schema(R"({"type": "boolean"})", {{"true", true}, {"false", true}, {"null", false}});
  check_schema(R"({"type": ["string", "null"]})", {{"null", true}, {"\"x\"", true}, {"1", false}});
  check_schema(R"({"enum": ["red", 1, null, {"a": [true]}]})",
               {{"\"red\"", true}, {"1", true}, {"null", true}, {R"({"a":[true]})", true}, {"\"blue\"", false}, {"2", false}});
  check_schema(R"({"const": "fixed"})", {{"\"fixed\"", true}, {"\"other\"", false}});
  check_schema(R"({"type": "integer", "nullable": true})", {{"null", true}, {"3", true}, {"\"3\"", false}});
  check_schema("{}", {{R"({"any": [1, "thing", {"at": null}]})", true}, {"[]", true}, {"tru", false}});
  check_schema("true", {{"false", true}});
}

TEST_CASE("json schema: objects (required, optional, order, additionalProperties)") {
  const char* schema = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "string"},
                           "c": {"type": "boolean"}}, "required": ["b"]})";
  check_schema(schema, {{R"({"b": "x"})", true},
                        {R"({"a": 1, "b": "x"})", true},
                        {R"({"a": 1, "b": "x", "c": true})", true},
                        {R"({"b": "x", "c": false})", true},
                        {R"({"a": 1})", false},                     // b is required
                        {R"({"b": "x", "a": 1})", false},           // declaration order
                        {R"({"b": "x", "d": 1})", false},           // additionalProperties false by default
                        {R"({ "b" : "x" })", true},
                        {"{\n  \"b\": \"x\"\n}", true}});
  check_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "additionalProperties": {"type": "number"}})",
               {{R"({"a": 1, "x": 2.5, "y": 3})", true},
                {R"({"x": 2.5})", true},
                {R"({"a": 1, "a": 2})", false},   // a declared key cannot come back as an extra one
                {R"({"ab": 2})", true},
                {R"({"x": "s"})", false},
                {"{}", true}});
  check_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}})",
               {{R"({"zz": [1]})", true}, {R"({"a": 1, "b": null})", true}}, {.additional_properties_default = true});
  check_schema(R"({"type": "object"})", {{"{}", true}, {R"({"k": 1})", false}});
  check_schema(R"({"type": "object", "additionalProperties": true})", {{R"({"k": {"n": [1]}})", true}, {"[]", false}});
  check_schema(R"({"properties": {"x": {"const": 1}}, "required": ["x"]})", {{R"({"x": 1})", true}, {"{}", false}});
  check_schema(R"({"type": "object", "properties": {"q\"k": {"type": "null"}}, "required": ["q\"k"]})",
               {{R"({"q\"k": null})", true}});
  check_schema(R"({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})",
               {{R"({"a":1})", true}, {R"({ "a": 1 })", false}}, {.ws = whitespace::compact});
}

TEST_CASE("json schema: arrays") {
  check_schema(R"({"type": "array", "items": {"type": "integer"}, "minItems": 2, "maxItems": 3})",
               {{"[1, 2]", true}, {"[1,2,3]", true}, {"[1]", false}, {"[1, 2, 3, 4]", false}, {"[1, \"2\"]", false}});
  check_schema(R"({"type": "array", "items": {"type": "string"}})", {{"[]", true}, {"[\"a\", \"b\"]", true}, {"[1]", false}});
  check_schema(R"({"type": "array", "maxItems": 0})", {{"[]", true}, {"[1]", false}});
  check_schema(R"({"type": "array", "minItems": 1})", {{"[]", false}, {"[{}, 1]", true}});
  check_schema(R"({"prefixItems": [{"type": "string"}, {"type": "integer"}], "items": false})",
               {{"[\"a\", 1]", true}, {"[\"a\", 1, 2]", false}, {"[\"a\"]", false}});
  check_schema(R"({"prefixItems": [{"type": "string"}], "items": {"type": "integer"}, "maxItems": 3})",
               {{"[\"a\"]", true}, {"[\"a\", 1, 2]", true}, {"[\"a\", 1, 2, 3]", false}});
}

TEST_CASE("json schema: string lengths, formats, patterns") {
  check_schema(R"({"type": "string", "minLength": 2, "maxLength": 3})",
               {{"\"ab\"", true}, {"\"a\\nc\"", true}, {"\"\xC3\xA9\xC3\xA9\"", true}, {"\"a\"", false}, {"\"abcd\"", false}});
  check_schema(R"({"type": "string", "format": "date"})", {{"\"2026-11-24\"", true}, {"\"2026-13-01\"", false}, {"\"26-11-24\"", false}});
  check_schema(R"({"type": "string", "format": "date-time"})",
               {{"\"2026-11-24T09:30:00Z\"", true}, {"\"2026-11-24T09:30:00.123+01:00\"", true}, {"\"2026-11-24 09:30:00Z\"", false},
                {"\"2026-11-24T24:00:00Z\"", false}});
  check_schema(R"({"type": "string", "format": "time"})", {{"\"23:59:60-05:00\"", true}, {"\"23:59\"", false}});
  check_schema(R"({"type": "string", "format": "uuid"})",
               {{"\"123e4567-e89b-12d3-a456-426614174000\"", true}, {"\"123e4567e89b12d3a456426614174000\"", false}});
  check_schema(R"({"type": "string", "pattern": "^[A-Z]{2}-\\d{3,4}$"})",
               {{"\"AB-123\"", true}, {"\"AB-1234\"", true}, {"\"ab-123\"", false}, {"\"AB-12\"", false}, {"\"xAB-123\"", false}});
  check_schema(R"({"type": "string", "pattern": "(cat|dog)s?"})", {{"\"cats\"", true}, {"\"hotdog!\"", true}, {"\"cow\"", false}});
  check_schema(R"({"type": "string", "pattern": "^a\"b\\\\c.$"})",
               {{R"("a\"b\\cz")", true}, {R"("a\"b\\c\n")", false}, {R"("a\"b\\c\"")", true}});
  check_schema(R"({"type": "string", "pattern": "^(?:[a-c]+?|x{2})$"})", {{"\"abc\"", true}, {"\"xx\"", true}, {"\"x\"", false}});
}

TEST_CASE("json schema: integer bounds, checked for every value in a window") {
  struct bounds_case {
    const char* schema;
    long lo, hi;  // inclusive range the schema allows
  };
  const bounds_case cases[] = {
      {R"({"type": "integer", "minimum": -13, "maximum": 127})", -13, 127},
      {R"({"type": "integer", "exclusiveMinimum": 9, "exclusiveMaximum": 101})", 10, 100},
      {R"({"type": "integer", "minimum": 250})", 250, 1000000},
      {R"({"type": "integer", "maximum": -7})", -1000000, -7},
      {R"({"type": "integer", "minimum": 1.5, "maximum": 4.5})", 2, 4},
      {R"({"type": "integer", "minimum": 0, "maximum": 0})", 0, 0},
  };
  for (const auto& c : cases) {
    CAPTURE(std::string(c.schema));
    auto a = schema_automaton(c.schema);
    for (long v = -400; v <= 400; ++v) {
      CAPTURE(v);
      CHECK(accepts(*a, std::to_string(v)) == (v >= c.lo && v <= c.hi));
    }
  }
  CHECK_THROWS_WITH_AS(json_schema_to_gbnf(R"({"type": "integer", "minimum": 5, "maximum": 3})"),
                       "json schema: at /: no integer satisfies the bounds", schema_error);
}

TEST_CASE("json schema: number bounds") {
  struct number_case {
    const char* text;
    double value;
  };
  const number_case values[] = {{"-3", -3}, {"-2.5", -2.5}, {"-2", -2}, {"-2.0", -2}, {"-1.5", -1.5}, {"-0.0001", -0.0001},
                                {"0", 0},   {"0.0", 0},     {"0.5", 0.5}, {"1", 1},   {"1.00", 1},    {"1.01", 1.01},
                                {"9.99", 9.99}, {"10", 10}, {"10.000", 10}, {"10.5", 10.5}, {"11", 11}};
  struct bounds_case {
    const char* schema;
    double lo, hi;
    bool lo_excl, hi_excl;
  };
  const bounds_case cases[] = {
      {R"({"type": "number", "minimum": 0, "maximum": 10})", 0, 10, false, false},
      {R"({"type": "number", "exclusiveMinimum": 0, "exclusiveMaximum": 10})", 0, 10, true, true},
      {R"({"type": "number", "minimum": -2, "exclusiveMaximum": 1})", -2, 1, false, true},
      {R"({"type": "number", "exclusiveMinimum": -2, "maximum": 0})", -2, 0, true, false},
      {R"({"type": "number", "maximum": -2})", -1e9, -2, false, false},
      {R"({"type": "number", "exclusiveMinimum": 1})", 1, 1e9, true, false},
  };
  for (const auto& c : cases) {
    CAPTURE(std::string(c.schema));
    auto a = schema_automaton(c.schema);
    for (const auto& v : values) {
      CAPTURE(std::string(v.text));
      const bool in = (c.lo_excl ? v.value > c.lo : v.value >= c.lo) && (c.hi_excl ? v.value < c.hi : v.value <= c.hi);
      CHECK(accepts(*a, v.text) == in);
    }
  }
  CHECK_THROWS_WITH_AS(json_schema_to_gbnf(R"({"type": "number", "minimum": 0.5})"),
                       "json schema: at /: bounds of type number must be whole numbers of at most 16 digits (got 0.5); use type integer or drop the bound",
                       schema_error);
}

TEST_CASE("json schema: anyOf, oneOf, allOf, $ref with recursion") {
  check_schema(R"({"anyOf": [{"type": "integer"}, {"type": "string", "maxLength": 1}]})",
               {{"5", true}, {"\"a\"", true}, {"\"ab\"", false}});
  check_schema(R"({"oneOf": [{"const": 1}, {"const": 2}], "description": "annotations may sit beside"})", {{"2", true}, {"3", false}});
  check_schema(R"({"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                             {"properties": {"b": {"type": "string"}}, "required": ["b"]}]})",
               {{R"({"a": 1, "b": "x"})", true}, {R"({"a": 1})", false}});
  const char* tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
                          "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}},
                          "$ref": "#/$defs/node"})";
  check_schema(tree, {{R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})", true},
                      {R"({"v": 1, "kids": [{"kids": []}]})", false}});
  check_schema(R"({"type": "object", "properties": {"next": {"$ref": "#"}, "x": {"type": "integer"}}, "required": ["x"]})",
               {{R"({"next": {"x": 2}, "x": 1})", true}, {R"({"next": {}, "x": 1})", false}});
  check_schema(R"({"definitions": {"id": {"type": "integer", "minimum": 1}}, "type": "array", "items": {"$ref": "#/definitions/id", "maximum": 3}})",
               {{"[1, 3]", true}, {"[4]", false}, {"[0]", false}});
}

TEST_CASE("json schema: errors and warnings") {
  const std::vector<std::pair<const char*, const char*>> bad = {
      {R"({"type": "strin"})", "json schema: at /type: unknown type 'strin'"},
      {R"({"not": {"type": "string"}})", "json schema: at /: keyword 'not' is not supported"},
      {R"({"type": "array", "uniqueItems": true})", "json schema: at /: uniqueItems: true is not supported"},
      {R"({"properties": {"a": {"type": "integer", "multipleOf": 2}}})", "json schema: at /properties/a: keyword 'multipleOf' is not supported"},
      {R"({"$ref": "http://example.com/s.json"})", "json schema: at /: $ref 'http://example.com/s.json' is not local (only '#...' references are supported)"},
      {R"({"$ref": "#/$defs/missing"})", "json schema: at /: $ref '#/$defs/missing' points at nothing"},
      {R"({"type": "object", "required": ["x"]})", "json schema: at /required: required property 'x' is not in properties and additionalProperties is false"},
      {R"({"type": "string", "pattern": "(a)\\1"})", "json schema: at /pattern: pattern: backreferences are not supported at offset 3 in '(a)\\1'"},
      {R"j({"type": "string", "pattern": "a(?=b)"})j", "json schema: at /pattern: pattern: lookahead is not supported at offset 3 in 'a(?=b)'"},
      {R"({"type": "string", "minLength": 3, "maxLength": 1})", "json schema: at /: minLength 3 is greater than maxLength 1"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "json schema: at /: minItems 3 is greater than maxItems 1"},
      {R"({"anyOf": [{"type": "string"}], "minLength": 2})", "json schema: at /: anyOf together with other constraints is not supported"},
      {R"({"properties": {"a": false}, "required": ["a"]})", "json schema: at /properties/a: schema false allows nothing"},
      {R"({"type": "object", "properties": {"a": 1}})", "json schema: at /properties/a: a schema must be an object or a boolean, got number"},
      {R"({"allOf": [{"type": "string"}, {"type": "integer"}]})", "json schema: at /: allOf: keyword 'type' has conflicting values"},
      {R"({"type": "object",)", "json schema: line 1, column 19: unexpected end of input in an object"},
  };
  for (const auto& [schema, msg] : bad) {
    CAPTURE(std::string(schema));
    CHECK_THROWS_WITH_AS(json_schema_to_gbnf(std::string_view(schema)), msg, schema_error);
  }
  CHECK_THROWS_WITH_AS(json_schema_to_gbnf(R"({"$ref": "#"})"),
                       doctest::Contains("json schema: cannot be turned into a grammar: grammar:"), schema_error);
  const auto g = json_schema_to_gbnf(R"({"type": "string", "format": "email", "x-vendor": 1})");
  REQUIRE(g.warnings.size() == 2);
  CHECK(g.warnings[0] == "/: unknown keyword 'x-vendor' ignored");
  CHECK(g.warnings[1] == "/format: format 'email' is not enforced (any string)");
}

TEST_CASE("json schema: json_object grammar") {
  auto a = compile(json_object_gbnf());
  CHECK(accepts(*a, R"({"a": [1, {"b": null}], "c": "d"})"));
  CHECK_FALSE(accepts(*a, "[1]"));
  CHECK_FALSE(accepts(*a, "\"s\""));
  CHECK_FALSE(accepts(*a, "{\"a\": 1}\n"));  // nothing after the object: the end comes at once
  CHECK(accepts(*a, "{\n    \"a\": 1\n}"));
  CHECK_FALSE(accepts(*a, "{\"a\":                      1}"));  // 22 spaces: whitespace is bounded
}

TEST_CASE("json schema: random documents from the grammar parse and obey the schema") {
  const char* schema = R"({"type": "object", "properties": {
      "name": {"type": "string", "maxLength": 8},
      "age": {"type": "integer", "minimum": 0, "maximum": 130},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 3},
      "when": {"type": "string", "format": "date"}},
    "required": ["name", "age"]})";
  auto a = schema_automaton(schema, {.ws = whitespace::compact});
  std::mt19937 rng(5);
  int finished = 0;
  for (int trial = 0; trial < 60; ++trial) {
    matcher m(a);
    std::string out;
    for (int step = 0; step < 400 && !m.finished(); ++step) {
      const auto mask = m.allowed();
      std::vector<token_id> ok;
      for (token_id t = 0; t < 256; ++t)
        if (strata::sampling::mask_allows(mask, t)) ok.push_back(t);
      REQUIRE_FALSE(ok.empty());
      const token_id t = ok[rng() % ok.size()];
      m.accept(t);
      out += char(t);
    }
    if (!m.finished()) continue;
    ++finished;
    CAPTURE(out);
    const strata::json::value v = strata::json::parse(out);
    REQUIRE(v.is_object());
    REQUIRE(v.find("name"));
    CHECK(v.find("name")->is_string());
    const auto age = std::stol(v.find("age")->number_text());
    CHECK((age >= 0 && age <= 130));
    if (const auto* tags = v.find("tags")) CHECK(tags->items().size() <= 3);
  }
  CHECK(finished > 20);
}
