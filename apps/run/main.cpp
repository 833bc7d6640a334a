// strata-run: generate, chat, dump logits, tokenize and inspect GGUF models. Flags follow
// llama.cpp's (llama-cli, llama-tokenize) where an equivalent exists; the shared ones come from
// apps/common/cli.hpp.
#include <exception>
#include <string>

#include "cli.hpp"
#include "modes.hpp"
#include "strata/core/error.hpp"
#include "strata/runtime/default_model.hpp"

int main(int argc, char** argv) {
  using namespace strata::app;
  cli c({"strata-run",
         "[-m FILE] [options]",
         "Run and inspect GGUF models: generate text from a prompt, chat with the model's template, dump "
         "every prompt position's logits, measure perplexity, tokenize, or print the model's architecture "
         "and tensors. Without -m, the bundled demo model (models/strata-demo.gguf).",
         {{"generate 64 tokens greedily", "strata-run -m model.gguf -p \"Once upon a time\" -n 64 --temp 0"},
          {"chat with a system prompt", "strata-run -m model.gguf -cnv -sys \"You are terse.\""},
          {"3-bit TurboQuant KV cache", "strata-run -m model.gguf -p \"Hello\" --kv-type tq3"},
          {"the first 20 layers on the GPU", "strata-run -m model.gguf -p \"Hello\" --backend vulkan -ngl 20"},
          {"a MoE model in 12 GiB of GPU memory, placed by the planner",
           "strata-run -m model.gguf -p \"Hello\" --backend vulkan --gpu-budget 12G --fit"},
          {"perplexity of a text, as llama-perplexity", "strata-run -m model.gguf --perplexity wiki.test.raw -c 512"},
          {"model information as JSON", "strata-run -m model.gguf --info --json"}}});
  auto& app = c.app();
  run_options o;
  backend_options bo;
  kv_options ko;
  log_options lo;
  add_model_option(app, o.model, "GGUF model file (default: the bundled demo model, models/strata-demo.gguf)");
  app.add_flag("--info", o.info, "print architecture, hyper-parameters, tokenizer and tensor table")->group(group::model);
  app.add_flag("--json", o.json, "with --info or --plan: print one JSON object instead of text")->group(group::model);
  auto* tk = app.add_option("--tokenize", o.tokenize_text, "print the token ids of TEXT as a JSON array (BOS/EOS as the GGUF says)")
                 ->type_name("TEXT")->group(group::model);
  auto* dt = app.add_option("--detokenize", o.detokenize_ids, "print the text of comma-separated token ids")
                 ->type_name("IDS")->group(group::model);
  app.add_flag("--no-parse-special", o.no_parse_special, "with --tokenize: treat special-token text as plain text")
      ->group(group::model);

  const char* prompt = "Prompt and chat";
  app.add_option("-p,--prompt", o.prompt, "prompt text (special-token text is recognised, BOS added per the GGUF)")
      ->type_name("TEXT")->group(prompt);
  app.add_option("-f,--file", o.prompt_file, "read the prompt from a file")->type_name("FILE")->group(prompt);
  app.add_option("--tokens", o.tokens, "prompt as comma-separated token ids (no BOS added)")->type_name("IDS")->group(prompt);
  app.add_option("--system-prompt", o.system_prompt, "system prompt for --conversation")->type_name("TEXT")->group(prompt);
  app.add_flag("--conversation", o.conversation, "interactive chat using the model's chat template")->group(prompt);
  app.add_option("--chat-template", o.chat_template, "override the chat template: chatml, qwen3, llama3, llama4, generic")
      ->type_name("NAME")->group(prompt);
  app.add_flag("--no-think", o.no_think, "Qwen3 chat: enable_thinking=false (empty think block)")->group(prompt);
  app.add_flag("--no-display-prompt", o.no_display_prompt, "do not echo the prompt")->group(prompt);

  auto* np = app.add_option("-n,--n-predict", o.n_predict, "tokens to generate (-1: until end of generation)")
                 ->type_name("N")->capture_default_str()->group(group::sampling);
  app.add_option("-s,--seed", o.seed, "RNG seed (default: random, printed)")->type_name("N")->group(group::sampling);
  app.add_option("--temp", o.temp, "temperature (0: greedy)")->type_name("T")->capture_default_str()->group(group::sampling);
  app.add_option("--top-k", o.top_k, "top-k (0: off)")->type_name("N")->capture_default_str()->group(group::sampling);
  app.add_option("--top-p", o.top_p, "top-p (1: off)")->type_name("P")->capture_default_str()->group(group::sampling);
  app.add_option("--min-p", o.min_p, "min-p (0: off)")->type_name("P")->capture_default_str()->group(group::sampling);
  app.add_option("--repeat-penalty", o.repeat_penalty, "repetition penalty (1: off)")->type_name("X")
      ->capture_default_str()->group(group::sampling);
  app.add_option("--repeat-last-n", o.repeat_last_n, "tokens the penalties look back over")->type_name("N")
      ->capture_default_str()->group(group::sampling);
  app.add_option("--presence-penalty", o.presence_penalty, "presence penalty (0: off)")->type_name("X")
      ->capture_default_str()->group(group::sampling);
  app.add_option("--frequency-penalty", o.frequency_penalty, "frequency penalty (0: off)")->type_name("X")
      ->capture_default_str()->group(group::sampling);
  app.add_flag("--ignore-eos", o.ignore_eos, "do not stop at end-of-generation tokens")->group(group::sampling);
  app.add_option("--grammar", o.grammar, "constrain the output to a GBNF grammar (llama.cpp's syntax, start rule root)")
      ->type_name("GBNF")->group(group::sampling);
  app.add_option("--grammar-file", o.grammar_file, "read the GBNF grammar from a file")->type_name("FILE")
      ->group(group::sampling);
  app.add_option("-j,--json-schema", o.json_schema, "constrain the output to JSON that a JSON Schema accepts ({}: any JSON value)")
      ->type_name("SCHEMA")->group(group::sampling);
  app.add_option("--json-schema-file", o.json_schema_file, "read the JSON Schema from a file")->type_name("FILE")
      ->group(group::sampling);

  auto* cs = add_ctx_option(app, o.n_ctx, "context size in tokens (0: the model's; --perplexity: 512)");
  add_batch_option(app, o.n_batch, "prompt tokens per forward step");
  add_threads_option(app, o.threads);
  add_backend_options(app, bo);
  add_kv_options(app, ko);

  app.add_option("--dump-logits", o.dump_logits,
                 "evaluate the prompt in one batch and write float32 logits [n_tokens][n_vocab] to FILE")
      ->type_name("FILE")->group(group::output);
  app.add_flag("--print-ids", o.print_ids, "print the generated token ids as a JSON array on the last line")
      ->group(group::output);
  app.add_option("--perplexity", o.perplexity_file, "perplexity of a text file, as llama-perplexity computes it (-c chunk size)")
      ->type_name("FILE")->group(group::output);
  app.add_option("--chunks", o.n_chunks, "with --perplexity: at most this many chunks")->type_name("N")
      ->group(group::output);
  add_tier_options(app, o.tiers);
  app.add_flag("--plan", o.plan,
               "print where each tensor would live and run (GPU-resident, GPU-streamed, CPU-computed, disk-backed), "
               "bytes per token per link and predicted decode/prefill t/s, and the layout the engine runs for the same "
               "options, then exit (--json: one JSON object)")
      ->group(group::tiers);
  app.add_flag("--probe", o.probe, "with --plan: measure the links (DRAM, GPU copies, O_DIRECT reads of the model's drive) "
                                   "now and cache them per machine; without it the cache is used, else assumed speeds")
      ->group(group::tiers);
  c.add_log_options(lo);
  if (const int rc = c.parse(argc, argv); rc >= 0) return rc;

  o.tokenize = tk->count() > 0;
  o.detokenize = dt->count() > 0;
  o.n_predict_set = np->count() > 0;
  o.n_ctx_set = cs->count() > 0;
  o.backend = bo.backend;
  o.device = bo.device;
  o.n_gpu_layers = bo.n_gpu_layers;
  o.kv_type = ko.type;
  o.kv_type_k = ko.type_k;
  o.kv_type_v = ko.type_v;
  o.kv_window = ko.window;
  std::unique_ptr<logger> log;
  try {
    log = make_logger(lo);
    o.log = log.get();
    if (o.probe && !o.plan) throw strata::error("--probe is read with --plan only");
    if (o.model.empty()) o.model = strata::rt::find_default_model().string();
    if (o.info) return run_info(o);
    if (o.plan) return run_plan(o);
    if (o.tokenize) return run_tokenize(o);
    if (o.detokenize) return run_detokenize(o);
    if (!o.perplexity_file.empty()) return run_perplexity(o);
    return run_generate(o);
  } catch (const std::exception& e) {
    if (log) log->error("run", e.what());
    else std::fprintf(stderr, "strata-run: error: %s\n", e.what());
    return 1;
  }
}
