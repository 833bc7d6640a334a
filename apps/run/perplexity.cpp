// strata-run --perplexity FILE: llama-perplexity's measurement (tools/perplexity, default mode).
// The file is tokenized as one text (BOS per the GGUF, special-token text NOT recognised), cut into
// chunks of n_ctx tokens (a shorter tail is dropped); each chunk is evaluated from an empty cache
// with its first token replaced by BOS when the vocabulary adds one, and the logits of positions
// n_ctx/2 .. n_ctx-2 are scored against the next token. Output: the running perplexity after
// each chunk ("[1]12.3456,[2]...") and "Final estimate: PPL = X +/- Y", as llama-perplexity prints.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <sstream>

#include "modes.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::app {
namespace {

// -log p(tok) under softmax(logits): float max, double sum of expf, as llama-perplexity.
double nll_of(std::span<const float> logits, std::int32_t tok) {
  float max_logit = logits[0];
  for (float l : logits) max_logit = std::max(max_logit, l);
  double sum_exp = 0.0;
  for (float l : logits) sum_exp += std::exp(l - max_logit);
  return -(double(logits[std::size_t(tok)] - max_logit) - std::log(sum_exp));
}

}  // namespace

int run_perplexity(const run_options& opt) {
  std::ifstream in(opt.perplexity_file, std::ios::binary);
  if (!in) throw error(opt.perplexity_file + ": cannot open text file for --perplexity");
  std::ostringstream text;
  text << in.rdbuf();

  const gguf::file f(opt.model);
  const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  const auto tokens = tok.encode(text.str(), /*add_special=*/true, /*parse_special=*/false);
  const std::uint32_t n_ctx = opt.n_ctx_set ? opt.n_ctx : 512;  // llama-perplexity's default
  if (n_ctx < 4) throw error("--perplexity: context size " + std::to_string(n_ctx) + " is too small (at least 4)");
  if (tokens.size() < 2 * std::size_t(n_ctx))
    throw error(opt.perplexity_file + ": tokenizes to only " + std::to_string(tokens.size()) +
                " tokens; a context of " + std::to_string(n_ctx) + " needs at least " + std::to_string(2 * n_ctx));
  std::size_t n_chunk = tokens.size() / n_ctx;
  if (opt.n_chunks >= 0) n_chunk = std::min(n_chunk, std::size_t(opt.n_chunks));

  rt::engine_options eo;
  eo.threads = opt.threads;
  eo.backend = rt::parse_backend_kind(opt.backend);
  eo.device = opt.device;
  eo.n_gpu_layers = opt.n_gpu_layers;
  apply(opt.tiers, eo);
  eo.n_ctx = n_ctx;
  eo.n_batch = n_ctx;  // one step per chunk; the numbers do not depend on it
  eo.max_outputs = n_ctx;
  const auto kv_types = kv::parse_kv_cache_types(opt.kv_type, opt.kv_type_k, opt.kv_type_v);
  eo.type_k = kv_types.k;
  eo.type_v = kv_types.v;
  eo.kv_window = opt.kv_window;
  auto m = rt::model::load(opt.model, eo);
  const std::size_t n_vocab = m->hparams().n_vocab;
  std::cerr << "perplexity: " << tokens.size() << " tokens, calculating perplexity over " << n_chunk
            << " chunks, n_ctx=" << n_ctx << ", " << m->backend_description() << "\n";

  rt::session s(*m);
  const std::size_t first = n_ctx / 2;
  double nll = 0.0, nll2 = 0.0;
  std::size_t count = 0;
  std::vector<std::int32_t> chunk(n_ctx);
  std::vector<float> logits;
  for (std::size_t c = 0; c < n_chunk; ++c) {
    const auto* begin = tokens.data() + c * n_ctx;
    chunk.assign(begin, begin + n_ctx);
    if (tok.add_bos()) chunk[0] = tok.bos();
    s.clear();
    s.prefill(chunk, &logits);
    for (std::size_t j = first; j + 1 < n_ctx; ++j) {
      const double v = nll_of(std::span<const float>(logits).subspan(j * n_vocab, n_vocab), begin[j + 1]);
      nll += v;
      nll2 += v * v;
      ++count;
    }
    std::printf("[%zu]%.4lf,", c + 1, std::exp(nll / double(count)));
    std::fflush(stdout);
  }
  std::printf("\n");
  const double mean = nll / double(count);
  const double var = nll2 / double(count) - mean * mean;
  const double ppl = std::exp(mean);
  std::printf("Final estimate: PPL = %.4lf +/- %.5lf\n", ppl, var > 0 ? std::sqrt(var / double(count - 1)) * ppl : 0.0);
  return 0;
}

}  // namespace strata::app
