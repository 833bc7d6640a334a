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
#include <memory>
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
struct schema_output;
}

// Several schemas in one grammar (e.g. each tool's arguments): each gets its own rules, the
// primitive rules (ws, string, number, ...) are written once. Warnings accumulate.
class schema_set {
 public:
  explicit schema_set(const schema_options& opt = {});
  ~schema_set();
  // Adds `schema`'s rules; returns the name of the rule matching it ("root" only if asked for it
  // first, otherwise `name` sanitized and made unique). Throws schema_error.
  std::string add(const json::value& schema, std::string_view name);
  // "root ::= root_body" (omitted when empty), `extra_rules` (whole lines), the added rules, the
  // primitives; checked by parsing it (schema_error if it cannot work, e.g. a $ref loop with no
  // JSON in between).
  std::string gbnf(std::string_view root_body, std::string_view extra_rules = {}) const;
  const std::vector<std::string>& warnings() const noexcept;

 private:
  std::unique_ptr<detail::schema_output> out_;
};

namespace detail {

// What the conversions of one grammar share: rules written so far, names taken, primitives used.
struct schema_output {
  explicit schema_output(const schema_options& o) : opt(o), prim(o.ws == whitespace::compact) {}
  schema_options opt;
  schema_primitives prim;
  std::vector<std::pair<std::string, std::string>> rules;
  std::set<std::string> used = {"root"};
  std::vector<std::string> warnings;
};

class schema_converter {
 public:
  schema_converter(const json::value& root, schema_output& out) : root_(root), opt_(out.opt), out_(out) {}

  // Writes the rules for the schema; `name` (which must be free, or "root") is the rule that
  // matches it.
  void run(const std::string& name) {
    out_.used.insert(name);
    const std::size_t slot = out_.rules.size();
    out_.rules.emplace_back(name, "");
    direct_ = true;
    const std::string body = visit(root_, "", name);
    out_.rules[slot].second = body;
  }

 private:
  [[noreturn]] void fail(const std::string& path, const std::string& what) const {
    throw schema_error("json schema: at " + (path.empty() ? std::string("/") : path) + ": " + what);
  }
  void warn(const std::string& path, const std::string& what) {
    out_.warnings.push_back((path.empty() ? std::string("/") : path) + ": " + what);
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
    for (int k = 1; out_.used.count(name) || detail::schema_primitives::reserved(name); ++k) name = n + "-" + std::to_string(k);
    out_.used.insert(name);
    return name;
  }
  std::string add_rule(const std::string& hint, const std::string& body) {
    const std::string name = new_name(hint);
    out_.rules.emplace_back(name, body);
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
      const std::string_view raw = std::string_view(ref).substr(i + 1, j == std::string::npos ? std::string::npos : j - i - 1);
      std::string token;  // ~1 is '/', ~0 is '~' (RFC 6901)
      for (std::size_t k = 0; k < raw.size(); ++k) {
        if (raw[k] == '~' && k + 1 < raw.size() && (raw[k + 1] == '0' || raw[k + 1] == '1')) {
          token += raw[++k] == '1' ? '/' : '~';
        } else {
          token += raw[k];
        }
      }
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
  schema_output& out_;
  std::map<std::string, std::string> ref_rules_;  // $ref -> rule name (per document)
  bool direct_ = false;  // the next visit() writes the body of an existing rule (root, a $ref)
};

}  // namespace detail
}  // namespace strata::grammar

#include "strata/grammar/detail/schema_visit.hpp"
