// Generation for strata-run: prompt (-p/-f/--tokens) -> prefill -> sample until a stop
// condition, streaming text, optionally constrained by a GBNF grammar or a JSON Schema;
// --dump-logits writes every prompt position's logits; -cnv runs an interactive chat using the
// model's chat template; a timing summary goes to stderr.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>

#include "log.hpp"
#include "modes.hpp"
#include "progress.hpp"
#include "strata/chat/template.hpp"
#include "strata/core/error.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/grammar/json_schema.hpp"
#include "strata/grammar/matcher.hpp"
#include "strata/grammar/token_trie.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/sampling/all.hpp"
#include "strata/tokenizer/streaming_detokenizer.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::app {
namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::string read_file(const std::string& path, const char* what = "prompt file") {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw error(path + ": cannot open " + what);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The output constraint of --grammar, --grammar-file, --json-schema or --json-schema-file,
// compiled over the model's vocabulary (null: none). Errors name the flag and the place.
std::shared_ptr<grammar::automaton> output_grammar(const run_options& opt, const tokenizer::tokenizer& tok) {
  const int given = !opt.grammar.empty() + !opt.grammar_file.empty() + !opt.json_schema.empty() +
                    !opt.json_schema_file.empty();
  if (given > 1) throw error("give only one of --grammar, --grammar-file, --json-schema and --json-schema-file");
  if (given == 0) return nullptr;
  std::string gbnf;
  std::string flag;
  if (!opt.grammar.empty() || !opt.grammar_file.empty()) {
    flag = !opt.grammar.empty() ? "--grammar" : "--grammar-file " + opt.grammar_file;
    gbnf = !opt.grammar.empty() ? opt.grammar : read_file(opt.grammar_file, "grammar file");
  } else {
    flag = !opt.json_schema.empty() ? "--json-schema" : "--json-schema-file " + opt.json_schema_file;
    const std::string schema =
        !opt.json_schema.empty() ? opt.json_schema : read_file(opt.json_schema_file, "JSON Schema file");
    try {
      auto g = grammar::json_schema_to_gbnf(schema);
      for (const auto& w : g.warnings) opt.log->warn("run", flag + ": " + w);
      gbnf = std::move(g.gbnf);
    } catch (const grammar::schema_error& e) {
      throw error(flag + ": " + e.what());
    }
  }
  try {
    return grammar::compile_gbnf(gbnf, std::make_shared<const grammar::token_trie>(grammar::token_trie::from_tokenizer(tok)));
  } catch (const grammar::grammar_error& e) {
    throw error(flag + ": " + e.what());
  }
}

sampling::sampler_params sampler_params_from(const run_options& opt) {
  sampling::sampler_params p;
  p.temperature = opt.temp;
  p.top_k = opt.top_k;
  p.top_p = opt.top_p;
  p.min_p = opt.min_p;
  p.repeat_penalty = opt.repeat_penalty;
  p.repeat_last_n = opt.repeat_last_n;
  p.presence_penalty = opt.presence_penalty;
  p.frequency_penalty = opt.frequency_penalty;
  p.seed = opt.seed;
  return p;
}

std::vector<std::int32_t> eog_ids(const tokenizer::tokenizer& tok) {
  std::vector<std::int32_t> out;
  for (std::int32_t id = 0; id < tok.n_vocab(); ++id)
    if (tok.is_eog(id)) out.push_back(id);
  return out;
}

struct timings {
  std::size_t prompt_tokens = 0, reused = 0, gen_tokens = 0;
  double prompt_s = 0, gen_s = 0;
  void print(const logger& log) const {
    char buf[256];
    std::snprintf(buf, sizeof buf, "prompt %zu tokens (%zu reused) in %.3f s = %.2f t/s", prompt_tokens, reused,
                  prompt_s, prompt_s > 0 ? double(prompt_tokens - reused) / prompt_s : 0.0);
    log.info("run", buf);
    std::snprintf(buf, sizeof buf, "generated %zu tokens in %.3f s = %.2f t/s", gen_tokens, gen_s,
                  gen_s > 0 ? double(gen_tokens) / gen_s : 0.0);
    log.info("run", buf);
  }
};

// The disk tier's counters since load (CPU blocks streamed from the model file), when it ran.
void print_disk_tier(const rt::model& m, const logger& log) {
  const rt::model::disk_counters c = m.disk_tier();
  if (!c.blocks) return;
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "disk tier: %u blocks, %.1f MB read per token (%llu steps), reads %.3f s at %.2f GB/s, compute stalled "
                "%.3f s waiting on the drive (%llu of %llu block starts)",
                c.blocks, c.bytes_per_token() / 1e6, (unsigned long long)c.steps, c.read_seconds, c.read_gbps(),
                c.stall_seconds, (unsigned long long)c.stalls, (unsigned long long)(c.steps * c.blocks));
  log.info("run", buf);
}

// Samples from `logits` until a stop condition; streams text to stdout; returns generated ids.
// `eog`: end-of-generation ids (computed once per run, empty with --ignore-eos). `gm`: the output
// grammar's matcher, if any (generation also ends once the grammar admits nothing more).
std::vector<std::int32_t> generate(rt::session& s, const tokenizer::tokenizer& tok, sampling::sampler& smp,
                                   std::span<const float> first_logits, std::int32_t n_predict,
                                   const std::vector<std::int32_t>& eog, timings& tm, const logger& log,
                                   grammar::matcher* gm = nullptr) {
  sampling::stop_conditions stop(eog, n_predict, {});
  tokenizer::streaming_detokenizer detok(tok);
  std::vector<std::int32_t> ids;
  std::span<const float> logits = first_logits;
  const auto t0 = clock_type::now();
  const std::uint32_t capacity = s.get_model().kv().capacity();
  // Plain greedy (no penalties or biases): the backend returns the argmax itself, so the logits
  // never travel (on the GPU: 4 bytes per token instead of the vocabulary).
  // A grammar masks the logits, so they must come back.
  const bool backend_argmax = smp.plain_greedy() && !gm;
  std::int32_t next = -1;
  while (!stop.finished()) {
    const std::int32_t t = next >= 0 ? next : gm ? smp.sample(logits, *gm) : smp.sample(logits);
    if (gm) gm->accept(t);
    smp.accept(t);
    ids.push_back(t);
    const auto st = stop.on_token(t, stop.is_eog(t) ? std::string() : detok.feed(t));
    std::cout << st.emit << std::flush;
    if (st.reason != sampling::stop_reason::none) break;
    if (gm && gm->finished()) break;  // complete: nothing but the end may follow
    if (s.n_past() >= capacity) {
      std::cout << std::flush;
      log.warn("run", "context full (" + std::to_string(capacity) + " tokens), stopping");
      break;
    }
    if (backend_argmax) next = s.decode_argmax(t);
    else logits = s.decode(t);
  }
  std::cout << stop.finish(detok.flush()).emit << std::flush;
  tm.gen_s += seconds_since(t0);
  tm.gen_tokens += ids.size();
  return ids;
}

void write_logits(const std::string& path, std::span<const float> logits) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw error(path + ": cannot open for writing");
  f.write(reinterpret_cast<const char*>(logits.data()), std::streamsize(logits.size() * sizeof(float)));
  if (!f) throw error(path + ": write failed");
}

int run_chat(const run_options& opt, rt::model& m, const tokenizer::tokenizer& tok, sampling::sampler& smp,
             const std::shared_ptr<grammar::automaton>& constraint) {
  chat::template_kind kind = chat::detect(m.gguf());
  if (!opt.chat_template.empty()) {
    const auto k = chat::kind_from_name(opt.chat_template);
    if (!k) throw error("--chat-template: unknown template '" + opt.chat_template + "' (chatml, qwen3, llama3, llama4, generic)");
    kind = *k;
  }
  opt.log->info("run", "chat template " + std::string(chat::name(kind)) + "; type a message, /exit or end of input to quit");
  std::vector<chat::message> msgs;
  if (!opt.system_prompt.empty()) msgs.push_back({"system", opt.system_prompt, std::nullopt});
  rt::session s(m);
  timings tm;
  const auto eog = eog_ids(tok);
  std::string line;
  while (true) {
    std::cout << "\n> " << std::flush;
    if (!std::getline(std::cin, line) || line == "/exit") break;
    if (line.empty()) continue;
    msgs.push_back({"user", line, std::nullopt});
    const std::string text = chat::render(kind, msgs, {.add_generation_prompt = true, .enable_thinking = !opt.no_think});
    const bool adds_bos = tok.add_bos();
    const auto prompt = tok.encode(chat::prompt_for_tokenizer(text, kind, adds_bos), true, true);
    if (prompt.size() >= m.kv().capacity()) throw error("conversation no longer fits the context size");
    const auto t0 = clock_type::now();
    const auto logits = s.prefill(prompt);
    tm.prompt_s += seconds_since(t0);
    tm.prompt_tokens += prompt.size();
    tm.reused += s.reused_tokens();
    std::optional<grammar::matcher> gm;  // every reply follows the grammar from its start
    if (constraint) gm.emplace(constraint);
    const auto ids = generate(s, tok, smp, logits, opt.n_predict, eog, tm, *opt.log, gm ? &*gm : nullptr);
    std::string reply = tok.decode(ids);
    // The reply as the template will see it next turn: without the end-of-turn token text.
    msgs.push_back({"assistant", reply, std::nullopt});
  }
  std::cout << "\n" << std::flush;
  tm.print(*opt.log);
  return 0;
}

}  // namespace

int run_generate(const run_options& opt) {
  const int sources = !opt.prompt.empty() + !opt.prompt_file.empty() + !opt.tokens.empty();
  if (sources > 1) throw error("give only one of -p, -f and --tokens");
  const rt::backend_kind backend = rt::parse_backend_kind(opt.backend);

  // The tokenizer reads the same file the model maps; both are zero-copy views.
  const gguf::file f(opt.model);
  const auto tok = tokenizer::tokenizer::from_gguf(f.gguf());
  std::vector<std::int32_t> prompt;
  std::string prompt_text;
  if (!opt.tokens.empty()) {
    prompt = parse_id_list(opt.tokens, "--tokens");
    for (auto id : prompt)
      if (id >= tok.n_vocab())
        throw error("--tokens: id " + std::to_string(id) + " out of range (vocabulary size " +
                    std::to_string(tok.n_vocab()) + ")");
  } else if (!opt.conversation) {
    prompt_text = !opt.prompt_file.empty() ? read_file(opt.prompt_file) : opt.prompt;
    prompt = tok.encode(prompt_text, /*add_special=*/true, /*parse_special=*/true);
  }
  if (!opt.conversation && prompt.empty()) throw error("empty prompt: give -p, -f or --tokens");
  const auto constraint = output_grammar(opt, tok);  // before the model loads: a bad grammar fails fast
  if (constraint && !opt.dump_logits.empty() && !(opt.n_predict_set && opt.n_predict > 0))
    throw error("--dump-logits generates nothing unless -n is given: a grammar would constrain no output");

  rt::engine_options eo;
  eo.threads = opt.threads;
  eo.backend = backend;
  eo.device = opt.device;
  eo.n_gpu_layers = opt.n_gpu_layers;
  apply(opt.tiers, eo);
  eo.n_ctx = opt.n_ctx;
  eo.n_batch = opt.n_batch;
  const auto kv_types = kv::parse_kv_cache_types(opt.kv_type, opt.kv_type_k, opt.kv_type_v);
  eo.type_k = kv_types.k;
  eo.type_v = kv_types.v;
  eo.kv_window = opt.kv_window;
  const bool dump = !opt.dump_logits.empty();
  if (dump) {
    // One batch for the whole prompt, every row's logits out (as llama.cpp produced the fixtures).
    eo.n_batch = std::max<std::uint32_t>(eo.n_batch, std::uint32_t(prompt.size()));
    eo.max_outputs = std::uint32_t(prompt.size());
  } else {
    eo.max_outputs = 1;
  }
  eo.progress = progress_sink(*opt.log, "run");  // Vulkan upload/pipelines, long prefills
  auto m = rt::model::load(opt.model, eo);
  const std::uint32_t ctx = m->kv().capacity();
  if (prompt.size() > ctx)
    throw error("prompt of " + std::to_string(prompt.size()) + " tokens is longer than the context size " +
                std::to_string(ctx) + " (raise -c)");
  opt.log->info("run", std::string(m->hparams().arch) + ", " + std::to_string(m->hparams().n_layer) +
                           " layers, context " + std::to_string(ctx) + ", " + m->backend_description());
  if (const std::string st = m->startup_report(); !st.empty()) opt.log->info("run", st);

  auto params = sampler_params_from(opt);
  sampling::sampler smp(params, std::int32_t(m->hparams().n_vocab));
  opt.log->info("run", "seed " + std::to_string(smp.seed()));
  if (opt.conversation) return run_chat(opt, *m, tok, smp, constraint);

  rt::session s(*m);
  timings tm;
  tm.prompt_tokens = prompt.size();
  if (!opt.no_display_prompt && !prompt_text.empty()) std::cout << prompt_text << std::flush;
  const auto t0 = clock_type::now();
  std::span<const float> logits;
  std::vector<float> all;
  if (dump) {
    logits = s.prefill(prompt, &all);
    write_logits(opt.dump_logits, all);
    opt.log->info("run", "wrote " + std::to_string(prompt.size()) + " x " + std::to_string(m->hparams().n_vocab) +
                             " logits to " + opt.dump_logits);
  } else {
    logits = s.prefill(prompt);
  }
  tm.prompt_s = seconds_since(t0);
  std::vector<std::int32_t> ids;
  const bool go_on = dump ? (opt.n_predict_set && opt.n_predict > 0) : opt.n_predict != 0;
  std::optional<grammar::matcher> gm;
  if (constraint) gm.emplace(constraint);
  if (go_on)
    ids = generate(s, tok, smp, logits, opt.n_predict, opt.ignore_eos ? std::vector<std::int32_t>{} : eog_ids(tok), tm,
                   *opt.log, gm ? &*gm : nullptr);
  std::cout << "\n" << std::flush;
  tm.print(*opt.log);
  print_disk_tier(*m, *opt.log);
  if (opt.print_ids) {
    std::ostringstream o;
    o << "[";
    for (std::size_t i = 0; i < ids.size(); ++i) o << (i ? ", " : "") << ids[i];
    o << "]";
    std::cout << o.str() << "\n";
  }
  return 0;
}

}  // namespace strata::app
