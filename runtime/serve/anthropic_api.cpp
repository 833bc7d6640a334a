// Anthropic Messages: parsing and the response / SSE shapes (anthropic_api.hpp). Golden
// transcripts: docs/spec/api.md §1.3, §1.4.
#include "anthropic_api.hpp"

#include <boost/json.hpp>

#include "request_fields.hpp"

namespace strata::serve::anthropic {
namespace json = boost::json;
using namespace json_in;

namespace {

constexpr std::string_view text_blocks[] = {"text"};

// Appends one message's content blocks to `out`: text and thinking (assistant) into the turn,
// tool_use into its tool_calls, each tool_result as a "tool" message of its own.
void read_blocks(const std::string& role, const element& c, const std::string& path, std::vector<chat::message>& out) {
  if (c.is_string()) {
    out.push_back({role, std::string(std::string_view(c)), std::nullopt});
    return;
  }
  if (!c.is_array()) throw bad_request("'" + path + "' must be a string or an array of content blocks", path);
  chat::message turn{role, {}, std::nullopt};
  bool has_turn = false;
  std::size_t i = 0;
  for (auto b : array(c)) {
    const std::string bp = path + "[" + std::to_string(i++) + "]";
    const object bo = as_object(b, bp);
    const auto type = get_string(bo, "type", bp);
    if (!type) throw bad_request("'" + bp + ".type' is required", bp + ".type");
    if (*type == "text") {
      const auto t = get_string(bo, "text", bp);
      if (!t) throw bad_request("'" + bp + ".text' is required", bp + ".text");
      turn.content += *t;
      has_turn = true;
    } else if (*type == "thinking" && role == "assistant") {
      turn.reasoning_content = std::string(get_string(bo, "thinking", bp).value_or(""));
    } else if (*type == "redacted_thinking" && role == "assistant") {
      // Encrypted reasoning of another model: nothing a local model can read.
    } else if (*type == "tool_use" && role == "assistant") {
      const auto id = get_string(bo, "id", bp);
      const auto name = get_string(bo, "name", bp);
      if (!id || !name) throw bad_request("'" + bp + "' needs 'id' and 'name'", bp);
      const auto input = field(bo, "input");
      if (input && !input->is_object()) throw bad_request("'" + bp + ".input' must be an object", bp + ".input");
      turn.tool_calls.push_back({std::string(*id), std::string(*name), input ? simdjson::minify(*input) : "{}"});
      has_turn = true;
    } else if (*type == "tool_result" && role == "user") {
      if (has_turn && !turn.content.empty()) out.push_back(std::move(turn));  // text before a result stays before it
      turn = {role, {}, std::nullopt};
      has_turn = false;
      const auto id = get_string(bo, "tool_use_id", bp);
      if (!id) throw bad_request("'" + bp + ".tool_use_id' is required", bp + ".tool_use_id");
      chat::message result{"tool", {}, std::nullopt};
      if (auto rc = field(bo, "content")) result.content = content_text(*rc, bp + ".content", text_blocks, "content blocks");
      result.tool_call_id = std::string(*id);
      out.push_back(std::move(result));
    } else {
      throw bad_request("'" + bp + "' has type '" + std::string(*type) + "', which is not supported in " + role +
                            " turns (text, tool_use, tool_result and thinking are)", bp + ".type");
    }
  }
  if (has_turn || turn.reasoning_content || i == 0) out.push_back(std::move(turn));
}

}  // namespace

const char* stop_reason_name(const choice_result& c) {
  switch (c.reason) {
    case rt::finish_reason::max_tokens: return "max_tokens";
    case rt::finish_reason::stop_string: return "stop_sequence";
    case rt::finish_reason::context_full: return "model_context_window_exceeded";
    default: return c.tool_calls.empty() ? "end_turn" : "tool_use";
  }
}

parsed_request parse_messages(const object& body, bool count_tokens) {
  parsed_request r = read_shared_fields(body, generation_api::anthropic_messages);
  if (!count_tokens && !field(body, "max_tokens")) throw bad_request("max_tokens: Field required", "max_tokens");
  if (const auto sys = field(body, "system")) {
    const std::string text = content_text(*sys, "system", text_blocks, "content blocks");
    if (!text.empty()) r.messages.push_back({"system", text, std::nullopt});
  }
  std::size_t n = 0;
  for_each_message(body, "messages: Field required", [&](const std::string& path, const object& mo, const std::string& role) {
    ++n;
    if (role != "user" && role != "assistant" && role != "system")
      throw bad_request("'" + path + ".role' must be user or assistant, got '" + role + "'", path + ".role");
    const auto c = field(mo, "content");
    if (!c) throw bad_request("'" + path + ".content' is required", path + ".content");
    read_blocks(role, *c, path + ".content", r.messages);
  });
  if (n == 0) throw bad_request("messages: at least one message is required", "messages");
  if (r.messages.back().role == "assistant") {  // prefill: the reply continues this text
    if (!r.messages.back().tool_calls.empty())
      throw bad_request("the last message is an assistant turn with tool_use: send the tool_result blocks in a user turn",
                        "messages");
    r.assistant_prefill = std::move(r.messages.back().content);
    r.messages.pop_back();
  }
  return r;
}

namespace {

// message_start, then content blocks in order (a text block opened at once unless a tool call is
// forced, tool_use blocks with input_json_delta), message_delta with usage, message_stop.
class messages_stream final : public response_format {
 public:
  messages_stream(response_meta m, const parsed_request& req) : m_(std::move(m)), text_first_(!req.forced_tool_call()) {}
  api_flavor flavor() const noexcept override { return api_flavor::anthropic; }

  void begin(std::string& out) override {
    json::object msg = message_head();
    msg["content"] = json::array{};
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = json::object{{"input_tokens", m_.prompt_tokens}, {"output_tokens", 0}};
    event(out, "message_start", {{"message", std::move(msg)}});
    if (text_first_) open_text(out);
    ping(out);
  }
  void text(std::uint32_t, std::string_view t, std::span<const logprob_entry>, std::string& out) override {
    if (t.empty()) return;
    if (!text_open_) open_text(out);
    event(out, "content_block_delta", {{"index", index_}, {"delta", json::object{{"type", "text_delta"}, {"text", t}}}});
  }
  void tool_call_begin(std::uint32_t, std::uint32_t, const tool_call& call, std::string& out) override {
    close_block(out);
    block_open_ = true;
    json::object block{{"type", "tool_use"}, {"id", call.id}, {"name", call.name}, {"input", json::object{}}};
    event(out, "content_block_start", {{"index", index_}, {"content_block", std::move(block)}});
  }
  void tool_call_arguments(std::uint32_t, std::uint32_t, std::string_view d, std::string& out) override {
    if (d.empty()) return;
    event(out, "content_block_delta",
          {{"index", index_}, {"delta", json::object{{"type", "input_json_delta"}, {"partial_json", d}}}});
  }
  void tool_call_end(std::uint32_t, std::uint32_t, const tool_call&, std::string& out) override { close_block(out); }
  void end(const generation_result& r, std::string& out) override {
    close_block(out);
    const choice_result& c = r.choices.at(0);
    event(out, "message_delta",
          {{"delta", json::object{{"stop_reason", stop_reason_name(c)}, {"stop_sequence", stop_sequence(c)}}},
           {"usage", usage(r)}});
    event(out, "message_stop", {});
  }
  void ping(std::string& out) override { event(out, "ping", {}); }
  std::string body(const generation_result& r) override {
    const choice_result& c = r.choices.at(0);
    json::object msg = message_head();
    json::array content;
    if (!c.text.empty() || c.tool_calls.empty()) content.push_back(json::object{{"type", "text"}, {"text", c.text}});
    for (const auto& t : c.tool_calls)
      content.push_back(json::object{{"type", "tool_use"}, {"id", t.id}, {"name", t.name}, {"input", input_of(t)}});
    msg["content"] = std::move(content);
    msg["stop_reason"] = stop_reason_name(c);
    msg["stop_sequence"] = stop_sequence(c);
    msg["usage"] = usage(r);
    return json::serialize(msg);
  }

 private:
  void open_text(std::string& out) {
    close_block(out);
    text_open_ = block_open_ = true;
    event(out, "content_block_start", {{"index", index_}, {"content_block", json::object{{"type", "text"}, {"text", ""}}}});
  }
  void close_block(std::string& out) {
    if (!block_open_) return;
    event(out, "content_block_stop", {{"index", index_++}});
    block_open_ = text_open_ = false;
  }
  // A call cut short by max_tokens has no complete JSON: its input is then {}.
  static json::value input_of(const tool_call& t) {
    boost::system::error_code ec;
    json::value v = json::parse(t.arguments, ec);
    return !ec && v.is_object() ? v : json::object{};
  }
  json::object message_head() const {
    return {{"id", m_.id}, {"type", "message"}, {"role", "assistant"}, {"model", m_.model}};
  }
  static json::value stop_sequence(const choice_result& c) {
    return c.reason == rt::finish_reason::stop_string ? json::value(c.stop_sequence) : json::value(nullptr);
  }
  // input_tokens excludes prefix-cache hits, reported apart as llama-server does.
  static json::object usage(const generation_result& r) {
    return {{"input_tokens", r.prompt_tokens - r.cached_tokens},
            {"cache_read_input_tokens", r.cached_tokens},
            {"cache_creation_input_tokens", 0},
            {"output_tokens", r.completion_tokens()}};
  }
  static void event(std::string& out, std::string_view type, const json::object& fields) {
    json::object o{{"type", type}};  // "type" first, as the API sends it
    for (const auto& kv : fields) o.emplace(kv.key(), kv.value());
    sse(out, type, json::serialize(o));
  }
  response_meta m_;
  bool text_first_;
  bool block_open_ = false, text_open_ = false;
  std::uint32_t index_ = 0;  // of the open block, or of the next one
};

}  // namespace

std::unique_ptr<response_format> messages_format(response_meta meta, const parsed_request& req) {
  return std::make_unique<messages_stream>(std::move(meta), req);
}

}  // namespace strata::serve::anthropic
