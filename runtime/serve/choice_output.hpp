// One choice of a generation as the response sees it: the scheduler's text deltas and token
// log-probabilities become response_format events (when streaming) and the choice's result.
// When the model may call tools, chat::tool_call_parser separates the answer text from the calls
// written in the template's syntax.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "response_format.hpp"
#include "strata/chat/tool_call_parser.hpp"
#include "strata/runtime/scheduler.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::serve {

class choice_output {
 public:
  // tools: the template whose call syntax the output may hold (nullopt: plain text).
  // new_call_id: a fresh id for each tool call ("call_…", "toolu_…").
  choice_output(std::uint32_t index, const tokenizer::tokenizer& tok, std::optional<chat::template_kind> tools,
                std::function<std::string()> new_call_id);
  // New output (`st` as generation_stream::take filled it). With `fmt`, events go to `out`.
  void feed(const rt::generation_stream::state& st, response_format* fmt, std::string& out);
  // The choice finished: releases held text, records the finish reason and, streaming, sends
  // the choice's end.
  void finish(const rt::generation_stream::state& st, const std::vector<std::string>& stop, response_format* fmt,
              std::string& out);
  const choice_result& result() const noexcept { return res_; }

 private:
  void emit(std::span<const logprob_entry> lp, response_format* fmt, std::string& out);
  std::uint32_t index_;
  const tokenizer::tokenizer* tok_;
  std::optional<chat::tool_call_parser> parser_;
  std::function<std::string()> new_call_id_;
  choice_result res_;
  std::vector<chat::parse_event> events_;
  std::vector<logprob_entry> lp_;
  bool in_call_ = false;
};

}  // namespace strata::serve
