// Message readers (request.hpp) and error bodies (api_error.hpp).
#include <boost/json.hpp>
#include <algorithm>

#include "request.hpp"
#include "response_format.hpp"
#include "strata/json/parse.hpp"

namespace strata::serve {

namespace json = boost::json;

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
  // OpenAI's code for an unknown model (param "model"); other 404s (routes, embeddings off) have none.
  err["code"] = e.status == 404 && e.param == "model" ? json::value("model_not_found") : json::value(nullptr);
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
