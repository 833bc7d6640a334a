// Typed access to request bodies parsed with simdjson's DOM: every accessor names the offending
// field ("messages[2].content") in a 400 api_error when the type is wrong. Absent and null fields
// read as "not given"; unknown fields are ignored, as real clients send many.
#pragma once
#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api_error.hpp"

namespace strata::serve::json_in {

using simdjson::dom::array;
using simdjson::dom::element;
using simdjson::dom::object;

// Parses a request body; 400 "invalid JSON" with simdjson's reason, 400 unless it is an object.
object parse_object(simdjson::dom::parser& p, std::string_view body);

std::optional<element> field(const object& o, std::string_view key);  // null reads as absent
object as_object(const element& e, const std::string& path);
array as_array(const element& e, const std::string& path);
std::string_view as_string(const element& e, const std::string& path);

std::optional<std::string_view> get_string(const object& o, std::string_view key, const std::string& path = {});
std::optional<double> get_number(const object& o, std::string_view key, const std::string& path = {});
std::optional<std::int64_t> get_int(const object& o, std::string_view key, const std::string& path = {});
std::optional<bool> get_bool(const object& o, std::string_view key, const std::string& path = {});
std::optional<object> get_object(const object& o, std::string_view key, const std::string& path = {});
std::optional<array> get_array(const object& o, std::string_view key, const std::string& path = {});

// The elements of `a` as token ids (integers in [0, INT32_MAX]); a bad element is named as
// path[i] in the message, and its param is `param` (empty: that element's path). Empty arrays
// are the caller's to refuse, with its own message.
std::vector<std::int32_t> token_ids(const array& a, const std::string& path, const std::string& param = {});

// "path.key" (or "key" at the top level).
inline std::string join(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

}  // namespace strata::serve::json_in
