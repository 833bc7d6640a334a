// A JSON document tree that keeps what chat templates and schemas need and DOM libraries drop:
// object members in source order (Python dicts keep insertion order, and json.dumps writes them
// so) and each number's source text (so an integer stays an integer of any size). Parsed by
// json/parse.hpp, written back as Python's json.dumps would by json/write.hpp.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "strata/core/error.hpp"

namespace strata::json {

enum class kind : std::uint8_t { null, boolean, number, string, array, object };

constexpr std::string_view kind_name(kind k) noexcept {
  switch (k) {
    case kind::null: return "null";
    case kind::boolean: return "boolean";
    case kind::number: return "number";
    case kind::string: return "string";
    case kind::array: return "array";
    case kind::object: break;
  }
  return "object";
}

class value {
 public:
  using member = std::pair<std::string, value>;

  value() = default;  // null
  static value boolean(bool b) {
    value v;
    v.kind_ = kind::boolean;
    v.bool_ = b;
    return v;
  }
  // `text` must be a valid JSON number (the parser guarantees it).
  static value number(std::string text) {
    value v;
    v.kind_ = kind::number;
    v.text_ = std::move(text);
    return v;
  }
  static value string(std::string s) {
    value v;
    v.kind_ = kind::string;
    v.text_ = std::move(s);
    return v;
  }
  static value array(std::vector<value> items = {}) {
    value v;
    v.kind_ = kind::array;
    v.items_ = std::move(items);
    return v;
  }
  static value object(std::vector<member> members = {}) {
    value v;
    v.kind_ = kind::object;
    v.members_ = std::move(members);
    return v;
  }

  json::kind type() const noexcept { return kind_; }
  bool is_null() const noexcept { return kind_ == kind::null; }
  bool is_bool() const noexcept { return kind_ == kind::boolean; }
  bool is_number() const noexcept { return kind_ == kind::number; }
  bool is_string() const noexcept { return kind_ == kind::string; }
  bool is_array() const noexcept { return kind_ == kind::array; }
  bool is_object() const noexcept { return kind_ == kind::object; }
  // A number written without fraction or exponent.
  bool is_integer() const noexcept {
    return kind_ == kind::number && text_.find_first_of(".eE") == std::string::npos;
  }

  bool as_bool() const { return expect(kind::boolean), bool_; }
  const std::string& as_string() const { return expect(kind::string), text_; }
  const std::string& number_text() const { return expect(kind::number), text_; }
  double as_double() const {
    expect(kind::number);
    return std::stod(text_);
  }
  const std::vector<value>& items() const { return expect(kind::array), items_; }
  std::vector<value>& items() { return expect(kind::array), items_; }
  const std::vector<member>& members() const { return expect(kind::object), members_; }
  std::vector<member>& members() { return expect(kind::object), members_; }

  // Member `key` of an object (the last one if repeated), or nullptr; nullptr for non-objects.
  const value* find(std::string_view key) const noexcept {
    if (kind_ != kind::object) return nullptr;
    for (auto it = members_.rbegin(); it != members_.rend(); ++it)
      if (it->first == key) return &it->second;
    return nullptr;
  }
  // Sets member `key`, replacing an existing one in place (Python dict assignment).
  void set(std::string key, value v) {
    expect(kind::object);
    for (auto& m : members_)
      if (m.first == key) {
        m.second = std::move(v);
        return;
      }
    members_.emplace_back(std::move(key), std::move(v));
  }

  friend bool operator==(const value& a, const value& b) noexcept {
    if (a.kind_ != b.kind_) return false;
    switch (a.kind_) {
      case kind::null: return true;
      case kind::boolean: return a.bool_ == b.bool_;
      case kind::number: return a.text_ == b.text_;
      case kind::string: return a.text_ == b.text_;
      case kind::array: return a.items_ == b.items_;
      case kind::object: return a.members_ == b.members_;
    }
    return false;
  }

 private:
  void expect(kind k) const {
    if (kind_ != k)
      throw error("json: expected " + std::string(kind_name(k)) + ", got " + std::string(kind_name(kind_)));
  }

  kind kind_ = kind::null;
  bool bool_ = false;
  std::string text_;  // string content (UTF-8) or number source text
  std::vector<value> items_;
  std::vector<member> members_;
};

}  // namespace strata::json
