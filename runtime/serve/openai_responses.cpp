// OpenAI Responses API: request parsing (input items: messages, function_call and
// function_call_output; flat function tools; text.format) and the numbered event stream with
// message and function_call output items (docs/spec/api.md §2.7).
#include <cmath>

#include "openai_api.hpp"
#include "openai_shared.hpp"
#include "request_fields.hpp"

namespace strata::serve::openai {
using namespace detail;

parsed_request parse_responses(const object& body) {
  parsed_request r = read_shared_fields(body, generation_api::responses);
  if (auto ins = get_string(body, "instructions")) r.messages.push_back({"system", std::string(*ins), std::nullopt});
  const auto in = field(body, "input");
  if (!in) throw bad_request("'input' is required", "input");
  if (in->is_string()) {
    r.messages.push_back({"user", std::string(std::string_view(*in)), std::nullopt});
  } else if (in->is_array()) {
    std::size_t i = 0;
    for (auto item : array(*in)) {
      const std::string path = "input[" + std::to_string(i++) + "]";
      const object io = as_object(item, path);
      const std::string type(get_string(io, "type", path).value_or("message"));
      if (type == "function_call") {
        // Consecutive calls are one assistant turn with several tool_calls.
        const auto name = get_string(io, "name", path);
        if (!name) throw bad_request("'" + path + ".name' is required", path + ".name");
        const auto call_id = get_string(io, "call_id", path);
        if (!call_id) throw bad_request("'" + path + ".call_id' is required", path + ".call_id");
        chat::tool_call call{std::string(*call_id), std::string(*name),
                             std::string(get_string(io, "arguments", path).value_or("{}"))};
        if (r.messages.empty() || r.messages.back().role != "assistant" || r.messages.back().tool_calls.empty())
          r.messages.push_back({"assistant", {}, std::nullopt});
        r.messages.back().tool_calls.push_back(std::move(call));
        continue;
      }
      if (type == "function_call_output") {
        const auto call_id = get_string(io, "call_id", path);
        if (!call_id) throw bad_request("'" + path + ".call_id' is required", path + ".call_id");
        const auto out = field(io, "output");
        if (!out) throw bad_request("'" + path + ".output' is required", path + ".output");
        chat::message m{"tool", content_text(*out, path + ".output", text_parts, "output parts"), std::nullopt};
        m.tool_call_id = std::string(*call_id);
        r.messages.push_back(std::move(m));
        continue;
      }
      if (type != "message")
        throw bad_request("'" + path + ".type' is '" + type +
                              "'; supported input items are message, function_call and function_call_output",
                          path + ".type");
      const auto role = get_string(io, "role", path);
      if (!role) throw bad_request("'" + path + ".role' is required", path + ".role");
      std::string rs(*role);
      if (rs == "developer") rs = "system";
      if (rs != "system" && rs != "user" && rs != "assistant")
        throw bad_request("'" + path + ".role' must be system, developer, user or assistant", path + ".role");
      const auto c = field(io, "content");
      if (!c) throw bad_request("'" + path + ".content' is required", path + ".content");
      r.messages.push_back({rs, content_text(*c, path + ".content", text_parts, "content parts"), std::nullopt});
    }
  } else {
    throw bad_request("'input' must be a string or an array of input items", "input");
  }
  if (r.messages.empty() || (r.messages.size() == 1 && r.messages[0].role == "system"))
    throw bad_request("'input' must not be empty", "input");
  if (get_string(body, "previous_response_id"))
    throw bad_request("'previous_response_id' is not supported: this server stores no responses", "previous_response_id");
  return r;
}

namespace {

// created -> in_progress -> per output item: output_item.added, its content (a message's
// content_part.added, output_text.delta*, output_text.done, content_part.done; a function call's
// function_call_arguments.delta*, .done), output_item.done -> completed | incomplete, every
// event numbered. The message item opens with the first text, so a reply that is only function
// calls has no empty message; one with neither gets an empty message.
class responses_stream final : public response_format {
 public:
  responses_stream(response_meta m, const parsed_request& req)
      : m_(std::move(m)), suffix_(m_.id.substr(m_.id.find('_') + 1)), max_output_(req.sampling.max_tokens),
        temperature_(round6(req.sampling.temperature)), top_p_(round6(req.sampling.top_p)),
        parallel_(req.parallel_tool_calls), logprobs_(req.top_logprobs >= 0) {
    for (const auto& t : req.tools) {
      json::object o{{"type", "function"}, {"name", t.find("function")->find("name")->as_string()}, {"strict", false}};
      tools_.push_back(std::move(o));
    }
    using mode = chat::tool_choice_mode;
    if (req.tool_choice.mode == mode::none) tool_choice_ = "none";
    else if (req.tool_choice.mode == mode::required) tool_choice_ = "required";
    else if (req.tool_choice.mode == mode::function)
      tool_choice_ = json::object{{"type", "function"}, {"name", req.tool_choice.function}};
  }
  api_flavor flavor() const noexcept override { return api_flavor::openai; }

  void begin(std::string& out) override {
    event(out, "response.created", {{"response", response("in_progress", nullptr)}});
    event(out, "response.in_progress", {{"response", response("in_progress", nullptr)}});
  }
  // Log-probabilities of tokens that have produced no text yet wait for the delta that carries
  // their text; those of a call's tokens are dropped (function_call items have none).
  void text(std::uint32_t, std::string_view t, std::span<const logprob_entry> lp, std::string& out) override {
    if (logprobs_ && !in_call_) pending_lp_.insert(pending_lp_.end(), lp.begin(), lp.end());
    if (t.empty()) return;
    if (!message_open_) open_message(out);
    text_ += t;
    json::array delta_lp = chat_logprobs(pending_lp_);
    message_lp_.insert(message_lp_.end(), pending_lp_.begin(), pending_lp_.end());
    pending_lp_.clear();
    event(out, "response.output_text.delta", {{"item_id", message_id()}, {"output_index", items_.size()},
                                              {"content_index", 0}, {"delta", t}, {"logprobs", std::move(delta_lp)}});
  }
  void tool_call_begin(std::uint32_t, std::uint32_t index, const tool_call& call, std::string& out) override {
    close_message(out);
    pending_lp_.clear();  // the tokens of the call's opening markup
    in_call_ = true;
    calls_.push_back(call);
    calls_.back().arguments.clear();
    event(out, "response.output_item.added",
          {{"output_index", items_.size()}, {"item", call_item(calls_.back(), index, "in_progress")}});
  }
  void tool_call_arguments(std::uint32_t, std::uint32_t index, std::string_view d, std::string& out) override {
    if (d.empty()) return;
    calls_.back().arguments += d;
    event(out, "response.function_call_arguments.delta",
          {{"item_id", call_id(index)}, {"output_index", items_.size()}, {"delta", d}});
  }
  void tool_call_end(std::uint32_t, std::uint32_t index, const tool_call& call, std::string& out) override {
    in_call_ = false;
    calls_.back().arguments = call.arguments;
    event(out, "response.function_call_arguments.done",
          {{"item_id", call_id(index)}, {"output_index", items_.size()}, {"arguments", call.arguments}});
    json::object item = call_item(calls_.back(), index, "completed");
    event(out, "response.output_item.done", {{"output_index", items_.size()}, {"item", item}});
    items_.push_back(std::move(item));
  }
  void end(const generation_result& r, std::string& out) override {
    close_message(out);
    if (items_.empty()) {  // nothing was generated: one empty message, as the API sends
      open_message(out);
      close_message(out);
    }
    event(out, truncated(r) ? "response.incomplete" : "response.completed", {{"response", final_response(r, items_)}});
  }
  void error(const api_error& e, std::string& out) override {
    event(out, "error", {{"code", e.type}, {"message", e.what()}, {"param", nullptr}});
  }
  std::string body(const generation_result& r) override {
    const choice_result& c = r.choices.at(0);
    json::array items;
    if (!c.text.empty() || c.tool_calls.empty())
      items.push_back(message_item("completed", c.text, true, text_logprobs(c)));
    for (std::uint32_t i = 0; i < c.tool_calls.size(); ++i) items.push_back(call_item(c.tool_calls[i], i, "completed"));
    return json::serialize(final_response(r, items));
  }

 private:
  // 0.8f prints as 0.800000011920929 otherwise.
  static double round6(float v) { return std::round(double(v) * 1e6) / 1e6; }
  static bool truncated(const generation_result& r) {
    const auto reason = r.choices.at(0).reason;
    return reason == rt::finish_reason::max_tokens || reason == rt::finish_reason::context_full;
  }
  // Text after a function call is a message item of its own, with an id of its own.
  std::string message_id() const {
    return messages_ <= 1 ? "msg_" + suffix_ : "msg_" + suffix_ + "_" + std::to_string(messages_ - 1);
  }
  // The entries of the tokens that wrote the message's text: all of them, or with calls after
  // the text, those whose bytes cover it (the calls' tokens follow).
  std::span<const logprob_entry> text_logprobs(const choice_result& c) const {
    if (!logprobs_ || c.tool_calls.empty()) return c.logprobs;
    std::size_t n = 0, bytes = 0;
    while (n < c.logprobs.size() && bytes < c.text.size()) bytes += c.logprobs[n++].token.size();
    return std::span<const logprob_entry>(c.logprobs).first(n);
  }
  std::string call_id(std::uint32_t index) const { return "fc_" + suffix_ + "_" + std::to_string(index); }

  void open_message(std::string& out) {
    message_open_ = true;
    ++messages_;
    text_.clear();
    message_lp_.clear();
    event(out, "response.output_item.added", {{"output_index", items_.size()}, {"item", message_item("in_progress", {}, false)}});
    event(out, "response.content_part.added",
          {{"item_id", message_id()}, {"output_index", items_.size()}, {"content_index", 0}, {"part", part("")}});
  }
  void close_message(std::string& out) {
    if (!message_open_) return;
    message_open_ = false;
    const std::size_t at = items_.size();
    event(out, "response.output_text.done", {{"item_id", message_id()}, {"output_index", at}, {"content_index", 0},
                                             {"text", text_}, {"logprobs", chat_logprobs(message_lp_)}});
    event(out, "response.content_part.done",
          {{"item_id", message_id()}, {"output_index", at}, {"content_index", 0}, {"part", part(text_, message_lp_)}});
    json::object item = message_item("completed", text_, true, message_lp_);
    event(out, "response.output_item.done", {{"output_index", at}, {"item", item}});
    items_.push_back(std::move(item));
  }

  void event(std::string& out, std::string_view type, const json::object& fields) {
    json::object o{{"type", type}, {"sequence_number", seq_++}};
    for (const auto& kv : fields) o.emplace(kv.key(), kv.value());
    sse(out, type, json::serialize(o));
  }
  static json::object part(std::string_view t, std::span<const logprob_entry> lp = {}) {
    return {{"type", "output_text"}, {"text", t}, {"annotations", json::array{}}, {"logprobs", chat_logprobs(lp)}};
  }
  json::object message_item(const char* status, std::string_view t, bool with_text = true,
                            std::span<const logprob_entry> lp = {}) const {
    json::array content;
    if (with_text) content.push_back(part(t, lp));
    return {{"id", message_id()}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
  }
  json::object call_item(const tool_call& c, std::uint32_t index, const char* status) const {
    return {{"id", call_id(index)}, {"type", "function_call"}, {"status", status}, {"arguments", c.arguments},
            {"call_id", c.id}, {"name", c.name}};
  }
  json::object response(const char* status, const generation_result* r, json::array output = {}) const {
    json::object o{{"id", m_.id},
                   {"object", "response"},
                   {"created_at", m_.created},
                   {"status", status},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"instructions", nullptr},
                   {"max_output_tokens", max_output_ >= 0 ? json::value(max_output_) : json::value(nullptr)},
                   {"model", m_.model},
                   {"output", std::move(output)},
                   {"parallel_tool_calls", parallel_},
                   {"temperature", temperature_},
                   {"top_p", top_p_},
                   {"tool_choice", tool_choice_},
                   {"tools", tools_},
                   {"text", json::object{{"format", json::object{{"type", "text"}}}}},
                   {"metadata", json::object{}},
                   {"usage", nullptr}};
    if (r) {
      const std::uint32_t completion = r->completion_tokens();
      o["usage"] = json::object{{"input_tokens", r->prompt_tokens},
                                {"input_tokens_details", json::object{{"cached_tokens", r->cached_tokens}}},
                                {"output_tokens", completion},
                                {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
                                {"total_tokens", r->prompt_tokens + completion}};
    }
    return o;
  }
  json::object final_response(const generation_result& r, json::array output) const {
    json::object o = response(truncated(r) ? "incomplete" : "completed", &r, std::move(output));
    if (truncated(r)) o["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
    return o;
  }

  response_meta m_;
  std::string suffix_;  // of the response id, shared by its item ids
  std::int32_t max_output_;
  double temperature_, top_p_;
  bool parallel_, logprobs_;
  json::array tools_;
  json::value tool_choice_ = "auto";
  bool message_open_ = false, in_call_ = false;
  std::uint32_t messages_ = 0;  // message items opened so far
  std::string text_;       // the open message's text
  std::vector<logprob_entry> message_lp_, pending_lp_;  // the open message's; not yet sent with text
  std::vector<tool_call> calls_;
  json::array items_;      // finished output items
  std::uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<response_format> responses_format(response_meta meta, const parsed_request& req) {
  return std::make_unique<responses_stream>(std::move(meta), req);
}

}  // namespace strata::serve::openai
