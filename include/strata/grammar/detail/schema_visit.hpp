// The JSON Schema converter's keyword handling (json_schema.hpp declares the class and documents
// the supported subset).
#pragma once
#include <algorithm>
#include <cctype>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "strata/grammar/gbnf.hpp"
#include "strata/grammar/json_schema.hpp"

namespace strata::grammar {
namespace detail {

inline constexpr std::string_view schema_annotations[] = {
    "title", "description", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly",
    "$schema", "$id", "$anchor", "$defs", "definitions", "contentMediaType", "contentEncoding", "$vocabulary",
    "strict", "discriminator", "example", "xml", "externalDocs"};
inline constexpr std::string_view schema_handled[] = {
    "type", "enum", "const", "anyOf", "oneOf", "allOf", "$ref", "nullable", "properties", "required",
    "additionalProperties", "items", "prefixItems", "additionalItems", "minItems", "maxItems", "minLength",
    "maxLength", "pattern", "format", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
inline constexpr std::string_view schema_unsupported[] = {
    "not", "if", "then", "else", "dependentRequired", "dependentSchemas", "dependencies", "patternProperties",
    "propertyNames", "unevaluatedProperties", "unevaluatedItems", "contains", "minContains", "maxContains",
    "multipleOf", "minProperties", "maxProperties", "$dynamicRef", "$recursiveRef"};

template <std::size_t N>
bool listed(const std::string_view (&list)[N], std::string_view k) {
  return std::find(std::begin(list), std::end(list), k) != std::end(list);
}

inline bool is_assertion(std::string_view k) { return !listed(schema_annotations, k); }

inline std::string schema_converter::visit(const json::value& s, const std::string& path, const std::string& hint) {
  const bool direct = std::exchange(direct_, false);  // the caller's rule body: no rule of its own
  if (s.is_bool()) {
    if (!s.as_bool()) fail(path, "schema false allows nothing");
    return out_.prim.use("value");
  }
  if (!s.is_object()) fail(path, "a schema must be an object or a boolean, got " + std::string(json::kind_name(s.type())));
  for (const auto& [k, v] : s.members()) {
    if (listed(schema_unsupported, k)) fail(path, "keyword '" + k + "' is not supported");
    if (k == "uniqueItems" && v.is_bool() && v.as_bool()) fail(path, "uniqueItems: true is not supported");
    if (!listed(schema_annotations, k) && !listed(schema_handled, k) && k != "uniqueItems")
      warn(path, "unknown keyword '" + k + "' ignored");
  }
  const auto count_assertions = [&](std::initializer_list<std::string_view> except) {
    std::size_t n = 0;
    for (const auto& [k, v] : s.members())
      if (is_assertion(k) && listed(schema_handled, k) && std::find(except.begin(), except.end(), k) == except.end()) ++n;
    return n;
  };

  if (const json::value* ref = s.find("$ref")) {
    if (!ref->is_string()) fail(path + "/$ref", "must be a string");
    if (count_assertions({"$ref"}) > 0) {
      direct_ = direct;
      return visit(merge_all_of(s, path), path, hint);
    }
    const std::string& r = ref->as_string();
    if (const auto it = ref_rules_.find(r); it != ref_rules_.end()) return it->second;
    const std::string name = new_name(r.substr(r.rfind('/') + 1));
    ref_rules_[r] = name;
    const std::size_t slot = out_.rules.size();
    out_.rules.emplace_back(name, "");
    direct_ = true;
    const std::string body = visit(resolve(r, path), r.size() > 1 ? r.substr(1) : "", name);
    out_.rules[slot].second = body;
    return name;
  }
  if (s.find("allOf")) {
    direct_ = direct;
    return visit(merge_all_of(s, path), path, hint);
  }
  if (const json::value* n = s.find("nullable"); n && n->is_bool() && n->as_bool()) {
    json::value rest = s;
    rest.set("nullable", json::value::boolean(false));
    return "( " + visit(rest, path, hint) + " | " + out_.prim.use("null") + " )";
  }
  if (const json::value* c = s.find("const")) return literal(json::dumps(*c, {.compact = true}));
  if (const json::value* e = s.find("enum")) {
    if (!e->is_array() || e->items().empty()) fail(path + "/enum", "must be a non-empty array");
    std::string alts;
    for (const auto& v : e->items()) alts += (alts.empty() ? "" : " | ") + literal(json::dumps(v, {.compact = true}));
    return "( " + alts + " )";
  }
  for (const char* key : {"anyOf", "oneOf"}) {
    const json::value* list = s.find(key);
    if (!list) continue;
    if (!list->is_array() || list->items().empty()) fail(path + "/" + key, "must be a non-empty array");
    if (count_assertions({key}) > 0) fail(path, std::string(key) + " together with other constraints is not supported");
    std::string alts;
    for (std::size_t i = 0; i < list->items().size(); ++i)
      alts += (i ? " | " : "") + visit(list->items()[i], path + "/" + key + "/" + std::to_string(i), hint + "-" + std::to_string(i));
    return "( " + alts + " )";
  }

  std::vector<std::string> types;
  if (const json::value* t = s.find("type")) {
    if (t->is_string()) {
      types.push_back(t->as_string());
    } else if (t->is_array() && !t->items().empty()) {
      for (const auto& x : t->items()) {
        if (!x.is_string()) fail(path + "/type", "must be a string or an array of strings");
        types.push_back(x.as_string());
      }
    } else {
      fail(path + "/type", "must be a string or a non-empty array of strings");
    }
  } else {
    const auto has = [&](std::initializer_list<const char*> ks) {
      for (const char* k : ks)
        if (s.find(k)) return true;
      return false;
    };
    if (has({"properties", "additionalProperties", "required"})) types = {"object"};
    else if (has({"items", "prefixItems", "minItems", "maxItems"})) types = {"array"};
    else if (has({"minLength", "maxLength", "pattern", "format"})) types = {"string"};
    else if (has({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"})) types = {"number"};
    else return out_.prim.use("value");
  }
  std::string alts;
  for (const std::string& t : types) {
    std::string e;
    const bool own_rule = !direct || types.size() > 1;
    if (t == "object") e = visit_object(s, path, hint);
    else if (t == "array") e = visit_array(s, path, hint);
    else if (t == "string") e = visit_string(s, path);
    else if (t == "number" || t == "integer") e = visit_number(s, path, t == "integer");
    else if (t == "boolean") e = out_.prim.use("boolean");
    else if (t == "null") e = out_.prim.use("null");
    else fail(path + "/type", "unknown type '" + t + "'");
    if ((t == "object" || t == "array") && own_rule) e = add_rule(hint, e);
    alts += (alts.empty() ? "" : " | ") + e;
  }
  return types.size() == 1 ? alts : "( " + alts + " )";
}

inline std::string schema_converter::visit_object(const json::value& s, const std::string& path, const std::string& hint) {
  struct prop {
    std::string key, value;
    bool required;
  };
  std::vector<prop> props;
  std::optional<std::string> extra;  // value expression of additional properties
  const json::value* add = s.find("additionalProperties");
  if (add && !add->is_bool() && !add->is_object()) fail(path + "/additionalProperties", "must be a boolean or a schema");
  if (add ? !(add->is_bool() && !add->as_bool()) : opt_.additional_properties_default)
    extra = add && add->is_object() ? visit(*add, path + "/additionalProperties", hint + "-additional") : out_.prim.use("value");
  std::vector<std::string> required;
  if (const json::value* r = s.find("required")) {
    if (!r->is_array()) fail(path + "/required", "must be an array of strings");
    for (const auto& x : r->items()) {
      if (!x.is_string()) fail(path + "/required", "must be an array of strings");
      required.push_back(x.as_string());
    }
  }
  const auto is_required = [&](const std::string& k) { return std::find(required.begin(), required.end(), k) != required.end(); };
  if (const json::value* ps = s.find("properties")) {
    if (!ps->is_object()) fail(path + "/properties", "must be an object");
    for (const auto& [k, v] : ps->members()) {
      const std::string p = path + "/properties/" + escape_pointer(k);
      props.push_back({k, visit(v, p, hint + "-" + k), is_required(k)});
    }
  }
  for (const std::string& k : required) {
    if (std::any_of(props.begin(), props.end(), [&](const prop& p) { return p.key == k; })) continue;
    if (!extra) fail(path + "/required", "required property '" + k + "' is not in properties and additionalProperties is false");
    props.push_back({k, *extra, true});
  }
  const std::string ws = out_.prim.use("ws");
  const auto kv = [&](const prop& p) { return literal(json::quote(p.key)) + " " + ws + " \":\" " + ws + " " + p.value; };
  std::string extra_kv;
  if (extra) {
    std::vector<std::string> keys;
    for (const prop& p : props) keys.push_back(p.key);
    const std::string key = keys.empty() ? out_.prim.use("string") : not_keys_rule(keys, hint + "-other-key");
    extra_kv = add_rule(hint + "-additional-kv", key + " " + ws + " \":\" " + ws + " " + *extra);
  }
  const std::string open = "\"{\" " + ws + " ", close = " " + ws + " \"}\"";
  const std::string sep = ws + " \",\" " + ws + " ";
  const bool all_required = std::all_of(props.begin(), props.end(), [](const prop& p) { return p.required; });
  if (!extra && all_required) {
    std::string body;
    for (std::size_t i = 0; i < props.size(); ++i) body += (i ? " " + sep : "") + kv(props[i]);
    return props.empty() ? "\"{\" " + ws + " \"}\"" : open + body + close;
  }
  // rest_i: members i.. after at least one member was written; first_i: none written yet.
  const std::size_t n = props.size();
  std::vector<std::string> rest(n + 1), first(n + 1);
  rest[n] = extra ? add_rule(hint + "-rest", "( " + sep + extra_kv + " )*") : "";
  first[n] = extra ? "( " + extra_kv + (rest[n].empty() ? "" : " " + rest[n]) + " )?" : "";
  for (std::size_t i = n; i-- > 0;) {
    const std::string tail = rest[i + 1].empty() ? "" : " " + rest[i + 1];
    const std::string member = sep + kv(props[i]);
    if (i > 0) rest[i] = add_rule(hint + "-rest", props[i].required ? member + tail : "( " + member + " )?" + tail);
    const std::string start = kv(props[i]) + tail;
    first[i] = props[i].required ? start : first[i + 1].empty() ? "( " + start + " )?" : "( " + start + " | " + first[i + 1] + " )";
    if (i > 0) first[i] = add_rule(hint + "-first", first[i]);
  }
  return open + first[0] + close;
}

inline std::string schema_converter::not_keys_rule(const std::vector<std::string>& keys, const std::string& hint) {
  // A JSON string that differs from every key: walk the keys' common prefixes; at each point
  // the string may end (unless a key ends there), continue with a key's next character, or
  // take any other character and then anything.
  const std::string ch = out_.prim.use("char");
  std::map<std::string, std::string> memo;
  std::function<std::string(const std::string&)> node = [&](const std::string& prefix) -> std::string {
    std::set<std::string> next;
    bool ends_here = false;
    for (const std::string& k : keys) {
      if (k.size() < prefix.size() || k.compare(0, prefix.size(), prefix) != 0) continue;
      if (k.size() == prefix.size()) {
        ends_here = true;
        continue;
      }
      const auto b0 = static_cast<unsigned char>(k[prefix.size()]);
      const std::size_t len = b0 < 0x80 ? 1 : b0 < 0xE0 ? 2 : b0 < 0xF0 ? 3 : 4;
      next.insert(k.substr(prefix.size(), len));
    }
    std::string alts;
    const auto add = [&](const std::string& a) { alts += (alts.empty() ? "" : " | ") + a; };
    if (!ends_here) add("\"\\\"\"");
    std::vector<cp_range> excluded;
    for (const std::string& c : next) {
      add(literal(json::quote(c).substr(1, json::quote(c).size() - 2)) + " " + node(prefix + c));
      const std::string q = json::quote(c);
      char32_t cp = 0;  // the character's code point, for the "any other character" class
      const auto b0 = static_cast<unsigned char>(c[0]);
      if (c.size() == 1) cp = b0;
      else if (c.size() == 2) cp = (b0 & 0x1F) << 6 | (static_cast<unsigned char>(c[1]) & 0x3F);
      else if (c.size() == 3) cp = (b0 & 0x0F) << 12 | (static_cast<unsigned char>(c[1]) & 0x3F) << 6 | (static_cast<unsigned char>(c[2]) & 0x3F);
      else cp = (b0 & 0x07) << 18 | (static_cast<unsigned char>(c[1]) & 0x3F) << 12 | (static_cast<unsigned char>(c[2]) & 0x3F) << 6 | (static_cast<unsigned char>(c[3]) & 0x3F);
      excluded.push_back({cp, cp});
    }
    // Any other raw character, or any escape, then the rest of a string.
    excluded.push_back({'"', '"'});
    excluded.push_back({'\\', '\\'});
    excluded.push_back({0, 0x1F});
    add("( " + class_expr(char_class::from_ranges(excluded, true)) + " | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} ) ) " + ch +
        "* \"\\\"\"");
    return add_rule(hint, alts);
  };
  return "\"\\\"\" " + node("");
}

inline std::string schema_converter::visit_array(const json::value& s, const std::string& path, const std::string& hint) {
  const auto count = [&](const char* k) -> std::optional<std::uint64_t> {
    const json::value* v = s.find(k);
    if (!v) return std::nullopt;
    if (!v->is_integer() || v->number_text()[0] == '-' || v->number_text().size() > 9)
      fail(path + "/" + k, "must be a non-negative integer below 10^9");
    return std::stoull(v->number_text());
  };
  const std::uint64_t min = count("minItems").value_or(0);
  const std::optional<std::uint64_t> max = count("maxItems");
  if (max && *max < min) fail(path, "minItems " + std::to_string(min) + " is greater than maxItems " + std::to_string(*max));
  std::vector<std::string> fixed;  // prefixItems (or a draft-7 items array)
  const json::value* prefix = s.find("prefixItems");
  const json::value* items = s.find("items");
  const json::value* rest_schema = items;
  if (items && items->is_array()) {
    prefix = items;
    rest_schema = s.find("additionalItems");
  }
  if (prefix) {
    if (!prefix->is_array()) fail(path + "/prefixItems", "must be an array of schemas");
    for (std::size_t i = 0; i < prefix->items().size(); ++i)
      fixed.push_back(visit(prefix->items()[i], path + "/prefixItems/" + std::to_string(i), hint + "-" + std::to_string(i)));
  }
  if (max && fixed.size() > *max) fail(path, "prefixItems has more items than maxItems allows");
  std::optional<std::string> item;  // schema of the items after the fixed ones; none: no more
  if (!rest_schema) item = out_.prim.use("value");
  else if (!(rest_schema->is_bool() && !rest_schema->as_bool())) item = visit(*rest_schema, path + "/items", hint + "-item");
  const std::uint64_t k = fixed.size();
  const std::uint64_t more_min = min > k ? min - k : 0;
  if (!item && more_min > 0) fail(path, "minItems needs more items than prefixItems gives and items is false");
  const std::string ws = out_.prim.use("ws");
  const std::string sep = ws + " \",\" " + ws + " ";
  std::string body;
  for (std::size_t i = 0; i < fixed.size(); ++i) body += (i ? " " + sep : "") + fixed[i];
  if (item && (!max || *max > k)) {
    const std::string bound = "{" + std::to_string(more_min) + "," + (max ? std::to_string(*max - k) : "") + "}";
    if (k > 0) {
      body += " ( " + sep + *item + " )" + bound;
    } else if (more_min == 0) {
      const std::string inner = max ? "{0," + std::to_string(*max - 1) + "}" : "*";
      if (!max || *max > 0) body = "( " + *item + " ( " + sep + *item + " )" + inner + " )?";
    } else {
      const std::string inner = "{" + std::to_string(more_min - 1) + "," + (max ? std::to_string(*max - 1) : "") + "}";
      body = *item + " ( " + sep + *item + " )" + inner;
    }
  }
  return "\"[\" " + ws + " " + body + (body.empty() ? "" : " ") + ws + " \"]\"";
}

inline std::string schema_converter::visit_string(const json::value& s, const std::string& path) {
  const auto length = [&](const char* k) -> std::optional<std::uint64_t> {
    const json::value* v = s.find(k);
    if (!v) return std::nullopt;
    if (!v->is_integer() || v->number_text()[0] == '-' || v->number_text().size() > 6)
      fail(path + "/" + k, "must be a non-negative integer below 10^6");
    return std::stoull(v->number_text());
  };
  const auto min = length("minLength"), max = length("maxLength");
  if (min && max && *min > *max) fail(path, "minLength " + std::to_string(*min) + " is greater than maxLength " + std::to_string(*max));
  const json::value* pattern = s.find("pattern");
  const json::value* format = s.find("format");
  if ((pattern || format) && (min || max)) fail(path, "minLength/maxLength together with pattern or format is not supported");
  if (pattern && format) fail(path, "pattern together with format is not supported");
  if (pattern) {
    if (!pattern->is_string()) fail(path + "/pattern", "must be a string");
    try {
      return "\"\\\"\" " + regex_to_gbnf(pattern->as_string()) + " \"\\\"\"";
    } catch (const regex_error& e) {
      fail(path + "/pattern", e.what());
    }
  }
  if (format) {
    if (!format->is_string()) fail(path + "/format", "must be a string");
    const std::string& f = format->as_string();
    if (f == "date" || f == "time" || f == "date-time" || f == "uuid") return "\"\\\"\" " + out_.prim.use(f) + " \"\\\"\"";
    warn(path + "/format", "format '" + f + "' is not enforced (any string)");
  }
  if (!min && !max) return out_.prim.use("string");
  const std::string bound = "{" + std::to_string(min.value_or(0)) + "," + (max ? std::to_string(*max) : "") + "}";
  return "\"\\\"\" " + out_.prim.use("char") + bound + " \"\\\"\"";
}

inline std::string schema_converter::visit_number(const json::value& s, const std::string& path, bool integer) {
  struct bound {
    double v;
    bool excl;
  };
  std::optional<bound> lo, hi;
  const auto read = [&](const char* k, bool excl, std::optional<bound>& b, bool is_lo) {
    const json::value* v = s.find(k);
    if (!v) return;
    if (!v->is_number()) fail(path + "/" + k, "must be a number");
    const double d = v->as_double();
    if (!std::isfinite(d)) fail(path + "/" + k, "must be finite");
    if (!b || (is_lo ? d > b->v || (d == b->v && excl) : d < b->v || (d == b->v && excl))) b = bound{d, excl};
  };
  read("minimum", false, lo, true);
  read("exclusiveMinimum", true, lo, true);
  read("maximum", false, hi, false);
  read("exclusiveMaximum", true, hi, false);
  if (!lo && !hi) return out_.prim.use(integer ? "integer" : "number");
  const double cap = double(integer ? max_integer_magnitude : max_number_magnitude);
  std::string e;
  if (integer) {
    std::optional<std::int64_t> l, h;
    // Clamped to the rule's digit bound first (no overflow converting huge doubles).
    if (lo) l = std::int64_t(std::clamp(lo->excl ? std::floor(lo->v) + 1 : std::ceil(lo->v), -cap, cap + 1));
    if (hi) h = std::int64_t(std::clamp(hi->excl ? std::ceil(hi->v) - 1 : std::floor(hi->v), -cap - 1, cap));
    e = integer_range(l, h);
  } else {
    for (const auto& b : {lo, hi})
      if (b && (b->v != std::floor(b->v) || std::fabs(b->v) > cap))
        fail(path, "bounds of type number must be whole numbers of at most 16 digits (got " +
                       json::python_float_repr(b->v) + "); use type integer or drop the bound");
    std::string alts;
    // Non-negative values.
    if (!hi || hi->v > 0 || (hi->v == 0 && !hi->excl)) {
      const bool lo_pos = lo && lo->v >= 0;
      const std::string m = magnitude_range(lo_pos ? std::int64_t(lo->v) : 0, lo_pos && lo->excl,
                                            hi ? std::optional<std::int64_t>(std::int64_t(hi->v)) : std::nullopt, hi && hi->excl);
      if (!m.empty()) alts += m;
    }
    // Negative values -m, m > 0: m >= -hi when hi < 0, m <= -lo when lo < 0.
    if (!lo || lo->v < 0) {
      const bool hi_neg = hi && hi->v < 0;
      const std::string m = magnitude_range(hi_neg ? std::int64_t(-hi->v) : 0, hi_neg ? hi->excl : true,
                                            lo ? std::optional<std::int64_t>(std::int64_t(-lo->v)) : std::nullopt, lo && lo->excl);
      if (!m.empty()) alts += (alts.empty() ? "" : " | ") + std::string("\"-\" ") + m;
    }
    e = alts.empty() ? "" : "( " + alts + " )";
  }
  if (e.empty()) fail(path, std::string("no ") + (integer ? "integer" : "number") + " satisfies the bounds");
  return e;
}

inline json::value schema_converter::merge_all_of(const json::value& s, const std::string& path) {
  // allOf (and $ref with sibling keywords) as one schema: object keywords are combined
  // (properties, required), any other keyword must agree.
  std::vector<const json::value*> parts;
  json::value self = json::value::object();
  for (const auto& [k, v] : s.members())
    if (k != "allOf" && k != "$ref") self.set(k, v);
  parts.push_back(&self);
  json::value target;
  if (const json::value* ref = s.find("$ref")) parts.push_back(&resolve(ref->as_string(), path));
  if (const json::value* all = s.find("allOf")) {
    if (!all->is_array() || all->items().empty()) fail(path + "/allOf", "must be a non-empty array");
    for (const auto& p : all->items()) {
      const json::value* q = &p;
      while (q->is_object() && q->find("$ref") && q->members().size() == 1) q = &resolve(q->find("$ref")->as_string(), path);
      if (!q->is_object()) fail(path + "/allOf", "entries must be schema objects");
      if (q->find("allOf")) fail(path + "/allOf", "nested allOf is not supported");
      parts.push_back(q);
    }
  }
  json::value out = json::value::object();
  for (const json::value* p : parts) {
    for (const auto& [k, v] : p->members()) {
      const json::value* have = out.find(k);
      if (!have || listed(schema_annotations, k)) {
        out.set(k, v);
      } else if (k == "properties" && v.is_object() && have->is_object()) {
        json::value merged = *have;
        for (const auto& [pk, pv] : v.members()) {
          const json::value* prev = merged.find(pk);
          if (prev && !(*prev == pv)) fail(path, "allOf: property '" + pk + "' has two different schemas");
          merged.set(pk, pv);
        }
        out.set(k, merged);
      } else if (k == "required" && v.is_array() && have->is_array()) {
        json::value merged = *have;
        for (const auto& r : v.items())
          if (std::find(merged.items().begin(), merged.items().end(), r) == merged.items().end()) merged.items().push_back(r);
        out.set(k, merged);
      } else if (!(*have == v)) {
        fail(path, "allOf: keyword '" + k + "' has conflicting values");
      }
    }
  }
  return out;
}

}  // namespace detail

inline schema_set::schema_set(const schema_options& opt) : out_(std::make_unique<detail::schema_output>(opt)) {}
inline schema_set::~schema_set() = default;

inline std::string schema_set::add(const json::value& schema, std::string_view name) {
  std::string n(name);
  if (n != "root" || std::any_of(out_->rules.begin(), out_->rules.end(), [](const auto& r) { return r.first == "root"; })) {
    // A fresh name from `name` (sanitized and made unique).
    std::string base;
    for (const char c : name) base += std::isalnum(static_cast<unsigned char>(c)) ? c : '-';
    if (base.empty()) base = "schema";
    n = base;
    for (int k = 1; out_->used.count(n) || detail::schema_primitives::reserved(n); ++k) n = base + "-" + std::to_string(k);
  }
  detail::schema_converter(schema, *out_).run(n);
  return n;
}

inline std::string schema_set::gbnf(std::string_view root_body, std::string_view extra_rules) const {
  std::string g;
  if (!root_body.empty()) g += "root ::= " + std::string(root_body) + "\n";
  g += extra_rules;
  for (const auto& [name, body] : out_->rules) g += name + " ::= " + body + "\n";
  g += out_->prim.text();
  try {
    (void)parse_gbnf(g);  // catches schemas that recurse without structure in between
  } catch (const grammar_error& e) {
    throw schema_error(std::string("json schema: cannot be turned into a grammar: ") + e.what());
  }
  return g;
}

inline const std::vector<std::string>& schema_set::warnings() const noexcept { return out_->warnings; }

inline schema_grammar json_schema_to_gbnf(const json::value& schema, const schema_options& opt) {
  schema_set set(opt);
  set.add(schema, "root");
  return {set.gbnf(""), set.warnings()};
}

inline schema_grammar json_schema_to_gbnf(std::string_view schema_json, const schema_options& opt) {
  json::value v;
  try {
    v = json::parse(schema_json, "json schema");
  } catch (const json::parse_error& e) {
    throw schema_error(e.what());
  }
  return json_schema_to_gbnf(v, opt);
}

inline std::string json_object_gbnf(const schema_options& opt) {
  detail::schema_primitives p(opt.ws == whitespace::compact);
  p.use("object");
  return "root ::= object\n" + p.text();
}

}  // namespace strata::grammar
