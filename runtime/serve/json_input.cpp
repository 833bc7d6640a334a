// simdjson DOM accessors with field-naming errors (json_input.hpp).
#include "json_input.hpp"

#include <cmath>

namespace strata::serve::json_in {
namespace {
const char* type_name(simdjson::dom::element_type t) {
  using T = simdjson::dom::element_type;
  switch (t) {
    case T::ARRAY: return "an array";
    case T::OBJECT: return "an object";
    case T::INT64: case T::UINT64: return "an integer";
    case T::DOUBLE: return "a number";
    case T::STRING: return "a string";
    case T::BOOL: return "a boolean";
    case T::NULL_VALUE: return "null";
  }
  return "a value";
}
[[noreturn]] void wrong_type(const element& e, const std::string& path, const char* want) {
  throw bad_request("'" + path + "' must be " + want + ", got " + type_name(e.type()), path);
}
}  // namespace

object parse_object(simdjson::dom::parser& p, std::string_view body) {
  element doc;
  if (const auto err = p.parse(body.data(), body.size()).get(doc))
    throw bad_request(std::string("invalid JSON in the request body: ") + simdjson::error_message(err));
  if (doc.type() != simdjson::dom::element_type::OBJECT)
    throw bad_request(std::string("the request body must be a JSON object, got ") + type_name(doc.type()));
  return object(doc);
}

std::optional<element> field(const object& o, std::string_view key) {
  element e;
  if (o.at_key(key).get(e) != simdjson::SUCCESS || e.is_null()) return std::nullopt;
  return e;
}

object as_object(const element& e, const std::string& path) {
  if (!e.is_object()) wrong_type(e, path, "an object");
  return object(e);
}
array as_array(const element& e, const std::string& path) {
  if (!e.is_array()) wrong_type(e, path, "an array");
  return array(e);
}
std::string_view as_string(const element& e, const std::string& path) {
  if (!e.is_string()) wrong_type(e, path, "a string");
  return std::string_view(e);
}

std::optional<std::string_view> get_string(const object& o, std::string_view key, const std::string& path) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  return as_string(*e, join(path, key));
}
std::optional<double> get_number(const object& o, std::string_view key, const std::string& path) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (e->is_int64()) return double(std::int64_t(*e));
  if (e->is_uint64()) return double(std::uint64_t(*e));
  if (e->is_double()) return double(*e);
  wrong_type(*e, join(path, key), "a number");
}
std::optional<std::int64_t> get_int(const object& o, std::string_view key, const std::string& path) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (e->is_int64()) return std::int64_t(*e);
  if (e->is_uint64()) {
    const std::uint64_t u = *e;
    if (u > std::uint64_t(INT64_MAX)) throw bad_request("'" + join(path, key) + "' is too large", join(path, key));
    return std::int64_t(u);
  }
  if (e->is_double()) {  // 16.0 is an integer to JavaScript clients
    const double d = *e;
    if (d == std::floor(d) && std::abs(d) < 9.0e15) return std::int64_t(d);
  }
  wrong_type(*e, join(path, key), "an integer");
}
std::optional<bool> get_bool(const object& o, std::string_view key, const std::string& path) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  if (!e->is_bool()) wrong_type(*e, join(path, key), "a boolean");
  return bool(*e);
}
std::optional<object> get_object(const object& o, std::string_view key, const std::string& path) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  return as_object(*e, join(path, key));
}
std::optional<array> get_array(const object& o, std::string_view key, const std::string& path) {
  const auto e = field(o, key);
  if (!e) return std::nullopt;
  return as_array(*e, join(path, key));
}

std::vector<std::int32_t> token_ids(const array& a, const std::string& path, const std::string& param) {
  std::vector<std::int32_t> out;
  std::size_t i = 0;
  for (auto t : a) {
    const std::string tp = path + "[" + std::to_string(i++) + "]";
    if (!t.is_int64() || std::int64_t(t) < 0 || std::int64_t(t) > INT32_MAX)
      throw bad_request("'" + tp + "' must be a token id (a non-negative integer)", param.empty() ? tp : param);
    out.push_back(std::int32_t(std::int64_t(t)));
  }
  return out;
}

}  // namespace strata::serve::json_in
