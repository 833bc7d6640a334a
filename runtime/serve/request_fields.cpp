// The shared generation-request fields (request_fields.hpp): one table row per API says how it
// names and bounds them, one parser reads them.
#include "request_fields.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <optional>
#include <span>

#include "tools.hpp"

namespace strata::serve {
using namespace json_in;

namespace {

enum class logprobs_form : std::uint8_t {
  none,         // the API has no log-probabilities (Anthropic)
  chat,         // logprobs: bool, top_logprobs: alternatives (requires logprobs)
  completions,  // logprobs: the number of alternatives
  responses,    // include: ["message.output_text.logprobs"] and/or top_logprobs
};

// body[parent][key], or body[key] when parent is empty.
struct field_location {
  std::string_view parent{}, key{};
  bool empty() const noexcept { return key.empty(); }
  std::string path() const { return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key); }
};

struct api_fields {
  std::string_view model_missing{};              // the message when 'model' is absent
  std::array<std::string_view, 2> max_tokens{};  // keys of the max-token count; the first present wins
  std::int32_t default_max_tokens = -1;          // -1: until the context is full
  std::string_view stop{};                       // key of the stop strings (empty: none)
  bool n = false;                                // `n` choices, 1..max_choices
  logprobs_form logprobs = logprobs_form::none;
  std::int64_t max_top_logprobs = 0;             // alternatives per token
  std::optional<tool_shape> tools{};             // tools and tool_choice in this API's shape
  std::array<field_location, 2> format{};        // where the output format is; the first present wins
  std::span<const std::string_view> format_types{};  // the format types the API knows
  bool openai_format = false;                    // json_schema may nest {name, schema, strict}
};

constexpr std::string_view openai_format_types[] = {"text", "json_object", "json_schema"};
constexpr std::string_view anthropic_format_types[] = {"json_schema"};
constexpr std::int64_t max_stop_strings = 16;

// Indexed by generation_api. Limits are the APIs' own (OpenAI: n <= 128 there, 16 here; top_logprobs
// 20 in chat and Responses, logprobs 5 in legacy completions).
constexpr api_fields table[4] = {
    {.model_missing = "'model' is required",
     .max_tokens = {"max_completion_tokens", "max_tokens"},
     .stop = "stop",
     .n = true,
     .logprobs = logprobs_form::chat,
     .max_top_logprobs = 20,
     .tools = tool_shape::chat,
     .format = {{{"", "response_format"}}},
     .format_types = openai_format_types,
     .openai_format = true},
    {.model_missing = "'model' is required",
     .max_tokens = {"max_tokens"},
     .default_max_tokens = 16,  // OpenAI's default
     .stop = "stop",
     .n = true,
     .logprobs = logprobs_form::completions,
     .max_top_logprobs = 5},
    {.model_missing = "'model' is required",
     .max_tokens = {"max_output_tokens"},
     .logprobs = logprobs_form::responses,
     .max_top_logprobs = 20,
     .tools = tool_shape::responses,
     .format = {{{"text", "format"}}},
     .format_types = openai_format_types,
     .openai_format = true},
    {.model_missing = "model: Field required",
     .max_tokens = {"max_tokens"},
     .stop = "stop_sequences",
     .tools = tool_shape::anthropic,
     .format = {{{"output_config", "format"}, {"", "output_format"}}},  // output_format: the older name
     .format_types = anthropic_format_types},
};

std::string quoted(std::string_view key) { return "'" + std::string(key) + "'"; }

void read_logit_bias(const object& lb, sampling::sampler_params& p) {
  for (auto [key, value] : lb) {
    const std::string path = "logit_bias." + std::string(key);
    std::int64_t id = 0;
    const auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || ptr != key.data() + key.size())
      throw bad_request("'logit_bias' keys must be token ids, got '" + std::string(key) + "'", "logit_bias");
    double bias = 0;
    if (value.is_int64()) bias = double(std::int64_t(value));
    else if (value.is_uint64()) bias = double(std::uint64_t(value));
    else if (value.is_double()) bias = double(value);
    else throw bad_request("'" + path + "' must be a number", path);
    if (bias < -100 || bias > 100) throw bad_request("'" + path + "' must be in [-100, 100]", path);
    // OpenAI: -100 effectively bans the token.
    p.logit_bias.push_back({std::int32_t(std::clamp<std::int64_t>(id, -1, INT32_MAX)), bias <= -100 ? -INFINITY : float(bias)});
  }
}

// The sampling fields (each is validated here or by sampling::validate when the request is queued).
void read_sampling(const object& o, sampling::sampler_params& p) {
  if (auto v = get_number(o, "temperature")) p.temperature = float(*v);
  if (auto v = get_number(o, "top_p")) p.top_p = float(*v);
  if (auto v = get_int(o, "top_k")) {
    if (*v < 0 || *v > INT32_MAX) throw bad_request("'top_k' must be >= 0 (0 disables it)", "top_k");
    p.top_k = std::int32_t(*v);
  }
  if (auto v = get_number(o, "min_p")) p.min_p = float(*v);
  const auto penalty = [&](const char* key, float& out) {
    if (auto v = get_number(o, key)) {
      if (*v < -2 || *v > 2) throw bad_request(quoted(key) + " must be in [-2, 2]", key);
      out = float(*v);
    }
  };
  penalty("frequency_penalty", p.frequency_penalty);
  penalty("presence_penalty", p.presence_penalty);
  if (auto v = get_number(o, "repeat_penalty")) p.repeat_penalty = float(*v);
  if (auto v = get_int(o, "seed")) p.seed = std::uint64_t(*v);
  if (auto lb = get_object(o, "logit_bias")) read_logit_bias(*lb, p);
}

void read_max_tokens(const object& o, const api_fields& f, parsed_request& r) {
  r.sampling.max_tokens = f.default_max_tokens;
  for (const std::string_view key : f.max_tokens) {
    if (key.empty()) break;
    const auto v = get_int(o, key);
    if (!v) continue;
    if (*v < 0 || *v > INT32_MAX) throw bad_request(quoted(key) + " must be a non-negative integer", std::string(key));
    r.sampling.max_tokens = std::int32_t(*v);
    return;
  }
}

// A string or an array of at most max_stop_strings non-empty strings.
std::vector<std::string> read_stop(const object& o, std::string_view key) {
  std::vector<std::string> out;
  const auto e = field(o, key);
  if (!e) return out;
  const std::string k(key);
  if (e->is_string()) {
    out.emplace_back(std::string_view(*e));
  } else if (e->is_array()) {
    std::size_t i = 0;
    for (auto s : array(*e)) out.emplace_back(as_string(s, k + "[" + std::to_string(i++) + "]"));
  } else {
    throw bad_request(quoted(key) + " must be a string or an array of strings", k);
  }
  if (std::int64_t(out.size()) > max_stop_strings)
    throw bad_request(quoted(key) + " has more than " + std::to_string(max_stop_strings) + " entries", k);
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) throw bad_request("'" + k + "[" + std::to_string(i) + "]' is empty", k);
  return out;
}

void read_n(const object& body, parsed_request& r) {
  const auto n = get_int(body, "n");
  if (!n) return;
  if (*n < 1 || *n > max_choices)
    throw bad_request("'n' must be in [1, " + std::to_string(max_choices) + "], got " + std::to_string(*n), "n");
  r.n = std::uint32_t(*n);
}

// An alternatives count under `key`, within [0, max].
std::optional<std::int64_t> read_top(const object& body, const char* key, std::int64_t max) {
  const auto top = get_int(body, key);
  if (top && (*top < 0 || *top > max))
    throw bad_request(quoted(key) + " must be in [0, " + std::to_string(max) + "]", key);
  return top;
}

// Sets r.top_logprobs (-1: none) from the API's logprobs fields. Responses: `include` items
// other than the text's logprobs name outputs this server does not produce (search results,
// images, encrypted reasoning) and change nothing.
void read_logprobs(const object& body, const api_fields& f, parsed_request& r) {
  switch (f.logprobs) {
    case logprobs_form::none: return;
    case logprobs_form::completions:
      if (auto v = read_top(body, "logprobs", f.max_top_logprobs)) r.top_logprobs = std::int32_t(*v);
      return;
    case logprobs_form::chat: {
      const bool lp = get_bool(body, "logprobs").value_or(false);
      const auto top = read_top(body, "top_logprobs", f.max_top_logprobs);
      if (top && !lp) throw bad_request("'top_logprobs' requires 'logprobs': true", "top_logprobs");
      if (lp) r.top_logprobs = std::int32_t(top.value_or(0));
      return;
    }
    case logprobs_form::responses: {
      bool lp = false;
      if (const auto inc = field(body, "include")) {
        std::size_t i = 0;
        for (auto v : as_array(*inc, "include"))
          lp = as_string(v, "include[" + std::to_string(i++) + "]") == "message.output_text.logprobs" || lp;
      }
      const auto top = read_top(body, "top_logprobs", f.max_top_logprobs);
      if (lp || top) r.top_logprobs = std::int32_t(top.value_or(0));
      return;
    }
  }
}

std::string one_of(std::span<const std::string_view> names) {
  std::string out;
  for (std::size_t i = 0; i < names.size(); ++i)
    out += (i == 0 ? "" : i + 1 == names.size() ? " or " : ", ") + std::string(names[i]);
  return out;
}

// The format object at `path`: {type: text | json_object | json_schema, ...}; a json_schema's
// schema is flat ({type, name, schema}) or, in OpenAI chat, nested in json_schema.
void read_format(const object& fmt, const std::string& path, const api_fields& f, parsed_request& r) {
  const auto type = get_string(fmt, "type", path);
  if (!type) throw bad_request("'" + path + ".type' is required", path + ".type");
  if (std::find(f.format_types.begin(), f.format_types.end(), *type) == f.format_types.end())
    throw bad_request("'" + path + ".type' must be " + one_of(f.format_types) + ", got '" + std::string(*type) + "'",
                      path + ".type");
  if (*type == "text") return;
  if (*type == "json_object") {
    r.format = output_format::json_object;
    return;
  }
  std::string at = path;
  object js = fmt;
  if (f.openai_format)
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
  if (f.openai_format)
    if (auto name = get_string(js, "name", at)) r.schema_name = std::string(*name);
}

void read_output_format(const object& body, const api_fields& f, parsed_request& r) {
  for (const auto& loc : f.format) {
    if (loc.empty()) break;
    std::optional<object> fmt;
    if (loc.parent.empty()) fmt = get_object(body, loc.key);
    else if (auto p = get_object(body, loc.parent)) fmt = get_object(*p, loc.key, std::string(loc.parent));
    if (fmt) return read_format(*fmt, loc.path(), f, r);
  }
}

static_assert(std::size(table) == std::size_t(generation_api::anthropic_messages) + 1);

}  // namespace

parsed_request read_shared_fields(const object& body, generation_api api) {
  const api_fields& f = table[std::size_t(api)];
  parsed_request r;
  const auto model = get_string(body, "model");
  if (!model) throw bad_request(std::string(f.model_missing), "model");
  r.model = std::string(*model);
  if (f.n) read_n(body, r);
  read_sampling(body, r.sampling);
  read_max_tokens(body, f, r);
  if (!f.stop.empty()) r.stop = read_stop(body, f.stop);
  r.stream = get_bool(body, "stream").value_or(false);
  if (auto so = get_object(body, "stream_options"))
    r.include_usage = get_bool(*so, "include_usage", "stream_options").value_or(false);
  read_logprobs(body, f, r);
  if (f.tools) {
    read_tools(body, *f.tools, r);
    if (*f.tools == tool_shape::anthropic) read_anthropic_tool_choice(body, r);
    else read_openai_tool_choice(body, r);
  }
  read_output_format(body, f, r);
  return r;
}

}  // namespace strata::serve
