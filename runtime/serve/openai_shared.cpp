// Shared OpenAI readers and JSON pieces (openai_shared.hpp).
#include "openai_shared.hpp"

#include "strata/core/utf8.hpp"

namespace strata::serve::openai::detail {

std::string require_model(const object& body) {
  const auto m = get_string(body, "model");
  if (!m) throw bad_request("'model' is required", "model");
  return std::string(*m);
}

const char* finish_reason(const choice_result& c) {
  switch (c.reason) {
    case rt::finish_reason::max_tokens:
    case rt::finish_reason::context_full: return "length";
    default: return c.tool_calls.empty() ? "stop" : "tool_calls";
  }
}

json::object usage_json(const generation_result& r) {
  const std::uint32_t completion = r.completion_tokens();
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", completion},
          {"total_tokens", r.prompt_tokens + completion},
          {"prompt_tokens_details", json::object{{"cached_tokens", r.cached_tokens}}}};
}

namespace {
json::array bytes_of(std::string_view s) {
  json::array b;
  for (const char c : s) b.push_back(static_cast<unsigned char>(c));
  return b;
}
}  // namespace

json::array chat_logprobs(std::span<const logprob_entry> lp) {
  json::array out;
  for (const auto& e : lp) {
    json::array top;
    for (const auto& a : e.top)
      top.push_back(json::object{{"token", utf8::sanitize(a.token)}, {"logprob", a.logprob}, {"bytes", bytes_of(a.token)}});
    out.push_back(json::object{{"token", utf8::sanitize(e.token)},
                               {"logprob", e.logprob},
                               {"bytes", bytes_of(e.token)},
                               {"top_logprobs", std::move(top)}});
  }
  return out;
}

void read_n(const object& body, parsed_request& r) {
  const auto n = get_int(body, "n");
  if (!n) return;
  if (*n < 1 || *n > max_choices)
    throw bad_request("'n' must be in [1, " + std::to_string(max_choices) + "], got " + std::to_string(*n), "n");
  r.n = std::uint32_t(*n);
}

void read_chat_logprobs(const object& body, parsed_request& r) {
  const bool lp = get_bool(body, "logprobs").value_or(false);
  const auto top = get_int(body, "top_logprobs");
  if (top && (*top < 0 || *top > 20)) throw bad_request("'top_logprobs' must be in [0, 20]", "top_logprobs");
  if (top && !lp) throw bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
  if (lp) r.top_logprobs = std::int32_t(top.value_or(0));
}

void read_output_format(const object& fmt, const std::string& path, parsed_request& r) {
  const auto type = get_string(fmt, "type", path);
  if (!type) throw bad_request("'" + path + ".type' is required", path + ".type");
  if (*type == "text") return;
  if (*type == "json_object") {
    r.format = output_format::json_object;
    return;
  }
  if (*type != "json_schema")
    throw bad_request("'" + path + ".type' must be text, json_object or json_schema, got '" + std::string(*type) + "'",
                      path + ".type");
  // Chat nests the schema in json_schema; the Responses API's text.format is flat.
  std::string at = path;
  object js = fmt;
  if (auto inner = get_object(fmt, "json_schema", path)) {
    js = *inner;
    at = path + ".json_schema";
  }
  const auto schema = field(js, "schema");
  if (!schema) throw bad_request("'" + at + ".schema' is required for json_schema", at + ".schema");
  if (!schema->is_object()) throw bad_request("'" + at + ".schema' must be an object", at + ".schema");
  r.format = output_format::json_schema;
  r.schema = simdjson::minify(*schema);
  r.schema_param = at + ".schema";
  if (auto name = get_string(js, "name", at)) r.schema_name = std::string(*name);
}

}  // namespace strata::serve::openai::detail
