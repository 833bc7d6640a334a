// Tokenizer throughput: encode (and decode) MB/s over a few MB of deterministic mixed text
// (English-like prose, code, CJK, emoji, numbers) for the three fixture vocabularies.
// Usage: tokenizer_bench [vocab-dir] [megabytes]   (default: tests/fixtures/tokenizer, 4)
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "strata/gguf/reader.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace {

using clock_type = std::chrono::steady_clock;

void append_utf8(std::string& s, char32_t cp) { strata::tokenizer::lenient_utf8::append(s, cp); }

std::string mixed_text(std::size_t bytes, std::uint32_t seed) {
  static constexpr std::string_view words[] = {
      "the", "of", "and", "to", "in", "a", "is", "that", "for", "it", "as", "was", "with", "be", "by", "on",
      "not", "he", "I", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an", "had", "they",
      "you", "were", "their", "one", "all", "we", "can", "her", "has", "there", "been", "if", "more", "when",
      "will", "would", "who", "so", "no", "tokenizer", "inference", "quantization", "bicycle", "history",
      "village", "mountain", "government", "understanding", "Strata", "don't", "it's", "we're", "London"};
  static constexpr std::string_view code[] = {
      "for (int i = 0; i < n; ++i) {\n    sum += x[i] * y[i];\n}\n",
      "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
      "#include <vector>\nstd::vector<float> v(1024, 0.0f);\n",
      "if (err != nil) {\n\treturn fmt.Errorf(\"read %s: %w\", path, err)\n}\n",
      "SELECT name, COUNT(*) FROM users WHERE age > 30 GROUP BY name;\n"};
  static constexpr char32_t emoji[] = {0x1F600, 0x1F680, 0x1F999, 0x2764, 0x1F44D, 0x1F3FD, 0x1F1E9, 0x1F1EA};
  std::mt19937 rng(seed);
  std::string s;
  s.reserve(bytes + 256);
  while (s.size() < bytes) {
    const unsigned kind = rng() % 100;
    if (kind < 70) {  // a prose sentence
      const int n = 5 + int(rng() % 15);
      for (int i = 0; i < n; ++i) {
        if (i) s += ' ';
        s += words[rng() % std::size(words)];
      }
      s += (rng() % 5 == 0) ? "?\n" : ". ";
    } else if (kind < 82) {
      s += code[rng() % std::size(code)];
    } else if (kind < 92) {  // CJK run from the common ideograph block and kana
      const int n = 4 + int(rng() % 20);
      for (int i = 0; i < n; ++i) append_utf8(s, rng() % 4 ? 0x4E00 + rng() % 0x2000 : 0x3041 + rng() % 0x50);
      s += "\xE3\x80\x82";  // 。
    } else if (kind < 96) {
      for (int i = 0, n = 1 + int(rng() % 4); i < n; ++i) append_utf8(s, emoji[rng() % std::size(emoji)]);
      s += ' ';
    } else {
      s += std::to_string(rng()) + "." + std::to_string(rng() % 1000) + " ";
    }
  }
  return s;
}

double seconds_since(clock_type::time_point t) {
  return std::chrono::duration<double>(clock_type::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  const fs::path dir = argc > 1 ? fs::path(argv[1])
                                : fs::path(__FILE__).parent_path() / ".." / ".." / "tests" / "fixtures" / "tokenizer";
  const double mb = argc > 2 ? std::atof(argv[2]) : 4.0;
  const std::string text = mixed_text(std::size_t(mb * 1024 * 1024), 1234);
  const double text_mb = double(text.size()) / (1024.0 * 1024.0);

  std::printf("text: %.2f MiB of mixed prose / code / CJK / emoji / numbers\n\n", text_mb);
  std::printf("| vocab | load ms | tokens | bytes/token | encode MiB/s | decode MiB/s |\n");
  std::printf("|---|---:|---:|---:|---:|---:|\n");
  for (const char* name : {"ggml-vocab-llama-spm", "ggml-vocab-llama-bpe", "ggml-vocab-qwen3"}) {
    const fs::path path = dir / (std::string(name) + ".gguf");
    if (!fs::exists(path)) {
      std::printf("| %s | missing: %s |\n", name, path.string().c_str());
      continue;
    }
    auto t = clock_type::now();
    strata::gguf::file f(path);
    const auto tok = strata::tokenizer::tokenizer::from_gguf(f.gguf());
    const double load = seconds_since(t);

    std::vector<strata::tokenizer::token_id> ids;
    double enc = 1e9;
    for (int rep = 0; rep < 3; ++rep) {  // best of three
      ids.clear();
      t = clock_type::now();
      tok.encode(text, false, false, ids);
      enc = std::min(enc, seconds_since(t));
    }
    t = clock_type::now();
    const std::string back = tok.decode(ids);
    const double dec = seconds_since(t);
    std::printf("| %s | %.0f | %zu | %.2f | %.1f | %.1f |\n", name, load * 1e3, ids.size(),
                double(text.size()) / double(ids.size()), text_mb / enc, text_mb / dec);
    if (back.size() < text.size() / 2) std::printf("  (decode returned %zu bytes?)\n", back.size());
  }
}
