// strata-run: generate, chat, dump logits, tokenize and inspect GGUF models. Flags follow
// llama.cpp's (llama-cli, llama-tokenize) where an equivalent exists.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "modes.hpp"
#include "strata/core/error.hpp"
#include "strata/runtime/default_model.hpp"
#include "strata/runtime/engine.hpp"

int main(int argc, char** argv) {
  strata::app::run_options o;
  CLI::App app{"strata-run: run and inspect GGUF models"};
  app.add_option("-m,--model", o.model, "GGUF model file (default: the bundled demo model, models/strata-demo.gguf)");
  app.add_flag("--info", o.info, "print architecture, hyper-parameters, tokenizer and tensor table");
  app.add_flag("--json", o.json, "with --info or --plan: print one JSON object instead of text");
  auto* tk = app.add_option("--tokenize", o.tokenize_text, "print the token ids of TEXT as a JSON array (BOS/EOS as the GGUF says)");
  auto* dt = app.add_option("--detokenize", o.detokenize_ids, "print the text of comma-separated token ids");
  app.add_flag("--no-parse-special", o.no_parse_special, "with --tokenize: treat special-token text as plain text");
  app.add_option("-p,--prompt", o.prompt, "prompt text (special-token text is recognised, BOS added per the GGUF)");
  app.add_option("-f,--file", o.prompt_file, "read the prompt from a file");
  app.add_option("--tokens", o.tokens, "prompt as comma-separated token ids (no BOS added)");
  app.add_option("--system-prompt", o.system_prompt, "system prompt for -cnv");
  app.add_flag("--conversation", o.conversation, "interactive chat using the model's chat template");
  app.add_option("--chat-template", o.chat_template, "override the chat template: chatml, qwen3, llama3, llama4, generic");
  app.add_flag("--no-think", o.no_think, "Qwen3 chat: enable_thinking=false (empty think block)");
  auto* np = app.add_option("-n,--n-predict", o.n_predict, "tokens to generate (-1: until end of generation)");
  auto* cs = app.add_option("-c,--ctx-size", o.n_ctx, "context size in tokens (0: the model's; --perplexity: 512)");
  app.add_option("-b,--batch-size", o.n_batch, "prompt tokens per forward step")->check(CLI::Range(1u, 1u << 16));
  app.add_option("-t,--threads", o.threads, "CPU threads (0: physical cores)");
  app.add_option("-s,--seed", o.seed, "RNG seed (default: random, printed)");
  app.add_option("--temp", o.temp, "temperature (0: greedy)");
  app.add_option("--top-k", o.top_k, "top-k (0: off)");
  app.add_option("--top-p", o.top_p, "top-p (1: off)");
  app.add_option("--min-p", o.min_p, "min-p (0: off)");
  app.add_option("--repeat-penalty", o.repeat_penalty, "repetition penalty (1: off)");
  app.add_option("--repeat-last-n", o.repeat_last_n, "tokens the penalties look back over");
  app.add_option("--presence-penalty", o.presence_penalty, "presence penalty (0: off)");
  app.add_option("--frequency-penalty", o.frequency_penalty, "frequency penalty (0: off)");
  app.add_flag("--ignore-eos", o.ignore_eos, "do not stop at end-of-generation tokens");
  app.add_option("--kv-type", o.kv_type, "KV cache type for K and V: f16 (default), f32, q8_0, tq4, tq3, tq2");
  app.add_option("--kv-type-k", o.kv_type_k, "KV cache type for K only (overrides --kv-type)");
  app.add_option("--kv-type-v", o.kv_type_v, "KV cache type for V only (overrides --kv-type)");
  app.add_option("--kv-window", o.kv_window,
                 "recent tokens attention reads at full precision with compressed KV types (default 128, 0: none)");
  app.add_option("--backend", o.backend, "compute backend: auto (Vulkan on a GPU, else CPU), cpu, vulkan")
      ->check(CLI::IsMember({"auto", "cpu", "vulkan"}));
  app.add_option("--device", o.device, "Vulkan device index (see --list-devices; default: the best GPU)");
  app.add_option("--n-gpu-layers", o.n_gpu_layers, "layers on the GPU (-ngl; -1: all)");
  app.add_flag_callback(
      "--list-devices",
      [] {
        const auto devs = strata::rt::vulkan_devices();
        if (!strata::rt::vulkan_compiled_in()) std::cout << "this build has no Vulkan backend\n";
        else if (devs.empty()) std::cout << "no Vulkan devices (no loader or driver)\n";
        for (std::size_t i = 0; i < devs.size(); ++i) std::cout << i << ": " << devs[i] << "\n";
        throw CLI::Success();
      },
      "list the Vulkan devices and exit");
  app.add_option("--dump-logits", o.dump_logits,
                 "evaluate the prompt in one batch and write float32 logits [n_tokens][n_vocab] to FILE");
  app.add_flag("--print-ids", o.print_ids, "print the generated token ids as a JSON array on the last line");
  app.add_flag("--no-display-prompt", o.no_display_prompt, "do not echo the prompt");
  app.add_option("--perplexity", o.perplexity_file, "perplexity of a text file, as llama-perplexity computes it (-c chunk size)");
  app.add_option("--chunks", o.n_chunks, "with --perplexity: at most this many chunks");
  app.add_flag("--plan", o.plan,
               "print where each tensor would live and run (GPU-resident, GPU-streamed, CPU-computed, disk-backed), "
               "bytes per token per link and predicted decode/prefill t/s, then exit (--json: one JSON object)");
  auto* pr = app.add_flag("--probe", o.probe, "with --plan: measure the links (DRAM, GPU copies, O_DIRECT reads of the model's "
                                              "drive) now and cache them per machine; without it --plan uses the cache, "
                                              "else assumed speeds");
  auto* gb = app.add_option("--gpu-budget", o.gpu_budget, "with --plan: GPU memory for weights, KV and scratch, e.g. 12G "
                                                         "(default: free GPU memory minus a margin)");
  auto* rb = app.add_option("--ram-budget", o.ram_budget, "with --plan: RAM for weights, CPU KV and scratch, e.g. 48G "
                                                         "(default: MemAvailable minus a margin)");
  auto* ot = app.add_option("--override-tensor", o.override_tensor,
                            "with --plan: -ot REGEX=gpu|cpu|disk[,...]: tensors whose name matches go there (first match wins)");
  auto* cm = app.add_flag("--cpu-moe", o.cpu_moe, "with --plan: every routed-expert tensor stays in RAM, computed on the CPU");
  auto* ncm = app.add_option("--n-cpu-moe", o.n_cpu_moe, "with --plan: the routed experts of the first N layers stay on the CPU");
  // llama.cpp's multi-letter single-dash flags (-cnv, -sys, -ngl), which CLI11 cannot declare.
  std::vector<std::string> args;
  for (int i = argc - 1; i >= 1; --i) {
    const std::string a = argv[i];
    args.push_back(a == "-cnv" ? "--conversation" : a == "-sys" ? "--system-prompt" : a == "-ngl" ? "--n-gpu-layers"
                   : a == "-ot" ? "--override-tensor" : a);
  }
  try {
    app.parse(args);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  o.tokenize = tk->count() > 0;
  o.detokenize = dt->count() > 0;
  o.n_predict_set = np->count() > 0;
  o.n_ctx_set = cs->count() > 0;
  o.tier_options_set = pr->count() + gb->count() + rb->count() + ot->count() + cm->count() + ncm->count() > 0;
  try {
    // The engine does not place tensors by plan yet: these options must not look as if it did.
    if (o.tier_options_set && !o.plan)
      throw strata::error("--probe, --gpu-budget, --ram-budget, -ot, --cpu-moe and --n-cpu-moe are only read by --plan so far "
                          "(the engine does not execute placement plans yet; -ngl splits layers)");
    if (o.model.empty()) o.model = strata::rt::find_default_model().string();
    if (o.info) return strata::app::run_info(o);
    if (o.plan) return strata::app::run_plan(o);
    if (o.tokenize) return strata::app::run_tokenize(o);
    if (o.detokenize) return strata::app::run_detokenize(o);
    if (!o.perplexity_file.empty()) return strata::app::run_perplexity(o);
    return strata::app::run_generate(o);
  } catch (const std::exception& e) {
    std::cerr << "strata-run: error: " << e.what() << "\n";
    return 1;
  }
}
