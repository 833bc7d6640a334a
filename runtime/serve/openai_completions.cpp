// OpenAI legacy Completions: request parsing (prompt forms, n, logprobs as a count) and the
// text_completion shapes with the legacy logprobs object (docs/spec/api.md §2.4).

#include "openai_api.hpp"
#include "openai_shared.hpp"
#include "request_fields.hpp"
#include "strata/core/utf8.hpp"

namespace strata::serve::openai {
using namespace detail;

parsed_request parse_completion(const object& body) {
  parsed_request r = read_shared_fields(body, generation_api::completions);
  r.chat = false;
  if (auto v = get_bool(body, "echo"); v && *v) throw bad_request("'echo' is not supported", "echo");
  if (auto v = get_int(body, "best_of"); v && *v != 1 && *v != std::int64_t(r.n))
    throw bad_request("'best_of' must equal 'n' (ranking candidates is not supported)", "best_of");
  if (auto v = get_string(body, "suffix"); v && !v->empty()) throw bad_request("'suffix' is not supported", "suffix");
  const auto p = field(body, "prompt");
  if (!p) throw bad_request("'prompt' is required", "prompt");
  const auto read_ids = [&](const array& a, const std::string& path) {
    r.prompt_tokens = token_ids(a, path, "prompt");
    if (r.prompt_tokens.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  };
  if (p->is_string()) {
    r.prompt = std::string(std::string_view(*p));
  } else if (p->is_array()) {
    const array a(*p);
    if (a.size() != 1 && (a.size() == 0 || !a.at(0).value().is_int64()))
      throw bad_request("'prompt' must hold exactly one prompt (batches of prompts are not supported; use 'n' for "
                        "several completions of one prompt)", "prompt");
    const element first = a.at(0).value();
    if (first.is_string()) r.prompt = std::string(std::string_view(first));
    else if (first.is_int64()) read_ids(a, "prompt");
    else if (first.is_array()) read_ids(array(first), "prompt[0]");
    else throw bad_request("'prompt' must be a string, an array of token ids or a one-element array", "prompt");
  } else {
    throw bad_request("'prompt' must be a string or an array", "prompt");
  }
  if (r.prompt_tokens.empty() && r.prompt.empty()) throw bad_request("'prompt' must not be empty", "prompt");
  return r;
}

namespace {

class completion_stream final : public response_format {
 public:
  completion_stream(response_meta m, const parsed_request& req)
      : m_(std::move(m)), usage_(req.include_usage), logprobs_(req.top_logprobs >= 0), offsets_(m_.n, 0) {}
  api_flavor flavor() const noexcept override { return api_flavor::openai; }
  void begin(std::string&) override {}
  void text(std::uint32_t c, std::string_view t, std::span<const logprob_entry> lp, std::string& out) override {
    if (t.empty() && lp.empty()) return;
    sse(out, {}, json::serialize(chunk(c, t, nullptr, lp)));
  }
  void choice_end(std::uint32_t c, const choice_result& r, std::string& out) override {
    sse(out, {}, json::serialize(chunk(c, "", finish_reason(r), {})));
  }
  void end(const generation_result& r, std::string& out) override {
    if (usage_) {
      json::object o = head();
      o["choices"] = json::array{};
      o["usage"] = usage_json(r);
      sse(out, {}, json::serialize(o));
    }
    sse(out, {}, "[DONE]");
  }
  std::string body(const generation_result& r) override {
    json::object o = head();
    json::array choices;
    for (std::uint32_t c = 0; c < r.choices.size(); ++c) {
      offsets_[c] = 0;
      choices.push_back(choice(c, r.choices[c].text, finish_reason(r.choices[c]), r.choices[c].logprobs));
    }
    o["choices"] = std::move(choices);
    o["usage"] = usage_json(r);
    return json::serialize(o);
  }

 private:
  json::object head() const {
    return {{"id", m_.id}, {"object", "text_completion"}, {"created", m_.created}, {"model", m_.model},
            {"system_fingerprint", "strata"}};
  }
  // The legacy object: parallel arrays, top_logprobs as {token: logprob} maps, text_offset the
  // byte offset of each token in the choice's text.
  json::value legacy_logprobs(std::uint32_t c, std::span<const logprob_entry> lp) {
    if (!logprobs_) return nullptr;
    json::array tokens, values, tops, offsets;
    for (const auto& e : lp) {
      tokens.push_back(json::string(utf8::sanitize(e.token)));
      values.push_back(e.logprob);
      json::object top;
      for (const auto& a : e.top) top[utf8::sanitize(a.token)] = a.logprob;
      tops.push_back(std::move(top));
      offsets.push_back(offsets_[c]);
      offsets_[c] += e.token.size();
    }
    return json::object{{"tokens", std::move(tokens)}, {"token_logprobs", std::move(values)},
                        {"top_logprobs", std::move(tops)}, {"text_offset", std::move(offsets)}};
  }
  json::object choice(std::uint32_t c, std::string_view t, const char* finish, std::span<const logprob_entry> lp) {
    return {{"text", t},
            {"index", c},
            {"logprobs", legacy_logprobs(c, lp)},
            {"finish_reason", finish ? json::value(finish) : json::value(nullptr)}};
  }
  json::object chunk(std::uint32_t c, std::string_view t, const char* finish, std::span<const logprob_entry> lp) {
    json::object o = head();
    o["choices"] = json::array{choice(c, t, finish, lp)};
    return o;
  }
  response_meta m_;
  bool usage_, logprobs_;
  std::vector<std::size_t> offsets_;  // per choice: text bytes covered by logprobs so far
};

}  // namespace

std::unique_ptr<response_format> completion_format(response_meta meta, const parsed_request& req) {
  return std::make_unique<completion_stream>(std::move(meta), req);
}

}  // namespace strata::serve::openai
