// The tokenizer of a GGUF model: text <-> token ids exactly as llama.cpp's llama_tokenize /
// llama_token_to_piece / llama_detokenize (d32676d77) for SentencePiece ("llama") and byte-level
// BPE ("gpt2") vocabularies. Immutable after loading; copies share the loaded tables and may be
// used from several threads at once.
//
// Invalid UTF-8 input never fails: SentencePiece encodes the bytes as they are (byte tokens for
// whatever no token covers), BPE reads them as llama.cpp does (lenient_utf8.hpp: each byte that
// starts no sequence becomes U+FFFD), so such text does not decode back to the same bytes.
#pragma once
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/utf8.hpp"
#include "strata/gguf/keys.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/tokenizer/bpe.hpp"
#include "strata/tokenizer/byte_level.hpp"
#include "strata/tokenizer/clean_spaces.hpp"
#include "strata/tokenizer/lenient_utf8.hpp"
#include "strata/tokenizer/pre_tokenizer.hpp"
#include "strata/tokenizer/special_tokens.hpp"
#include "strata/tokenizer/spm.hpp"
#include "strata/tokenizer/string_index.hpp"
#include "strata/tokenizer/vocab.hpp"

namespace strata::tokenizer {

class tokenizer {
 public:
  static tokenizer from_gguf(const gguf::reader& r) { return tokenizer(std::make_shared<const state>(r)); }

  // llama_tokenize(text, add_special, parse_special): add_special adds BOS / EOS as the vocabulary
  // asks (so a text that itself starts with the BOS text gets two BOS when parse_special);
  // parse_special lets CONTROL tokens written in the text (e.g. "<|eot_id|>") match.
  std::vector<token_id> encode(std::string_view text, bool add_special, bool parse_special) const {
    std::vector<token_id> out;
    encode(text, add_special, parse_special, out);
    return out;
  }
  // Same, appending to `out`.
  void encode(std::string_view text, bool add_special, bool parse_special, std::vector<token_id>& out) const;

  // llama_detokenize(ids, remove_special, unparse_special = render_special). Throws strata::error
  // for an id outside the vocabulary.
  std::string decode(std::span<const token_id> ids, bool render_special = false, bool remove_special = false) const;

  // llama_token_to_piece(id, lstrip = 0, special): the bytes one token stands for; CONTROL and
  // UNKNOWN tokens are empty unless `special`. The view stays valid while any copy of this
  // tokenizer lives.
  std::string_view token_to_piece(token_id id, bool special) const {
    const vocab& v = s_->vocab;
    v.check(id);
    if (!special && v.has_attr(id, token_attr::control | token_attr::unknown)) return {};
    const auto i = std::size_t(id);
    return std::string_view(s_->pieces).substr(s_->piece_offsets[i], s_->piece_offsets[i + 1] - s_->piece_offsets[i]);
  }

  const vocab& vocabulary() const noexcept { return s_->vocab; }
  std::int32_t n_vocab() const noexcept { return s_->vocab.size(); }
  token_id bos() const noexcept { return s_->vocab.bos(); }
  token_id eos() const noexcept { return s_->vocab.eos(); }
  token_id eot() const noexcept { return s_->vocab.eot(); }
  bool is_eog(token_id id) const noexcept { return s_->vocab.is_eog(id); }
  bool add_bos() const noexcept { return s_->vocab.add_bos(); }
  bool add_eos() const noexcept { return s_->vocab.add_eos(); }

 private:
  // Everything loaded; heap-allocated once so the pointers between members stay valid.
  struct state {
    explicit state(const gguf::reader& r)
        : vocab(strata::tokenizer::vocab::from_gguf(r)), specials(vocab), pre(vocab.pre().type) {
      if (vocab.kind() == model_kind::spm) {
        spm.emplace(vocab);
      } else {
        const auto& merges = detail::with_key(r, gguf::keys::tok_merges, [&]() -> const std::vector<std::string_view>& {
          return r.at(gguf::keys::tok_merges).strings();
        });
        bpe = std::make_unique<bpe_model>(vocab, merges);
      }
      build_pieces();
    }
    void build_pieces();

    strata::tokenizer::vocab vocab;
    special_token_matcher specials;
    pre_tokenizer pre;
    std::optional<spm_model> spm;
    std::unique_ptr<bpe_model> bpe;
    std::string pieces;                      // token_to_piece(id, special = true), back to back
    std::vector<std::size_t> piece_offsets;  // n_vocab + 1
  };

  explicit tokenizer(std::shared_ptr<const state> s) : s_(std::move(s)) {}

  // Per-call working memory of the BPE path: split buffers, merge scratch, and a cache of the
  // pieces already encoded in this call (text repeats words; a cache hit skips the merges).
  struct bpe_session {
    static constexpr std::size_t max_cached_piece = 32;      // bytes
    static constexpr std::size_t max_cache_entries = 1u << 16;

    std::vector<text_piece> pieces, scratch;
    std::string bytes, regex_text;
    bpe_model::scratch merge;
    detail::string_index cached;            // piece bytes -> entry
    std::vector<std::uint32_t> cached_end;  // entry -> end of its ids in cached_ids
    std::vector<token_id> cached_ids;
  };
  void encode_bpe_text(std::string_view text, bpe_session& s, std::vector<token_id>& out) const;

  std::shared_ptr<const state> s_;
};

inline void tokenizer::state::build_pieces() {
  piece_offsets.reserve(std::size_t(vocab.size()) + 1);
  piece_offsets.push_back(0);
  for (token_id id = 0; id < vocab.size(); ++id) {
    const std::string_view t = vocab.text(id);
    const std::uint32_t a = vocab.attr(id);
    if (a & (token_attr::control | token_attr::unknown | token_attr::user_defined)) {
      pieces += t;
    } else if (a & token_attr::normal) {
      if (vocab.kind() == model_kind::spm) {
        for (std::size_t i = 0; i < t.size(); ++i) {  // U+2581 -> ' '
          if (t.compare(i, 3, "\xE2\x96\x81") == 0) {
            pieces += ' ';
            i += 2;
          } else {
            pieces += t[i];
          }
        }
      } else {
        // Byte-level spelling -> bytes; code points standing for no byte are spelled out the
        // way llama.cpp's llama_decode_text does.
        for (std::size_t i = 0; i < t.size();) {
          const char32_t cp = lenient_utf8::decode(t, i);
          if (const auto b = byte_level::cp_to_byte(cp)) {
            pieces += char(*b);
            continue;
          }
          std::string utf8;
          lenient_utf8::append(utf8, cp);
          pieces += "[UNK_BYTE_0x";
          for (const char c : utf8) {
            constexpr char hex[] = "0123456789abcdef";
            pieces += hex[static_cast<unsigned char>(c) >> 4];
            pieces += hex[static_cast<unsigned char>(c) & 15];
          }
          pieces += t;
          pieces += ']';
        }
      }
    } else if (a & token_attr::byte) {
      // "<0xXX>": llama.cpp reads the two hex digits after "<0x".
      const std::string hex(t.substr(std::min<std::size_t>(3, t.size()), 2));
      pieces += char(std::strtol(hex.c_str(), nullptr, 16));
    }
    piece_offsets.push_back(pieces.size());
  }
}

inline void tokenizer::encode(std::string_view text, bool add_special, bool parse_special,
                              std::vector<token_id>& out) const {
  const vocab& v = s_->vocab;
  std::vector<fragment> frags;
  s_->specials.partition(text, parse_special, frags);
  if (add_special && v.add_bos()) out.push_back(v.bos());

  if (v.kind() == model_kind::spm) {
    spm_model::scratch scratch;
    std::string escaped;
    bool prev_special = true;  // the first fragment gets the space prefix too
    for (const fragment& f : frags) {
      if (f.token != null_token) {
        out.push_back(f.token);
        prev_special = true;
        continue;
      }
      escaped.clear();
      if (v.add_space_prefix() && prev_special) escaped += "\xE2\x96\x81";
      for (const char c : text.substr(f.begin, f.end - f.begin)) {
        if (c == ' ') escaped += "\xE2\x96\x81";
        else escaped += c;
      }
      s_->spm->encode(escaped, out, scratch);
      prev_special = false;
    }
  } else {
    bpe_session session;
    for (const fragment& f : frags) {
      if (f.token != null_token) out.push_back(f.token);
      else encode_bpe_text(text.substr(f.begin, f.end - f.begin), session, out);
    }
  }

  if (add_special && v.add_eos()) out.push_back(v.eos());
}

inline void tokenizer::encode_bpe_text(std::string_view text, bpe_session& s, std::vector<token_id>& out) const {
  std::string_view subject = text;
  if (!utf8::is_valid(text)) {
    lenient_utf8::repair(text, s.bytes, s.regex_text);
    s_->pre.split(s.regex_text, s.pieces, s.scratch);
    subject = s.bytes;
  } else {
    s_->pre.split(text, s.pieces, s.scratch);
  }
  for (const text_piece p : s.pieces) {
    const std::string_view piece = subject.substr(p.begin, p.end - p.begin);
    if (piece.size() > bpe_session::max_cached_piece) {
      s_->bpe->encode(piece, out, s.merge);
      continue;
    }
    if (const std::uint32_t e = s.cached.find(piece); e != detail::string_index::npos) {
      const std::uint32_t b = e == 0 ? 0 : s.cached_end[e - 1];
      out.insert(out.end(), s.cached_ids.begin() + b, s.cached_ids.begin() + s.cached_end[e]);
      continue;
    }
    const std::size_t before = out.size();
    s_->bpe->encode(piece, out, s.merge);
    if (s.cached.size() < bpe_session::max_cache_entries) {
      s.cached.insert(piece);
      s.cached_ids.insert(s.cached_ids.end(), out.begin() + std::ptrdiff_t(before), out.end());
      s.cached_end.push_back(std::uint32_t(s.cached_ids.size()));
    }
  }
}

inline std::string tokenizer::decode(std::span<const token_id> ids, bool render_special, bool remove_special) const {
  const vocab& v = s_->vocab;
  for (const token_id id : ids) v.check(id);
  bool remove_space = v.add_space_prefix();
  if (remove_special && v.add_bos() && !ids.empty() && ids.front() == v.bos()) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && v.add_eos() && !ids.empty() && ids.back() == v.eos()) ids = ids.first(ids.size() - 1);

  std::string out;
  for (const token_id id : ids) {
    std::string_view p = token_to_piece(id, render_special);
    if (remove_space && !p.empty() && p.front() == ' ') p.remove_prefix(1);
    remove_space = false;
    out += p;
  }
  if (v.clean_spaces()) clean_spaces(out);
  return out;
}

}  // namespace strata::tokenizer
