// Tool definitions and tool_choice readers (tools.hpp).
#include "tools.hpp"

#include <algorithm>

#include "strata/core/utf8.hpp"

namespace strata::serve {
using namespace json_in;
namespace sj = strata::json;
using mode = chat::tool_choice_mode;

namespace {

void check_name(std::string_view name, const std::string& path) {
  const bool ok = !name.empty() && name.size() <= 64 && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  });
  if (!ok)
    throw bad_request("'" + path + "' must be 1 to 64 letters, digits, underscores or dashes, got '" +
                          utf8::sanitize(name) + "'", path);
}

// {name, description?, parameters} read from `fn` (the object holding them) at `path`, as an
// OpenAI chat tool object. Without parameters the function takes none (an empty object).
sj::value read_function(const object& fn, const std::string& path, const char* schema_key) {
  const auto name = get_string(fn, "name", path);
  if (!name) throw bad_request("'" + path + ".name' is required", path + ".name");
  check_name(*name, path + ".name");
  sj::value fobj = sj::value::object();
  fobj.set("name", sj::value::string(std::string(*name)));
  if (auto d = get_string(fn, "description", path)) fobj.set("description", sj::value::string(std::string(*d)));
  if (auto p = field(fn, schema_key)) {
    if (!p->is_object()) throw bad_request("'" + path + "." + schema_key + "' must be a JSON Schema object", path + "." + schema_key);
    fobj.set("parameters", to_json_tree(*p));
  } else {
    fobj.set("parameters", sj::value::object({{"type", sj::value::string("object")}, {"properties", sj::value::object()}}));
  }
  return sj::value::object({{"type", sj::value::string("function")}, {"function", std::move(fobj)}});
}

const std::string& name_of(const sj::value& tool) { return tool.find("function")->find("name")->as_string(); }

void require_tool(const parsed_request& r, const std::string& name, const char* param) {
  for (const auto& t : r.tools)
    if (name_of(t) == name) return;
  throw bad_request("'" + std::string(param) + "' names the function '" + utf8::sanitize(name) +
                        "', which is not among the request's tools", param);
}

}  // namespace

void read_tools(const object& body, tool_shape shape, parsed_request& r) {
  const auto tools = get_array(body, "tools");
  if (!tools) return;
  std::size_t i = 0;
  for (auto t : *tools) {
    const std::string path = "tools[" + std::to_string(i++) + "]";
    const object to = as_object(t, path);
    if (shape == tool_shape::anthropic) {
      // Server tools (web search, bash, ...) carry a versioned type; only client tools run here.
      if (auto type = get_string(to, "type", path); type && *type != "custom")
        throw bad_request("'" + path + ".type' is '" + std::string(*type) +
                              "': server tools are not supported, only client tools (input_schema)", path + ".type");
      r.tools.push_back(read_function(to, path, "input_schema"));
      continue;
    }
    const auto type = get_string(to, "type", path);
    if (!type || *type != "function")
      throw bad_request("'" + path + ".type' must be 'function'" + (type ? ", got '" + std::string(*type) + "'" : ""),
                        path + ".type");
    if (shape == tool_shape::responses) {
      r.tools.push_back(read_function(to, path, "parameters"));
    } else {
      const auto fn = get_object(to, "function", path);
      if (!fn) throw bad_request("'" + path + ".function' is required", path + ".function");
      r.tools.push_back(read_function(*fn, path + ".function", "parameters"));
    }
  }
  for (std::size_t a = 0; a < r.tools.size(); ++a)
    for (std::size_t b = a + 1; b < r.tools.size(); ++b)
      if (name_of(r.tools[a]) == name_of(r.tools[b])) {
        const std::string at = "tools[" + std::to_string(b) + "]";
        throw bad_request("'" + at + "' repeats the function name '" + name_of(r.tools[b]) + "'", at);
      }
}

void read_openai_tool_choice(const object& body, parsed_request& r) {
  if (auto p = get_bool(body, "parallel_tool_calls")) r.parallel_tool_calls = *p;
  const auto c = field(body, "tool_choice");
  if (!c) return;
  if (c->is_string()) {
    const std::string_view s(*c);
    if (s == "none") r.tool_choice.mode = mode::none;
    else if (s == "auto") r.tool_choice.mode = mode::automatic;
    else if (s == "required") r.tool_choice.mode = mode::required;
    else throw bad_request("'tool_choice' must be none, auto, required or a function, got '" + std::string(s) + "'", "tool_choice");
  } else {
    const object co = as_object(*c, "tool_choice");
    const auto type = get_string(co, "type", "tool_choice");
    if (!type || *type != "function") throw bad_request("'tool_choice.type' must be 'function'", "tool_choice.type");
    std::optional<std::string_view> name = get_string(co, "name", "tool_choice");  // Responses: flat
    if (auto fn = get_object(co, "function", "tool_choice")) name = get_string(*fn, "name", "tool_choice.function");
    if (!name) throw bad_request("'tool_choice.function.name' is required", "tool_choice");
    r.tool_choice = {mode::function, std::string(*name)};
  }
  if (r.tools.empty() && (r.tool_choice.mode == mode::required || r.tool_choice.mode == mode::function))
    throw bad_request("'tool_choice' requires 'tools'", "tool_choice");
  if (r.tool_choice.mode == mode::function) require_tool(r, r.tool_choice.function, "tool_choice");
}

void read_anthropic_tool_choice(const object& body, parsed_request& r) {
  const auto c = get_object(body, "tool_choice");
  if (!c) return;
  const auto type = get_string(*c, "type", "tool_choice");
  if (!type) throw bad_request("tool_choice.type: Field required", "tool_choice.type");
  if (*type == "auto") r.tool_choice.mode = mode::automatic;
  else if (*type == "any") r.tool_choice.mode = mode::required;
  else if (*type == "none") r.tool_choice.mode = mode::none;
  else if (*type == "tool") {
    const auto name = get_string(*c, "name", "tool_choice");
    if (!name) throw bad_request("tool_choice.name: Field required for type 'tool'", "tool_choice.name");
    r.tool_choice = {mode::function, std::string(*name)};
  } else {
    throw bad_request("tool_choice.type must be auto, any, tool or none, got '" + std::string(*type) + "'", "tool_choice.type");
  }
  if (auto d = get_bool(*c, "disable_parallel_tool_use", "tool_choice")) r.parallel_tool_calls = !*d;
  if (r.tools.empty() && (r.tool_choice.mode == mode::required || r.tool_choice.mode == mode::function))
    throw bad_request("tool_choice requires tools", "tool_choice");
  if (r.tool_choice.mode == mode::function) require_tool(r, r.tool_choice.function, "tool_choice.name");
}

}  // namespace strata::serve
