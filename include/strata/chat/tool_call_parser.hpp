// Model output -> content and tool calls, incrementally (streaming), in the formats of
// tool_calls.hpp. Feed text as it is detokenized; events come out as soon as they are certain:
// content (never text that may turn out to open a call), call_begin (with the function name, once
// it is complete), call_arguments (pieces of the arguments' JSON text as generated; concatenated
// they are the `arguments` string OpenAI clients expect), call_end. The same events come out
// however the text is split.
//   chatml: calls are <tool_call>{envelope}</tool_call> anywhere outside a <think> block; text
//     between and around them is content. "<tool_call>" followed by something that is not a
//     {"name": ...} envelope is content.
//   Llama: the output is calls when it starts (after whitespace and an optional <|python_tag|> or
//     <|python_start|>) with a {"name": ...} envelope; further envelopes may follow (separated by
//     whitespace or ';'); anything else makes the rest content.
// The envelope may give the arguments under "arguments" or "parameters", before or after "name".
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/chat/message.hpp"
#include "strata/chat/tool_calls.hpp"
#include "strata/json/parse.hpp"

namespace strata::chat {

struct parse_event {
  enum class kind : std::uint8_t { content, call_begin, call_arguments, call_end };
  kind type;
  std::size_t index = 0;  // the call's index (call_*)
  std::string text;       // content | the function name (call_begin) | arguments text (call_arguments)
};

class tool_call_parser {
 public:
  explicit tool_call_parser(template_kind k) : chatml_(k == template_kind::chatml), mode_(chatml_ ? mode::text : mode::start) {}

  void feed(std::string_view text, std::vector<parse_event>& out) {
    pending_ += text;
    run(out, false);
  }
  // End of the output: held-back text becomes content. A call cut off inside its envelope is
  // ended with the arguments it has (truncated() tells).
  void finish(std::vector<parse_event>& out) {
    run(out, true);
    if (mode_ == mode::envelope && confirmed_) {
      truncated_ = true;
      end_call(out);
    }
    emit_content(out, tentative_);
    tentative_.clear();
    const bool only_ws = pending_.find_first_not_of(" \t\r\n") == std::string::npos;
    if (!(after_call_ && only_ws)) emit_content(out, pending_);
    pending_.clear();
    mode_ = mode::plain;
  }

  std::span<const tool_call> calls() const noexcept { return calls_; }  // ids are left to the caller
  const std::string& content() const noexcept { return content_; }
  bool truncated() const noexcept { return truncated_; }

 private:
  enum class mode { start, text, plain, envelope, after };
  enum class env { open, key_or_close, key, colon, value, name_value, raw_value, comma_or_close };

  static bool is_ws(char c) noexcept { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

  void emit_content(std::vector<parse_event>& out, std::string_view s) {
    if (s.empty()) return;
    content_ += s;
    if (!out.empty() && out.back().type == parse_event::kind::content)
      out.back().text += s;
    else
      out.push_back({parse_event::kind::content, 0, std::string(s)});
  }

  // Length of the longest suffix of s that is a proper prefix of one of `markers`.
  static std::size_t holdback(std::string_view s, std::initializer_list<std::string_view> markers) {
    std::size_t keep = 0;
    for (const std::string_view m : markers)
      for (std::size_t n = std::min(m.size() - 1, s.size()); n > keep; --n)
        if (s.substr(s.size() - n) == m.substr(0, n)) {
          keep = n;
          break;
        }
    return keep;
  }

  void run(std::vector<parse_event>& out, bool last) {
    for (bool progress = true; progress;) {
      progress = false;
      switch (mode_) {
        case mode::plain:
          emit_content(out, pending_);
          pending_.clear();
          return;
        case mode::text: progress = scan_text(out, last); break;
        case mode::start: progress = scan_start(out, last); break;
        case mode::envelope: progress = scan_envelope(out); break;
        case mode::after: progress = scan_after(out, last); break;
      }
    }
  }

  // chatml content: look for <tool_call> outside <think>…</think>. Whitespace right before a call
  // (and between calls) is the template's separator, not content: it is held until it is known.
  bool scan_text(std::vector<parse_event>& out, bool last) {
    static constexpr std::string_view open = "<tool_call>", think = "<think>", unthink = "</think>";
    const std::size_t first_text = pending_.find_first_not_of(" \t\r\n");
    if (first_text == std::string::npos) {  // only whitespace so far
      if (!last) return false;
      if (after_call_) pending_.clear();  // trailing separator after the last call
    }
    if (after_call_ && first_text != std::string::npos) {
      const std::string_view rest = std::string_view(pending_).substr(first_text);
      if (rest.starts_with(open)) {
        pending_.erase(0, first_text);
      } else if (!last && open.starts_with(rest)) {
        return false;
      }
      after_call_ = false;
    }
    std::size_t best = std::string::npos;
    std::string_view which;
    for (const std::string_view m : {open, think, unthink}) {
      const std::size_t p = pending_.find(m);
      if (p < best) {
        best = p;
        which = m;
      }
    }
    if (best == std::string::npos) {
      std::size_t keep = last ? 0 : holdback(pending_, {open, think, unthink});
      if (!last && !in_think_) {  // and the whitespace before it: a separator if a call follows
        std::size_t cut = pending_.size() - keep;
        while (cut > 0 && is_ws(pending_[cut - 1])) --cut;
        keep = pending_.size() - cut;
      }
      emit_content(out, std::string_view(pending_).substr(0, pending_.size() - keep));
      pending_.erase(0, pending_.size() - keep);
      return false;
    }
    if (which == open && !in_think_) {
      std::size_t text_end = best;  // whitespace before the call is kept aside with it
      while (text_end > 0 && is_ws(pending_[text_end - 1])) --text_end;
      emit_content(out, std::string_view(pending_).substr(0, text_end));
      tentative_ = pending_.substr(text_end, best - text_end) + std::string(open);
      pending_.erase(0, best + open.size());
      begin_envelope();
      return true;
    }
    in_think_ = which == think ? true : which == unthink ? false : in_think_;
    emit_content(out, std::string_view(pending_).substr(0, best + which.size()));
    pending_.erase(0, best + which.size());
    return true;
  }

  // Llama: calls only at the start, after whitespace and an optional python marker.
  bool scan_start(std::vector<parse_event>& out, bool last) {
    static constexpr std::string_view markers[] = {"<|python_tag|>", "<|python_start|>"};
    std::size_t i = 0;
    while (i < pending_.size() && is_ws(pending_[i])) ++i;
    const std::string_view rest = std::string_view(pending_).substr(i);
    for (const std::string_view m : markers) {
      if (rest.starts_with(m)) {
        tentative_ += pending_.substr(0, i + m.size());
        pending_.erase(0, i + m.size());
        return true;
      }
      if (!last && !rest.empty() && m.starts_with(rest)) return false;  // maybe a marker: wait
    }
    if (rest.empty()) {
      if (last) return false;
      tentative_ += pending_;
      pending_.clear();
      return false;
    }
    const char next = rest[0];
    tentative_ += pending_.substr(0, i);
    pending_.erase(0, i);
    if (next == '{') {
      begin_envelope();
    } else {
      emit_content(out, tentative_);
      tentative_.clear();
      mode_ = mode::plain;
    }
    return true;
  }

  void begin_envelope() {
    mode_ = mode::envelope;
    st_ = env::open;
    confirmed_ = false;
    name_.clear();
    args_.clear();
    args_sent_ = 0;
    have_args_ = false;
    first_key_ = true;
  }

  // Not a call after all: everything since the opening marker is content.
  void abandon(std::vector<parse_event>& out) {
    emit_content(out, tentative_);
    tentative_.clear();
    mode_ = chatml_ ? mode::text : mode::plain;
  }

  void end_call(std::vector<parse_event>& out) {
    if (!have_args_) args_ = "{}";
    flush_args(out);
    out.push_back({parse_event::kind::call_end, calls_.size(), {}});
    calls_.push_back({"", name_, args_});
    confirmed_ = false;
    after_call_ = true;
  }

  void flush_args(std::vector<parse_event>& out) {
    if (!confirmed_ || args_sent_ == args_.size()) return;
    out.push_back({parse_event::kind::call_arguments, calls_.size(), args_.substr(args_sent_)});
    args_sent_ = args_.size();
  }

  // One character at a time through the {"name": ..., "arguments": ...} envelope.
  bool scan_envelope(std::vector<parse_event>& out) {
    std::size_t i = 0;
    bool done = false;
    for (; i < pending_.size() && !done && mode_ == mode::envelope; ++i) {
      const char c = pending_[i];
      if (!confirmed_) tentative_ += c;
      switch (st_) {
        case env::open:
          if (is_ws(c)) break;
          if (c != '{') { abandon_at(out, i); return true; }
          st_ = env::key_or_close;
          break;
        case env::key_or_close:
        case env::comma_or_close:
          if (is_ws(c)) break;
          if (c == '}') {
            if (!confirmed_) { abandon_at(out, i); return true; }
            end_call(out);
            mode_ = mode::after;
            after_matched_ = 0;
            done = true;
            break;
          }
          if (st_ == env::comma_or_close) {
            if (c != ',') { malformed(out, i); return true; }
            st_ = env::key_or_close;
            break;
          }
          if (c != '"') { malformed(out, i); return true; }
          token_ = "\"";
          st_ = env::key;
          break;
        case env::key:
          token_ += c;
          if (string_closed()) {
            if (!decode_token(key_)) { malformed(out, i); return true; }
            if (first_key_ && key_ != "name" && key_ != "arguments" && key_ != "parameters") { abandon_at(out, i); return true; }
            first_key_ = false;
            st_ = env::colon;
          }
          break;
        case env::colon:
          if (is_ws(c)) break;
          if (c != ':') { malformed(out, i); return true; }
          st_ = env::value;
          break;
        case env::value:
          if (is_ws(c)) break;
          if (key_ == "name") {
            if (c != '"') { malformed(out, i); return true; }
            token_ = "\"";
            st_ = env::name_value;
          } else {
            raw_depth_ = 0;
            raw_in_str_ = raw_esc_ = false;
            raw_scalar_ = c != '{' && c != '[' && c != '"';
            arguments_value_ = key_ == "arguments" || key_ == "parameters";
            if (arguments_value_) {
              args_.clear();
              have_args_ = true;
            }
            st_ = env::raw_value;
            raw_char(c);
          }
          break;
        case env::name_value:
          token_ += c;
          if (string_closed()) {
            if (!decode_token(name_)) { malformed(out, i); return true; }
            confirmed_ = true;
            tentative_.clear();
            out.push_back({parse_event::kind::call_begin, calls_.size(), name_});
            flush_args(out);
            st_ = env::comma_or_close;
          }
          break;
        case env::raw_value:
          if (raw_scalar_ && (c == ',' || c == '}' || is_ws(c))) {
            st_ = env::comma_or_close;
            --i;  // the delimiter belongs to the envelope
            if (!confirmed_) tentative_.pop_back();
            break;
          }
          raw_char(c);
          break;
      }
    }
    pending_.erase(0, i);
    flush_args(out);
    return done || mode_ != mode::envelope;
  }

  void raw_char(char c) {
    if (arguments_value_) args_ += c;
    if (raw_in_str_) {
      if (raw_esc_) raw_esc_ = false;
      else if (c == '\\') raw_esc_ = true;
      else if (c == '"') raw_in_str_ = false;
    } else if (c == '"') {
      raw_in_str_ = true;
    } else if (c == '{' || c == '[') {
      ++raw_depth_;
    } else if (c == '}' || c == ']') {
      --raw_depth_;
    }
    if (!raw_scalar_ && raw_depth_ == 0 && !raw_in_str_) st_ = env::comma_or_close;
  }

  bool decode_token(std::string& to) const {
    try {
      to = json::parse(token_).as_string();
      return true;
    } catch (const json::parse_error&) {
      return false;
    }
  }

  bool string_closed() const noexcept {
    if (token_.size() < 2 || token_.back() != '"') return false;
    std::size_t backslashes = 0;
    for (std::size_t k = token_.size() - 1; k-- > 1 && token_[k] == '\\';) ++backslashes;
    return backslashes % 2 == 0;
  }

  // pending_[i] is not part of an envelope: before the name, the whole thing is content.
  void abandon_at(std::vector<parse_event>& out, std::size_t i) {
    pending_.erase(0, i + 1);
    abandon(out);
  }
  // Broken envelope after the name: the call ends there; the rest is content.
  void malformed(std::vector<parse_event>& out, std::size_t i) {
    if (!confirmed_) {
      abandon_at(out, i);
      return;
    }
    pending_.erase(0, i);
    end_call(out);
    mode_ = chatml_ ? mode::text : mode::plain;
  }

  // After an envelope: chatml expects "</tool_call>" (after optional whitespace); Llama may
  // continue with another envelope.
  bool scan_after(std::vector<parse_event>& out, bool last) {
    static constexpr std::string_view close = "</tool_call>", py_end = "<|python_end|>";
    std::size_t i = 0;
    if (chatml_) {
      while (i < pending_.size()) {
        if (after_matched_ == 0 && is_ws(pending_[i])) {
          ++i;
          continue;
        }
        if (pending_[i] != close[after_matched_]) {
          emit_content(out, close.substr(0, after_matched_));  // a partial "</tool_call>" was text
          pending_.erase(0, i);
          mode_ = mode::text;
          after_call_ = false;
          return true;
        }
        ++i;
        if (++after_matched_ == close.size()) {
          pending_.erase(0, i);
          mode_ = mode::text;
          return true;
        }
      }
      pending_.clear();
      return false;
    }
    while (i < pending_.size() && (is_ws(pending_[i]) || pending_[i] == ';')) ++i;
    const std::string_view rest = std::string_view(pending_).substr(i);
    if (rest.starts_with(py_end)) {
      pending_.erase(0, i + py_end.size());
      return true;
    }
    if (rest.empty() || (!last && py_end.starts_with(rest))) {
      pending_.erase(0, rest.empty() ? i : 0);
      return false;
    }
    const char next = rest[0];
    pending_.erase(0, i);
    if (next == '{') {
      tentative_.clear();
      begin_envelope();
    } else {
      mode_ = mode::plain;
    }
    return true;
  }

  bool chatml_;
  mode mode_;
  std::string pending_;    // text not yet looked at
  std::string tentative_;  // text that opens a possible call, content if it is not one
  std::string content_;
  std::vector<tool_call> calls_;
  bool in_think_ = false;
  bool truncated_ = false;
  bool after_call_ = false;  // a call ended and no content has followed yet
  // Envelope state.
  env st_ = env::open;
  bool confirmed_ = false;  // the name is known: this is a call
  bool first_key_ = true;
  std::string token_, key_, name_, args_;
  std::size_t args_sent_ = 0;
  bool have_args_ = false, arguments_value_ = false;
  int raw_depth_ = 0;
  bool raw_in_str_ = false, raw_esc_ = false, raw_scalar_ = false;
  std::size_t after_matched_ = 0;
};

}  // namespace strata::chat
