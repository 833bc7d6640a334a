// JSON Schema (draft 2020-12, the subset below) -> GBNF whose every complete match is a JSON
// document valid against the schema. The grammar may be stricter than the schema (it always
// writes declared properties in declaration order, and enum/const values compactly), never looser;
// a keyword it cannot enforce is an error (schema_error, naming the JSON pointer), not ignored.
//   types (string list too), enum, const, anyOf, oneOf (as anyOf), allOf (merged), $ref into the
//   document (#, #/$defs/.., #/definitions/.., any JSON pointer; recursion allowed), nullable
//   objects: properties, required, additionalProperties (false by default, as llama.cpp and
//     OpenAI strict mode: option additional_properties_default = true follows the spec)
//   arrays: items, prefixItems (all required), minItems, maxItems
//   strings: minLength, maxLength, pattern (regex.hpp subset), format date, time, date-time, uuid
//     (other formats are annotations per the spec: accepted as plain strings, with a warning)
//   integers/numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (number bounds must be
//     whole numbers)
// Annotations (title, description, default, examples, ...) are ignored; unknown keywords too,
// with a warning. Whitespace is bounded (one space, or a newline and up to 20 spaces/tabs,
// between tokens; none with whitespace::compact), as are number lengths (integer part 16 digits,
// 18 for type integer; fraction 16; exponent 3).
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/grammar/detail/gbnf_text.hpp"
#include "strata/grammar/detail/schema_rules.hpp"
#include "strata/grammar/regex.hpp"
#include "strata/json/parse.hpp"
#include "strata/json/write.hpp"

namespace strata::grammar {

class schema_error : public error {
 public:
  using error::error;
};

enum class whitespace { flexible, compact };

struct schema_options {
  bool additional_properties_default = false;
  whitespace ws = whitespace::flexible;
};

struct schema_grammar {
  std::string gbnf;                   // start rule: root
  std::vector<std::string> warnings;  // e.g. "/properties/site: format 'uri' is not enforced"
};

schema_grammar json_schema_to_gbnf(const json::value& schema, const schema_options& opt = {});
// `schema_json` is the schema's JSON text; a JSON syntax error is a schema_error too.
schema_grammar json_schema_to_gbnf(std::string_view schema_json, const schema_options& opt = {});
// Any JSON object (OpenAI response_format json_object), whitespace and numbers bounded as above.
std::string json_object_gbnf(const schema_options& opt = {});

namespace detail {

class schema_converter {
 public:
  schema_converter(const json::value& root, const schema_options& opt) : root_(root), opt_(opt), prim_(opt.ws == whitespace::compact) {}

  schema_grammar run() {
    rules_.emplace_back("root", "");
    direct_ = true;
    const std::string body = visit(root_, "", "root");
    rules_[0].second = body;
    schema_grammar out;
    for (const auto& [name, rule_body] : rules_) out.gbnf += name + " ::= " + rule_body + "\n";
    out.gbnf += prim_.text();
    out.warnings = std::move(warnings_);
    return out;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw schema_error("json schema: at " + (path.empty() ? std::string("/") : path) + ": " + what);
  }
  void warn(const std::string& path, const std::string& what) {
    warnings_.push_back((path.empty() ? std::string("/") : path) + ": " + what);
  }
  static std::string escape_pointer(std::string_view key) {
    std::string s;
    for (const char c : key) s += c == '~' ? "~0" : c == '/' ? "~1" : std::string(1, c);
    return s;
  }

  // A fresh rule name from a hint ([a-zA-Z0-9-]).
  std::string new_name(const std::string& hint) {
    std::string n;
    for (const char c : hint) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
      if (ok) n += c;
      else if (!n.empty() && n.back() != '-') n += '-';
    }
    while (!n.empty() && n.back() == '-') n.pop_back();
    if (n.size() > 48) n.resize(48);
    if (n.empty()) n = "r";
    std::string name = n;
    for (int k = 1; used_.count(name) || detail::schema_primitives::reserved(name); ++k) name = n + "-" + std::to_string(k);
    used_.insert(name);
    return name;
  }
  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = new_name(hint);
    rules_.emplace_back(name, body);
    return name;
  }

  // Target of a local $ref (a JSON pointer into the document).
  const json::value& resolve(const std::string& ref, const std::string& path) const {
    if (ref.empty() || ref[0] != '#') fail(path, "$ref '" + ref + "' is not local (only '#...' references are supported)");
    const json::value* v = &root_;
    std::size_t i = 1;
    if (i < ref.size() && ref[i] != '/') fail(path, "$ref '" + ref + "' is not a JSON pointer");
    while (i < ref.size()) {
      const std::size_t j = ref.find('/', i + 1);
      std::string token = ref.substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      for (std::size_t k = 0; (k = token.find('~', k)) != std::string::npos; ++k)
        token.replace(k, 2, k + 1 < token.size() && token[k + 1] == '1' ? "/" : "~");
      if (v->is_object()) {
        v = v->find(token);
      } else if (v->is_array() && !token.empty() && token.find_first_not_of("0123456789") == std::string::npos &&
                 std::stoul(token) < v->items().size()) {
        v = &v->items()[std::stoul(token)];
      } else {
        v = nullptr;
      }
      if (v == nullptr) fail(path, "$ref '" + ref + "' points at nothing");
      i = j == std::string::npos ? ref.size() : j;
    }
    return *v;
  }

  std::string visit(const json::value& s, const std::string& path, const std::string& hint);
  std::string visit_object(const json::value& s, const std::string& path, const std::string& hint);
  std::string visit_array(const json::value& s, const std::string& path, const std::string& hint);
  std::string visit_string(const json::value& s, const std::string& path);
  std::string visit_number(const json::value& s, const std::string& path, bool integer);
  json::value merge_all_of(const json::value& s, const std::string& path);
  std::string not_keys_rule(const std::vector<std::string>& keys, const std::string& hint);

  const json::value& root_;
  const schema_options& opt_;
  schema_primitives prim_;
  std::vector<std::pair<std::string, std::string>> rules_;
  std::set<std::string> used_ = {"root"};
  std::map<std::string, std::string> ref_rules_;  // $ref -> rule name
  std::vector<std::string> warnings_;
  bool direct_ = false;  // the next visit() writes the body of an existing rule (root, a $ref)
};

}  // namespace detail
}  // namespace strata::grammar

#include "strata/grammar/detail/schema_visit.hpp"
