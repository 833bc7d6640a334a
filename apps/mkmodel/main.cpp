// strata-mkmodel: writes a GGUF with the exact tensor names, shapes, types and metadata of a real
// model (or of a fixture model), filled with valid seeded random weights, for benchmarking real
// shapes without downloading weights.
#include <cstdio>
#include <iostream>

#include "cli.hpp"
#include "generate.hpp"
#include "progress.hpp"

int main(int argc, char** argv) {
  using namespace strata::mkmodel;
  using namespace strata::app;
  cli c({"strata-mkmodel",
         "--preset NAME --type TYPE -o FILE [options]",
         "Write a GGUF with the exact tensors (names, shapes, types as llama-quantize mixes them) and metadata of "
         "a real model or of a fixture model, filled with valid seeded random weights: benchmark real shapes "
         "without downloading weights. The same seed gives the same bytes.",
         {{"Qwen3-8B shapes in Q4_K_M", "strata-mkmodel --preset qwen3-8b --type Q4_K_M -o qwen3-8b-q4km.gguf"},
          {"only 2 of its layers, for quick tests", "strata-mkmodel --preset qwen3-8b --type Q4_K_M --layers 2 -o small.gguf"},
          {"what presets and types there are", "strata-mkmodel --list"}}});
  auto& app = c.app();
  options o;
  std::string out;
  bool list = false, dry_run = false, tensors = false;
  log_options lo;
  const char* model_group = "Model";
  app.add_option("--preset", o.preset, "model preset (see --list)")->type_name("NAME")->group(model_group);
  app.add_option("--type", o.type, "file type: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L "
                                   "Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K, or pure Q3_K Q4_K Q5_K")
      ->type_name("TYPE")->capture_default_str()->group(model_group);
  app.add_flag("--pure", o.pure, "every matrix in the base type (llama-quantize --pure)")->group(model_group);
  app.add_option("--layers", o.n_layer, "override the layer count, keeping the real per-layer shapes (quick tests)")
      ->type_name("N")->group(model_group);
  app.add_option("--vocab", o.vocab, "copy the tokenizer.* keys from this GGUF instead of a synthetic vocabulary")
      ->type_name("FILE")->check(CLI::ExistingFile)->group(model_group);
  app.add_option("--seed", o.seed, "random seed (same seed, same bytes)")->type_name("N")->capture_default_str()
      ->group(model_group);
  app.add_option("--router", o.router,
                 "MoE routers: uniform (random rows: near-uniform routing) or skewed (rows scaled so top-k routing has "
                 "the per-expert skew measured on Qwen3-30B-A3B; no temporal locality)")
      ->type_name("KIND")->capture_default_str()->group(model_group);
  app.add_option("-o,--output", out, "output GGUF path")->type_name("FILE")->group(group::output);
  app.add_flag("--list", list, "list presets and types, then exit")->group(group::output);
  app.add_flag("--dry-run", dry_run, "plan and print the summary without writing")->group(group::output);
  app.add_flag("--tensors", tensors, "print every tensor with its type and shape")->group(group::output);
  app.add_option("-t,--threads", o.threads, "generation threads (0: every hardware thread)")->type_name("N")
      ->capture_default_str()->group(group::backend);
  c.add_log_options(lo);
  if (const int rc = c.parse(argc, argv); rc >= 0) return rc;

  if (list) {
    std::cout << list_text();
    return 0;
  }
  std::unique_ptr<logger> log;
  try {
    log = make_logger(lo);
    if (o.preset.empty()) throw usage_error("--preset is required (see --list)");
    if (out.empty() && !dry_run) throw usage_error("--output is required (or --dry-run)");
    const model m = plan_model(o);
    if (tensors)
      for (const auto& t : m.tensors) {
        std::string shape;
        for (auto d : t.ne) {
          if (!shape.empty()) shape += ", ";
          shape += std::to_string(d);
        }
        std::printf("%-36s %-5s [%s]\n", t.name.c_str(), std::string(strata::gguf::name_of(t.type)).c_str(),
                    shape.c_str());
      }
    if (!dry_run) {
      std::unique_ptr<progress_bar> bar;
      const auto progress = [&](std::uint64_t done, std::uint64_t total) {
        if (!bar) bar = std::make_unique<progress_bar>(*log, "mkmodel", "write", total, "bytes");
        bar->update(done);
      };
      const write_stats st = write_model(m, out, progress);
      if (bar) bar->finish();
      char line[256];
      std::snprintf(line, sizeof line, "wrote %s: %.1f MB in %.2f s (%.0f MB/s)", out.c_str(), double(st.bytes) / 1e6,
                    st.seconds, double(st.bytes) / 1e6 / std::max(st.seconds, 1e-9));
      log->info("mkmodel", line);
    }
    std::cout << summary(m);
  } catch (const usage_error& e) {
    if (log) log->error("mkmodel", e.what());
    return 2;
  } catch (const std::exception& e) {
    if (log) log->error("mkmodel", e.what());
    else std::fprintf(stderr, "strata-mkmodel: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
