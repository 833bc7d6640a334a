// One choice's output: text, tool calls and logprobs into events and a result (choice_output.hpp).
#include "choice_output.hpp"

namespace strata::serve {

choice_output::choice_output(std::uint32_t index, const tokenizer::tokenizer& tok,
                             std::optional<chat::template_kind> tools, std::function<std::string()> new_call_id)
    : index_(index), tok_(&tok), new_call_id_(std::move(new_call_id)) {
  if (tools) parser_.emplace(*tools);
}

void choice_output::feed(const rt::generation_stream::state& st, response_format* fmt, std::string& out) {
  lp_.clear();
  for (const auto& t : st.logprobs) {
    logprob_entry e{std::string(tok_->token_to_piece(t.token, true)), t.logprob, {}};
    for (std::uint32_t i = 0; i < t.n_top; ++i)
      e.top.push_back({std::string(tok_->token_to_piece(t.top[i].id, true)), t.top[i].logprob});
    lp_.push_back(std::move(e));
  }
  res_.logprobs.insert(res_.logprobs.end(), lp_.begin(), lp_.end());
  res_.completion_tokens = st.completion_tokens;
  events_.clear();
  if (parser_) parser_->feed(st.text, events_);
  else if (!st.text.empty()) events_.push_back({chat::parse_event::kind::content, 0, st.text});
  emit(lp_, fmt, out);
}

void choice_output::finish(const rt::generation_stream::state& st, const std::vector<std::string>& stop,
                           response_format* fmt, std::string& out) {
  events_.clear();
  if (parser_) parser_->finish(events_);
  emit({}, fmt, out);
  if (in_call_) {  // cut short (max_tokens): the call ends with what it has
    in_call_ = false;
    if (fmt) fmt->tool_call_end(index_, std::uint32_t(res_.tool_calls.size() - 1), res_.tool_calls.back(), out);
  }
  res_.reason = st.reason;
  res_.completion_tokens = st.completion_tokens;
  if (st.reason == rt::finish_reason::stop_string && st.stop_index < stop.size()) res_.stop_sequence = stop[st.stop_index];
  if (fmt) fmt->choice_end(index_, res_, out);
}

void choice_output::emit(std::span<const logprob_entry> lp, response_format* fmt, std::string& out) {
  using kind = chat::parse_event::kind;
  bool lp_sent = lp.empty();
  for (auto& e : events_) {
    switch (e.type) {
      case kind::content:
        res_.text += e.text;
        if (fmt) fmt->text(index_, e.text, lp_sent ? std::span<const logprob_entry>() : lp, out);
        lp_sent = true;
        break;
      case kind::call_begin:
        res_.tool_calls.push_back({new_call_id_(), std::move(e.text), {}});
        in_call_ = true;
        if (fmt) fmt->tool_call_begin(index_, std::uint32_t(res_.tool_calls.size() - 1), res_.tool_calls.back(), out);
        break;
      case kind::call_arguments:
        res_.tool_calls.back().arguments += e.text;
        if (fmt) fmt->tool_call_arguments(index_, std::uint32_t(res_.tool_calls.size() - 1), e.text, out);
        break;
      case kind::call_end:
        in_call_ = false;
        if (fmt) fmt->tool_call_end(index_, std::uint32_t(res_.tool_calls.size() - 1), res_.tool_calls.back(), out);
        break;
    }
  }
  // Log-probabilities of tokens that produced no text yet (held back, or inside a call).
  if (!lp_sent && fmt) fmt->text(index_, {}, lp, out);
}

}  // namespace strata::serve
