// OpenAI Chat Completions, legacy Completions and Responses: parsing and response shapes
// (openai_api.hpp). Golden transcripts: docs/spec/api.md §2.2, §2.4, §2.7.
#include "openai_api.hpp"

#include <boost/json.hpp>
#include <cmath>

namespace strata::serve::openai {
namespace json = boost::json;
using namespace json_in;

namespace {

constexpr const char* json_object_instruction =
    "Respond with a single valid JSON object and nothing else: no prose, no code fences.";

std::string require_model(const object& body) {
  const auto m = get_string(body, "model");
  if (!m) throw bad_request("'model' is required", "model");
  return std::string(*m);
}

void reject_n(const object& body) {
  if (const auto n = get_int(body, "n"); n && *n != 1)
    throw bad_request("'n' must be 1: this server generates one choice per request (got " + std::to_string(*n) + ")",
                      "n");
}

// Text of a message's content: a string, or an array of text parts (other part types are
// refused by name, since dropping an image silently would give a wrong answer).
std::string content_text(const element& c, const std::string& path) {
  if (c.is_string()) return std::string(std::string_view(c));
  if (!c.is_array()) throw bad_request("'" + path + "' must be a string or an array of content parts", path);
  std::string out;
  std::size_t i = 0;
  for (auto part : array(c)) {
    const std::string pp = path + "[" + std::to_string(i++) + "]";
    const object po = as_object(part, pp);
    const auto type = get_string(po, "type", pp);
    if (!type) throw bad_request("'" + pp + ".type' is required", pp + ".type");
    if (*type != "text" && *type != "input_text" && *type != "output_text")
      throw bad_request("'" + pp + "' has type '" + std::string(*type) + "'; only text parts are supported", pp + ".type");
    const auto t = get_string(po, "text", pp);
    if (!t) throw bad_request("'" + pp + ".text' is required", pp + ".text");
    out += *t;
  }
  return out;
}

void add_instruction(std::vector<chat::message>& msgs, const std::string& text) {
  if (!msgs.empty() && msgs.front().role == "system") msgs.front().content += "\n\n" + text;
  else msgs.insert(msgs.begin(), chat::message{"system", text, std::nullopt});
}

// response_format / text.format: json_object (and json_schema) become an instruction until
// constrained decoding exists.
void apply_format(const object& fmt, const std::string& path, std::vector<chat::message>& msgs) {
  const auto type = get_string(fmt, "type", path);
  if (!type) throw bad_request("'" + path + ".type' is required", path + ".type");
  if (*type == "text") return;
  if (*type == "json_object") return add_instruction(msgs, json_object_instruction);
  if (*type == "json_schema") {
    std::string schema;
    if (auto js = get_object(fmt, "json_schema", path)) {
      if (auto s = field(*js, "schema")) schema = simdjson::minify(*s);
    } else if (auto s = field(fmt, "schema")) {
      schema = simdjson::minify(*s);
    }
    return add_instruction(msgs, std::string(json_object_instruction) +
                                     (schema.empty() ? "" : " It must match this JSON schema: " + schema));
  }
  throw bad_request("'" + path + ".type' must be text, json_object or json_schema, got '" + std::string(*type) + "'",
                    path + ".type");
}

json::object usage_json(const generation_result& r) {
  return {{"prompt_tokens", r.prompt_tokens},
          {"completion_tokens", r.completion_tokens},
          {"total_tokens", r.prompt_tokens + r.completion_tokens},
          {"prompt_tokens_details", json::object{{"cached_tokens", r.cached_tokens}}}};
}

}  // namespace

const char* finish_reason_name(rt::finish_reason r) {
  switch (r) {
    case rt::finish_reason::max_tokens:
    case rt::finish_reason::context_full: return "length";
    default: return "stop";
  }
}

parsed_request parse_chat(const object& body) {
  parsed_request r;
  r.model = require_model(body);
  reject_n(body);
  const auto msgs = get_array(body, "messages");
  if (!msgs) throw bad_request("'messages' is required", "messages");
  std::size_t i = 0;
  for (auto m : *msgs) {
    const std::string path = "messages[" + std::to_string(i++) + "]";
    const object mo = as_object(m, path);
    const auto role = get_string(mo, "role", path);
    if (!role) throw bad_request("'" + path + ".role' is required", path + ".role");
    std::string rs(*role);
    if (rs == "developer") rs = "system";
    if (rs != "system" && rs != "user" && rs != "assistant" && rs != "tool")
      throw bad_request("'" + path + ".role' must be system, developer, user, assistant or tool, got '" + rs + "'",
                        path + ".role");
    if (get_array(mo, "tool_calls", path)) throw bad_request("'" + path + ".tool_calls': tool calls are not supported yet", path + ".tool_calls");
    const auto c = field(mo, "content");
    if (!c && rs != "assistant") throw bad_request("'" + path + ".content' is required", path + ".content");
    r.messages.push_back({rs, c ? content_text(*c, path + ".content") : std::string(), std::nullopt});
  }
  if (r.messages.empty()) throw bad_request("'messages' must not be empty", "messages");
  if (auto t = get_array(body, "tools"); t && t->size() > 0)
    throw bad_request("'tools': tool calling is not supported yet", "tools");
  if (auto lp = get_bool(body, "logprobs"); lp && *lp) throw bad_request("'logprobs' is not supported yet", "logprobs");
  read_sampling(body, r.sampling);
  if (auto v = read_max_tokens(body, "max_completion_tokens")) r.sampling.max_tokens = *v;
  else if (auto v2 = read_max_tokens(body, "max_tokens")) r.sampling.max_tokens = *v2;
  r.stop = read_stop(body, "stop");
  r.stream = get_bool(body, "stream").value_or(false);
  if (auto so = get_object(body, "stream_options")) r.include_usage = get_bool(*so, "include_usage", "stream_options").value_or(false);
  if (auto rf = get_object(body, "response_format")) apply_format(*rf, "response_format", r.messages);
  return r;
}

parsed_request parse_completion(const object& body) {
  parsed_request r;
  r.chat = false;
  r.model = require_model(body);
  reject_n(body);
  if (auto v = get_bool(body, "echo"); v && *v) throw bad_request("'echo' is not supported", "echo");
  if (auto v = get_int(body, "best_of"); v && *v != 1) throw bad_request("'best_of' must be 1", "best_of");
  if (auto v = get_string(body, "suffix"); v && !v->empty()) throw bad_request("'suffix' is not supported", "suffix");
  if (auto v = get_int(body, "logprobs"); v && *v > 0) throw bad_request("'logprobs' is not supported yet", "logprobs");
  const auto p = field(body, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt");
  const auto read_ids = [&](const array& a, const std::string& path) {
    std::size_t i = 0;
    for (auto t : a) {
      const std::string tp = path + "[" + std::to_string(i++) + "]";
      if (!t.is_int64() || std::int64_t(t) < 0 || std::int64_t(t) > INT32_MAX)
        throw bad_request("'" + tp + "' must be a token id (a non-negative integer)", "prompt");
      r.prompt_tokens.push_back(std::int32_t(std::int64_t(t)));
    }
    if (r.prompt_tokens.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  };
  if (p->is_string()) {
    r.prompt = std::string(std::string_view(*p));
  } else if (p->is_array()) {
    const array a(*p);
    if (a.size() != 1 && (a.size() == 0 || !a.at(0).value().is_int64()))
      throw bad_request("'prompt' must hold exactly one prompt (batches of prompts are not supported)", "prompt");
    const element first = a.at(0).value();
    if (first.is_string()) r.prompt = std::string(std::string_view(first));
    else if (first.is_int64()) read_ids(a, "prompt");
    else if (first.is_array()) read_ids(array(first), "prompt[0]");
    else throw bad_request("'prompt' must be a string, an array of token ids or a one-element array", "prompt");
  } else {
    throw bad_request("'prompt' must be a string or an array", "prompt");
  }
  if (r.prompt_tokens.empty() && r.prompt.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  read_sampling(body, r.sampling);
  r.sampling.max_tokens = read_max_tokens(body, "max_tokens").value_or(16);  // OpenAI's default
  r.stop = read_stop(body, "stop");
  r.stream = get_bool(body, "stream").value_or(false);
  if (auto so = get_object(body, "stream_options")) r.include_usage = get_bool(*so, "include_usage", "stream_options").value_or(false);
  return r;
}

parsed_request parse_responses(const object& body) {
  parsed_request r;
  r.model = require_model(body);
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
      const auto type = get_string(io, "type", path);
      if (type && *type != "message")
        throw bad_request("'" + path + ".type' is '" + std::string(*type) + "'; only message items are supported",
                          path + ".type");
      const auto role = get_string(io, "role", path);
      if (!role) throw bad_request("'" + path + ".role' is required", path + ".role");
      std::string rs(*role);
      if (rs == "developer") rs = "system";
      if (rs != "system" && rs != "user" && rs != "assistant")
        throw bad_request("'" + path + ".role' must be system, developer, user or assistant", path + ".role");
      const auto c = field(io, "content");
      if (!c) throw bad_request("'" + path + ".content' is required", path + ".content");
      r.messages.push_back({rs, content_text(*c, path + ".content"), std::nullopt});
    }
  } else {
    throw bad_request("'input' must be a string or an array of messages", "input");
  }
  if (r.messages.empty() || (r.messages.size() == 1 && r.messages[0].role == "system"))
    throw bad_request("'input' must not be empty", "input");
  if (auto t = get_array(body, "tools"); t && t->size() > 0)
    throw bad_request("'tools': tool calling is not supported yet", "tools");
  if (get_string(body, "previous_response_id"))
    throw bad_request("'previous_response_id' is not supported: this server stores no responses", "previous_response_id");
  read_sampling(body, r.sampling);
  if (auto v = read_max_tokens(body, "max_output_tokens")) r.sampling.max_tokens = *v;
  r.stream = get_bool(body, "stream").value_or(false);
  if (auto t = get_object(body, "text"))
    if (auto f = get_object(*t, "format", "text")) apply_format(*f, "text.format", r.messages);
  return r;
}

namespace {

// Chat completions: chunk per delta, role first, finish_reason last, optional usage chunk.
class chat_stream final : public response_format {
 public:
  chat_stream(response_meta m, bool usage) : m_(std::move(m)), usage_(usage) {}
  api_flavor flavor() const noexcept override { return api_flavor::openai; }

  void begin(std::string& out) override { chunk(out, json::object{{"role", "assistant"}, {"content", ""}}, nullptr); }
  void text(std::string_view t, std::string& out) override {
    if (!t.empty()) chunk(out, json::object{{"content", t}}, nullptr);
  }
  void end(const generation_result& r, std::string& out) override {
    chunk(out, json::object{}, finish_reason_name(r.reason));
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
    json::object msg{{"role", "assistant"}, {"content", r.text}, {"refusal", nullptr}};
    o["choices"] = json::array{json::object{
        {"index", 0}, {"message", std::move(msg)}, {"logprobs", nullptr}, {"finish_reason", finish_reason_name(r.reason)}}};
    o["usage"] = usage_json(r);
    return json::serialize(o);
  }

 private:
  json::object head() const {
    return {{"id", m_.id}, {"object", "chat.completion.chunk"}, {"created", m_.created}, {"model", m_.model},
            {"system_fingerprint", "strata"}};
  }
  void chunk(std::string& out, json::object delta, const char* finish) {
    json::object c = head();
    c["choices"] = json::array{json::object{{"index", 0},
                                            {"delta", std::move(delta)},
                                            {"logprobs", nullptr},
                                            {"finish_reason", finish ? json::value(finish) : json::value(nullptr)}}};
    if (usage_) c["usage"] = nullptr;
    sse(out, {}, json::serialize(c));
  }
  response_meta m_;
  bool usage_;
};

class completion_stream final : public response_format {
 public:
  completion_stream(response_meta m, bool usage) : m_(std::move(m)), usage_(usage) {}
  api_flavor flavor() const noexcept override { return api_flavor::openai; }
  void begin(std::string&) override {}
  void text(std::string_view t, std::string& out) override {
    if (!t.empty()) sse(out, {}, json::serialize(chunk(t, nullptr)));
  }
  void end(const generation_result& r, std::string& out) override {
    sse(out, {}, json::serialize(chunk("", finish_reason_name(r.reason))));
    if (usage_) {
      json::object c = chunk("", nullptr);
      c["choices"] = json::array{};
      c["usage"] = usage_json(r);
      sse(out, {}, json::serialize(c));
    }
    sse(out, {}, "[DONE]");
  }
  std::string body(const generation_result& r) override {
    json::object o = chunk(r.text, finish_reason_name(r.reason));
    o["usage"] = usage_json(r);
    return json::serialize(o);
  }

 private:
  json::object chunk(std::string_view t, const char* finish) const {
    return {{"id", m_.id},
            {"object", "text_completion"},
            {"created", m_.created},
            {"model", m_.model},
            {"system_fingerprint", "strata"},
            {"choices", json::array{json::object{{"text", t},
                                                 {"index", 0},
                                                 {"logprobs", nullptr},
                                                 {"finish_reason", finish ? json::value(finish) : json::value(nullptr)}}}}};
  }
  response_meta m_;
  bool usage_;
};

// Responses API: created -> in_progress -> output_item.added -> content_part.added ->
// output_text.delta* -> output_text.done -> content_part.done -> output_item.done ->
// completed | incomplete, every event numbered.
class responses_stream final : public response_format {
 public:
  responses_stream(response_meta m, std::int32_t max_output, float temperature, float top_p)
      : m_(std::move(m)), item_id_("msg_" + m_.id.substr(m_.id.find('_') + 1)), max_output_(max_output),
        temperature_(round6(temperature)), top_p_(round6(top_p)) {}
  api_flavor flavor() const noexcept override { return api_flavor::openai; }

  void begin(std::string& out) override {
    event(out, "response.created", {{"response", response("in_progress", nullptr)}});
    event(out, "response.in_progress", {{"response", response("in_progress", nullptr)}});
    event(out, "response.output_item.added", {{"output_index", 0}, {"item", item("in_progress", false)}});
    event(out, "response.content_part.added",
          {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part("")}});
  }
  void text(std::string_view t, std::string& out) override {
    if (t.empty()) return;
    text_ += t;
    event(out, "response.output_text.delta",
          {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"delta", t}, {"logprobs", json::array{}}});
  }
  void end(const generation_result& r, std::string& out) override {
    event(out, "response.output_text.done",
          {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"text", text_}, {"logprobs", json::array{}}});
    event(out, "response.content_part.done",
          {{"item_id", item_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part(text_)}});
    event(out, "response.output_item.done", {{"output_index", 0}, {"item", item("completed", true)}});
    const bool complete = !truncated(r);
    event(out, complete ? "response.completed" : "response.incomplete", {{"response", final_response(r)}});
  }
  void error(const api_error& e, std::string& out) override {
    event(out, "error", {{"code", e.type}, {"message", e.what()}, {"param", nullptr}});
  }
  std::string body(const generation_result& r) override {
    text_ = r.text;
    return json::serialize(final_response(r));
  }

 private:
  // 0.8f prints as 0.800000011920929 otherwise.
  static double round6(float v) { return std::round(double(v) * 1e6) / 1e6; }
  static bool truncated(const generation_result& r) {
    return r.reason == rt::finish_reason::max_tokens || r.reason == rt::finish_reason::context_full;
  }
  void event(std::string& out, std::string_view type, const json::object& fields) {
    json::object o{{"type", type}, {"sequence_number", seq_++}};
    for (const auto& kv : fields) o.emplace(kv.key(), kv.value());
    sse(out, type, json::serialize(o));
  }
  json::object part(std::string_view t) const {
    return {{"type", "output_text"}, {"text", t}, {"annotations", json::array{}}, {"logprobs", json::array{}}};
  }
  json::object item(const char* status, bool with_text) const {
    json::array content;
    if (with_text) content.push_back(part(text_));
    return {{"id", item_id_}, {"type", "message"}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
  }
  json::object response(const char* status, const generation_result* r) const {
    json::object o{{"id", m_.id},
                   {"object", "response"},
                   {"created_at", m_.created},
                   {"status", status},
                   {"error", nullptr},
                   {"incomplete_details", nullptr},
                   {"instructions", nullptr},
                   {"max_output_tokens", max_output_ >= 0 ? json::value(max_output_) : json::value(nullptr)},
                   {"model", m_.model},
                   {"output", json::array{}},
                   {"parallel_tool_calls", false},
                   {"temperature", temperature_},
                   {"top_p", top_p_},
                   {"tool_choice", "auto"},
                   {"tools", json::array{}},
                   {"text", json::object{{"format", json::object{{"type", "text"}}}}},
                   {"metadata", json::object{}},
                   {"usage", nullptr}};
    if (r) {
      o["output"] = json::array{item("completed", true)};
      o["usage"] = json::object{{"input_tokens", r->prompt_tokens},
                                {"input_tokens_details", json::object{{"cached_tokens", r->cached_tokens}}},
                                {"output_tokens", r->completion_tokens},
                                {"output_tokens_details", json::object{{"reasoning_tokens", 0}}},
                                {"total_tokens", r->prompt_tokens + r->completion_tokens}};
    }
    return o;
  }
  json::object final_response(const generation_result& r) const {
    json::object o = response(truncated(r) ? "incomplete" : "completed", &r);
    if (truncated(r)) o["incomplete_details"] = json::object{{"reason", "max_output_tokens"}};
    return o;
  }

  response_meta m_;
  std::string item_id_;
  std::int32_t max_output_;
  double temperature_, top_p_;
  std::string text_;
  std::uint64_t seq_ = 0;
};

}  // namespace

std::unique_ptr<response_format> chat_format(response_meta meta, bool include_usage) {
  return std::make_unique<chat_stream>(std::move(meta), include_usage);
}
std::unique_ptr<response_format> completion_format(response_meta meta, bool include_usage) {
  return std::make_unique<completion_stream>(std::move(meta), include_usage);
}
std::unique_ptr<response_format> responses_format(response_meta meta, const parsed_request& req) {
  return std::make_unique<responses_stream>(std::move(meta), req.sampling.max_tokens, req.sampling.temperature,
                                            req.sampling.top_p);
}

}  // namespace strata::serve::openai
