// Runs a GGUF model on the CPU backend with the library API: load, tokenize, greedy-decode 16
// tokens, print the text.
//   run_model MODEL.gguf [PROMPT]
#include <algorithm>
#include <cstdio>
#include <exception>
#include <string>

#include <strata/runtime/engine.hpp>
#include <strata/tokenizer/tokenizer.hpp>

int main(int argc, char** argv) try {
  if (argc < 2) return std::fprintf(stderr, "usage: %s MODEL.gguf [PROMPT]\n", argv[0]), 2;
  const auto model = strata::rt::model::load(argv[1], {.backend = strata::rt::backend_kind::cpu, .n_ctx = 512});
  const auto tok = strata::tokenizer::tokenizer::from_gguf(model->gguf());
  const std::string prompt = argc > 2 ? argv[2] : "Once upon a time";

  strata::rt::session s(*model);
  auto logits = s.prefill(tok.encode(prompt, /*add_special=*/true, /*parse_special=*/false));
  std::string text;
  for (int i = 0; i < 16; ++i) {
    const auto next = std::int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.is_eog(next)) break;
    text += tok.token_to_piece(next, /*special=*/false);
    logits = s.decode(next);
  }
  std::printf("%s%s\n", prompt.c_str(), text.c_str());
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
