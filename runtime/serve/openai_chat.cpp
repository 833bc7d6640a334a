// OpenAI Chat Completions: request parsing (messages with tool calls and tool results; the shared
// fields: request_fields.hpp) and the chunk / body shapes (docs/spec/api.md §2.1, §2.2).
#include "openai_api.hpp"
#include "openai_shared.hpp"
#include "request_fields.hpp"

namespace strata::serve::openai {
using namespace detail;

namespace {

// An assistant message's tool_calls: [{id, type: "function", function: {name, arguments}}].
std::vector<chat::tool_call> read_tool_calls(const array& calls, const std::string& path) {
  std::vector<chat::tool_call> out;
  std::size_t i = 0;
  for (auto c : calls) {
    const std::string cp = path + "[" + std::to_string(i++) + "]";
    const object co = as_object(c, cp);
    const auto fn = get_object(co, "function", cp);
    if (!fn) throw bad_request("'" + cp + ".function' is required", cp + ".function");
    const auto name = get_string(*fn, "name", cp + ".function");
    if (!name) throw bad_request("'" + cp + ".function.name' is required", cp + ".function.name");
    const auto args = get_string(*fn, "arguments", cp + ".function");
    chat::tool_call t{std::string(get_string(co, "id", cp).value_or("")), std::string(*name),
                      args ? std::string(*args) : std::string("{}")};
    out.push_back(std::move(t));
  }
  return out;
}

}  // namespace

parsed_request parse_chat(const object& body) {
  parsed_request r = read_shared_fields(body, generation_api::chat_completions);
  for_each_message(body, "'messages' is required", [&](const std::string& path, const object& mo, std::string rs) {
    if (rs == "developer") rs = "system";
    if (rs == "function") rs = "tool";  // the legacy form of a tool result
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
      throw bad_request("'" + path + ".role' must be system, developer, user, assistant or tool, got '" + rs + "'",
                        path + ".role");
    chat::message msg{rs, {}, std::nullopt};
    if (auto calls = get_array(mo, "tool_calls", path)) {
      if (rs != "assistant") throw bad_request("'" + path + ".tool_calls' is only allowed in assistant messages", path + ".tool_calls");
      msg.tool_calls = read_tool_calls(*calls, path + ".tool_calls");
    }
    const auto c = field(mo, "content");
    if (!c && rs != "assistant") throw bad_request("'" + path + ".content' is required", path + ".content");
    if (c) msg.content = content_text(*c, path + ".content", text_parts, "content parts");
    if (rs == "tool") msg.tool_call_id = std::string(get_string(mo, "tool_call_id", path).value_or(""));
    r.messages.push_back(std::move(msg));
  });
  if (r.messages.empty()) throw bad_request("'messages' must not be empty", "messages");
  return r;
}

namespace {

// Chat completions: per choice a role chunk first, deltas (content, tool_calls), then a chunk
// with finish_reason; an optional usage chunk and [DONE] end the stream.
class chat_stream final : public response_format {
 public:
  chat_stream(response_meta m, const parsed_request& req)
      : m_(std::move(m)), usage_(req.include_usage), logprobs_(req.top_logprobs >= 0) {}
  api_flavor flavor() const noexcept override { return api_flavor::openai; }

  void begin(std::string& out) override {
    for (std::uint32_t c = 0; c < m_.n; ++c) chunk(out, c, json::object{{"role", "assistant"}, {"content", ""}}, nullptr);
  }
  void text(std::uint32_t c, std::string_view t, std::span<const logprob_entry> lp, std::string& out) override {
    if (t.empty() && lp.empty()) return;
    chunk(out, c, json::object{{"content", t}}, nullptr, lp);
  }
  void tool_call_begin(std::uint32_t c, std::uint32_t index, const tool_call& call, std::string& out) override {
    json::object fn{{"name", call.name}, {"arguments", ""}};
    json::object tc{{"index", index}, {"id", call.id}, {"type", "function"}, {"function", std::move(fn)}};
    chunk(out, c, json::object{{"tool_calls", json::array{std::move(tc)}}}, nullptr);
  }
  void tool_call_arguments(std::uint32_t c, std::uint32_t index, std::string_view d, std::string& out) override {
    if (d.empty()) return;
    json::object tc{{"index", index}, {"function", json::object{{"arguments", d}}}};
    chunk(out, c, json::object{{"tool_calls", json::array{std::move(tc)}}}, nullptr);
  }
  void choice_end(std::uint32_t c, const choice_result& r, std::string& out) override {
    chunk(out, c, json::object{}, finish_reason(r));
  }
  void end(const generation_result& r, std::string& out) override {
    if (usage_) {
      json::object c = head();
      c["choices"] = json::array{};
      c["usage"] = usage_json(r);
      sse(out, {}, json::serialize(c));
    }
    sse(out, {}, "[DONE]");
  }
  std::string body(const generation_result& r) override {
    json::object o{{"id", m_.id}, {"object", "chat.completion"}, {"created", m_.created}, {"model", m_.model},
                   {"system_fingerprint", "strata"}};
    json::array choices;
    for (std::size_t i = 0; i < r.choices.size(); ++i) {
      const choice_result& c = r.choices[i];
      // With tool calls and no text, content is null (what the API sends).
      json::object msg{{"role", "assistant"},
                       {"content", c.text.empty() && !c.tool_calls.empty() ? json::value(nullptr) : json::value(c.text)},
                       {"refusal", nullptr}};
      if (!c.tool_calls.empty()) {
        json::array calls;
        for (const auto& t : c.tool_calls)
          calls.push_back(json::object{{"id", t.id}, {"type", "function"},
                                       {"function", json::object{{"name", t.name}, {"arguments", t.arguments}}}});
        msg["tool_calls"] = std::move(calls);
      }
      choices.push_back(json::object{{"index", i}, {"message", std::move(msg)}, {"logprobs", logprobs_json(c.logprobs)},
                                     {"finish_reason", finish_reason(c)}});
    }
    o["choices"] = std::move(choices);
    o["usage"] = usage_json(r);
    return json::serialize(o);
  }

 private:
  json::value logprobs_json(std::span<const logprob_entry> lp) const {
    if (!logprobs_) return nullptr;
    return json::object{{"content", chat_logprobs(lp)}, {"refusal", nullptr}};
  }
  json::object head() const {
    return {{"id", m_.id}, {"object", "chat.completion.chunk"}, {"created", m_.created}, {"model", m_.model},
            {"system_fingerprint", "strata"}};
  }
  void chunk(std::string& out, std::uint32_t c, json::object delta, const char* finish,
             std::span<const logprob_entry> lp = {}) {
    json::object o = head();
    o["choices"] = json::array{json::object{{"index", c},
                                            {"delta", std::move(delta)},
                                            {"logprobs", lp.empty() ? json::value(nullptr) : logprobs_json(lp)},
                                            {"finish_reason", finish ? json::value(finish) : json::value(nullptr)}}};
    if (usage_) o["usage"] = nullptr;
    sse(out, {}, json::serialize(o));
  }
  response_meta m_;
  bool usage_, logprobs_;
};

}  // namespace

std::unique_ptr<response_format> chat_format(response_meta meta, const parsed_request& req) {
  return std::make_unique<chat_stream>(std::move(meta), req);
}

}  // namespace strata::serve::openai
