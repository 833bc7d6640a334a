// The space clean-up llama.cpp's detokenizer applies for vocabularies with clean_spaces (Llama 3,
// GPT-2 and the "default" pre-tokenizer; not SentencePiece, Qwen2 or Llama 4), d32676d77
// llama_vocab::impl::detokenize. Three passes over the bytes:
//   1. drop a space before '?', '!', '.', ','
//   2. " ' " -> "'"  (both spaces dropped; the dropped right space cannot start another match)
//   3. drop the space before "'s", "'m", "'re", "'ve"  (kept before "'t", "'d", "'ll")
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace strata::tokenizer {

inline void clean_spaces(std::string& s) {
  const auto pass = [&](auto&& step) {
    const std::size_t n = s.size();
    if (n == 0) return;
    std::size_t total = 1;  // s[0] always survives the scan (it may be dropped retroactively)
    for (std::size_t i = 1; i < n; ++i) step(i, n, total);
    s.resize(total);
  };
  pass([&](std::size_t& i, std::size_t, std::size_t& total) {
    const char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --total;
    s[total++] = x;
  });
  pass([&](std::size_t& i, std::size_t n, std::size_t& total) {
    const char x = s[i];
    if (x == '\'' && i + 1 < n && s[i - 1] == ' ' && s[i + 1] == ' ') {
      --total;
      s[++i] = '\0';  // consumed; also stops it counting as the next char's left space
    }
    s[total++] = x;
  });
  pass([&](std::size_t& i, std::size_t n, std::size_t& total) {
    const char x = s[i];
    if (s[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = s[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --total;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = s[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --total;
      }
    }
    s[total++] = x;
  });
}

// True when clean_spaces(a + b) == clean_spaces(a) + clean_spaces(b) is guaranteed for a cut
// before s[cut]: the three bytes before it and the byte at it are none of " '?!.,", so no pass
// can act across the cut (each looks at most one byte back and two ahead, and only ever drops
// spaces). Used to finalize streamed text early.
inline bool is_clean_cut(std::string_view s, std::size_t cut) noexcept {
  if (cut < 3 || cut >= s.size()) return false;
  for (std::size_t i = cut - 3; i <= cut; ++i) {
    const char c = s[i];
    if (c == ' ' || c == '\'' || c == '?' || c == '!' || c == '.' || c == ',') return false;
  }
  return true;
}

}  // namespace strata::tokenizer
