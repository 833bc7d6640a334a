// Anthropic Messages: parsing and the response / SSE shapes (anthropic_api.hpp). Golden
// transcript: docs/spec/api.md §1.4.
#include "anthropic_api.hpp"

#include <boost/json.hpp>

namespace strata::serve::anthropic {
namespace json = boost::json;
using namespace json_in;

namespace {

// A string, or text blocks (other block types are refused by name).
std::string blocks_text(const element& c, const std::string& path) {
  if (c.is_string()) return std::string(std::string_view(c));
  if (!c.is_array()) throw bad_request("'" + path + "' must be a string or an array of content blocks", path);
  std::string out;
  std::size_t i = 0;
  for (auto b : array(c)) {
    const std::string bp = path + "[" + std::to_string(i++) + "]";
    const object bo = as_object(b, bp);
    const auto type = get_string(bo, "type", bp);
    if (!type) throw bad_request("'" + bp + ".type' is required", bp + ".type");
    if (*type != "text")
      throw bad_request("'" + bp + "' has type '" + std::string(*type) + "'; only text blocks are supported", bp + ".type");
    const auto t = get_string(bo, "text", bp);
    if (!t) throw bad_request("'" + bp + ".text' is required", bp + ".text");
    out += *t;
  }
  return out;
}

}  // namespace

const char* stop_reason_name(rt::finish_reason r) {
  switch (r) {
    case rt::finish_reason::max_tokens: return "max_tokens";
    case rt::finish_reason::stop_string: return "stop_sequence";
    case rt::finish_reason::context_full: return "model_context_window_exceeded";
    default: return "end_turn";
  }
}

parsed_request parse_messages(const object& body, bool count_tokens) {
  parsed_request r;
  const auto model = get_string(body, "model");
  if (!model) throw bad_request("model: Field required", "model");
  r.model = std::string(*model);
  if (!count_tokens) {
    const auto mt = read_max_tokens(body, "max_tokens");
    if (!mt) throw bad_request("max_tokens: Field required", "max_tokens");
    r.sampling.max_tokens = *mt;
  }
  if (const auto sys = field(body, "system")) {
    const std::string text = blocks_text(*sys, "system");
    if (!text.empty()) r.messages.push_back({"system", text, std::nullopt});
  }
  const auto msgs = get_array(body, "messages");
  if (!msgs) throw bad_request("messages: Field required", "messages");
  std::size_t i = 0;
  for (auto m : *msgs) {
    const std::string path = "messages[" + std::to_string(i++) + "]";
    const object mo = as_object(m, path);
    const auto role = get_string(mo, "role", path);
    if (!role) throw bad_request("'" + path + ".role' is required", path + ".role");
    if (*role != "user" && *role != "assistant" && *role != "system")
      throw bad_request("'" + path + ".role' must be user or assistant, got '" + std::string(*role) + "'", path + ".role");
    const auto c = field(mo, "content");
    if (!c) throw bad_request("'" + path + ".content' is required", path + ".content");
    r.messages.push_back({std::string(*role), blocks_text(*c, path + ".content"), std::nullopt});
  }
  if (i == 0) throw bad_request("messages: at least one message is required", "messages");
  if (r.messages.back().role == "assistant") {  // prefill: the reply continues this text
    r.assistant_prefill = std::move(r.messages.back().content);
    r.messages.pop_back();
  }
  if (auto t = get_array(body, "tools"); t && t->size() > 0)
    throw bad_request("tools: tool use is not supported yet", "tools");
  read_sampling(body, r.sampling);
  r.stop = read_stop(body, "stop_sequences");
  r.stream = get_bool(body, "stream").value_or(false);
  return r;
}

namespace {

class messages_stream final : public response_format {
 public:
  explicit messages_stream(response_meta m) : m_(std::move(m)) {}
  api_flavor flavor() const noexcept override { return api_flavor::anthropic; }

  void begin(std::string& out) override {
    json::object msg = message_head();
    msg["content"] = json::array{};
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = json::object{{"input_tokens", m_.prompt_tokens}, {"output_tokens", 0}};
    event(out, "message_start", {{"message", std::move(msg)}});
    event(out, "content_block_start",
          {{"index", 0}, {"content_block", json::object{{"type", "text"}, {"text", ""}}}});
    ping(out);
  }
  void text(std::string_view t, std::string& out) override {
    if (t.empty()) return;
    event(out, "content_block_delta", {{"index", 0}, {"delta", json::object{{"type", "text_delta"}, {"text", t}}}});
  }
  void end(const generation_result& r, std::string& out) override {
    event(out, "content_block_stop", {{"index", 0}});
    event(out, "message_delta",
          {{"delta", json::object{{"stop_reason", stop_reason_name(r.reason)}, {"stop_sequence", stop_sequence(r)}}},
           {"usage", usage(r)}});
    event(out, "message_stop", {});
  }
  void ping(std::string& out) override { event(out, "ping", {}); }
  std::string body(const generation_result& r) override {
    json::object msg = message_head();
    msg["content"] = json::array{json::object{{"type", "text"}, {"text", r.text}}};
    msg["stop_reason"] = stop_reason_name(r.reason);
    msg["stop_sequence"] = stop_sequence(r);
    msg["usage"] = usage(r);
    return json::serialize(msg);
  }

 private:
  json::object message_head() const {
    return {{"id", m_.id}, {"type", "message"}, {"role", "assistant"}, {"model", m_.model}};
  }
  static json::value stop_sequence(const generation_result& r) {
    return r.reason == rt::finish_reason::stop_string ? json::value(r.stop_sequence) : json::value(nullptr);
  }
  // input_tokens excludes prefix-cache hits, reported apart as llama-server does.
  static json::object usage(const generation_result& r) {
    return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
            {"cache_read_input_tokens", r.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"output_tokens", r.completion_tokens}};
  }
  static void event(std::string& out, std::string_view type, const json::object& fields) {
    json::object o{{"type", type}};  // "type" first, as the API sends it
    for (const auto& kv : fields) o.emplace(kv.key(), kv.value());
    sse(out, type, json::serialize(o));
  }
  response_meta m_;
};

}  // namespace

std::unique_ptr<response_format> messages_format(response_meta meta) {
  return std::make_unique<messages_stream>(std::move(meta));
}

}  // namespace strata::serve::anthropic
