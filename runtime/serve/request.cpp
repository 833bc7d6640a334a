// Shared request readers (request.hpp) and error bodies (api_error.hpp).
#include <boost/json.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>

#include "request.hpp"
#include "response_format.hpp"
#include "strata/json/parse.hpp"

namespace strata::serve {

namespace json = boost::json;

void read_sampling(const json_in::object& o, sampling::sampler_params& p) {
  using namespace json_in;
  if (auto v = get_number(o, "temperature")) p.temperature = float(*v);
  if (auto v = get_number(o, "top_p")) p.top_p = float(*v);
  if (auto v = get_int(o, "top_k")) {
    if (*v < 0 || *v > INT32_MAX) throw bad_request("'top_k' must be >= 0 (0 disables it)", "top_k");
    p.top_k = std::int32_t(*v);
  }
  if (auto v = get_number(o, "min_p")) p.min_p = float(*v);
  if (auto v = get_number(o, "frequency_penalty")) {
    if (*v < -2 || *v > 2) throw bad_request("'frequency_penalty' must be in [-2, 2]", "frequency_penalty");
    p.frequency_penalty = float(*v);
  }
  if (auto v = get_number(o, "presence_penalty")) {
    if (*v < -2 || *v > 2) throw bad_request("'presence_penalty' must be in [-2, 2]", "presence_penalty");
    p.presence_penalty = float(*v);
  }
  if (auto v = get_number(o, "repeat_penalty")) p.repeat_penalty = float(*v);
  if (auto v = get_int(o, "seed")) p.seed = std::uint64_t(*v);
  if (auto lb = get_object(o, "logit_bias")) {
    for (auto [key, value] : *lb) {
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
      p.logit_bias.push_back({std::int32_t(std::clamp<std::int64_t>(id, -1, INT32_MAX)),
                              bias <= -100 ? -INFINITY : float(bias)});
    }
  }
}

void read_common(const json_in::object& o, parsed_request& r, std::initializer_list<const char*> max_token_keys,
                 const char* stop_key) {
  read_sampling(o, r.sampling);
  for (const char* key : max_token_keys)
    if (auto v = read_max_tokens(o, key)) {
      r.sampling.max_tokens = *v;
      break;
    }
  if (stop_key) r.stop = read_stop(o, stop_key);
  r.stream = json_in::get_bool(o, "stream").value_or(false);
  if (auto so = json_in::get_object(o, "stream_options"))
    r.include_usage = json_in::get_bool(*so, "include_usage", "stream_options").value_or(false);
}

std::string content_text(const json_in::element& c, const std::string& path, std::span<const std::string_view> text_types,
                         std::string_view what) {
  using namespace json_in;
  if (c.is_string()) return std::string(std::string_view(c));
  if (!c.is_array()) throw bad_request("'" + path + "' must be a string or an array of " + std::string(what), path);
  std::string out;
  std::size_t i = 0;
  for (auto part : json_in::array(c)) {
    const std::string pp = path + "[" + std::to_string(i++) + "]";
    const json_in::object po = as_object(part, pp);
    const auto type = get_string(po, "type", pp);
    if (!type) throw bad_request("'" + pp + ".type' is required", pp + ".type");
    if (std::find(text_types.begin(), text_types.end(), *type) == text_types.end())
      throw bad_request("'" + pp + "' has type '" + std::string(*type) + "'; only text " + std::string(what) +
                            " are supported here", pp + ".type");
    const auto t = get_string(po, "text", pp);
    if (!t) throw bad_request("'" + pp + ".text' is required", pp + ".text");
    out += *t;
  }
  return out;
}

strata::json::value to_json_tree(const json_in::element& e) {
  // simdjson's minified text, parsed by the order-keeping parser (both accept the same JSON).
  return strata::json::parse(simdjson::minify(e), "request");
}

std::optional<std::int32_t> read_max_tokens(const json_in::object& o, const char* key) {
  const auto v = json_in::get_int(o, key);
  if (!v) return std::nullopt;
  if (*v < 0 || *v > INT32_MAX) throw bad_request(std::string("'") + key + "' must be a non-negative integer", key);
  return std::int32_t(*v);
}

std::vector<std::string> read_stop(const json_in::object& o, const char* key) {
  std::vector<std::string> out;
  const auto e = json_in::field(o, key);
  if (!e) return out;
  if (e->is_string()) {
    out.emplace_back(std::string_view(*e));
  } else if (e->is_array()) {
    std::size_t i = 0;
    for (auto s : json_in::array(*e)) {
      const std::string path = std::string(key) + "[" + std::to_string(i++) + "]";
      out.emplace_back(json_in::as_string(s, path));
    }
  } else {
    throw bad_request(std::string("'") + key + "' must be a string or an array of strings", key);
  }
  if (out.size() > 16) throw bad_request(std::string("'") + key + "' has more than 16 entries", key);
  for (std::size_t i = 0; i < out.size(); ++i)
    if (out[i].empty()) throw bad_request(std::string("'") + key + "[" + std::to_string(i) + "]' is empty", key);
  return out;
}

std::string error_body(api_flavor f, const api_error& e, const std::string& request_id) {
  json::object err;
  if (f == api_flavor::anthropic) {
    err["type"] = anthropic_type(e.status);
    err["message"] = e.what();
    return json::serialize(json::object{{"type", "error"}, {"error", std::move(err)}, {"request_id", request_id}});
  }
  err["message"] = e.what();
  err["type"] = e.type;
  err["param"] = e.param.empty() ? json::value(nullptr) : json::value(e.param);
  err["code"] = e.status == 404 && e.type == "not_found_error" ? json::value("model_not_found") : json::value(nullptr);
  return json::serialize(json::object{{"error", std::move(err)}});
}

std::string error_event(api_flavor f, const api_error& e) {
  std::string out;
  if (f == api_flavor::anthropic) {
    json::object err{{"type", anthropic_type(e.status)}, {"message", e.what()}};
    sse(out, "error", json::serialize(json::object{{"type", "error"}, {"error", std::move(err)}}));
  } else {
    json::object err{{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", nullptr}};
    sse(out, {}, json::serialize(json::object{{"error", std::move(err)}}));
  }
  return out;
}

}  // namespace strata::serve
