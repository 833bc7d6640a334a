// strata-mkmodel: writes a GGUF with the exact tensor names, shapes, types and metadata of a real
// model (or of a fixture model), filled with valid seeded random weights, for benchmarking real
// shapes without downloading weights.
//   strata-mkmodel --preset NAME --type TYPE -o OUT.gguf [--seed N] [--vocab FILE.gguf] [--list]
#include <CLI/CLI.hpp>
#include <cstdio>
#include <iostream>
#include <unistd.h>

#include "generate.hpp"

int main(int argc, char** argv) {
  using namespace strata::mkmodel;
  CLI::App app{"strata-mkmodel: real model shapes, random valid weights, as GGUF"};
  options o;
  std::string out;
  bool list = false, dry_run = false, tensors = false;
  app.add_option("--preset,-p", o.preset, "model preset (see --list)");
  app.add_option("--type,-t", o.type, "file type: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q2_K Q3_K_S Q3_K_M Q3_K_L "
                                      "Q4_K_S Q4_K_M Q5_K_S Q5_K_M Q6_K, or pure Q3_K Q4_K Q5_K")
      ->capture_default_str();
  app.add_option("--output,-o", out, "output GGUF path");
  app.add_option("--seed", o.seed, "random seed (same seed, same bytes)")->capture_default_str();
  app.add_option("--vocab", o.vocab, "copy the tokenizer.* keys from this GGUF instead of a synthetic vocabulary")
      ->check(CLI::ExistingFile);
  app.add_option("--threads", o.threads, "generation threads (0 = all cores)")->capture_default_str();
  app.add_option("--layers", o.n_layer, "override the layer count, keeping the real per-layer shapes (quick tests)");
  app.add_flag("--pure", o.pure, "every matrix in the base type (llama-quantize --pure)");
  app.add_option("--router", o.router,
                 "MoE routers: uniform (random rows: near-uniform routing) or skewed (rows scaled so top-k routing has "
                 "the per-expert skew measured on Qwen3-30B-A3B; no temporal locality)")
      ->capture_default_str();
  app.add_flag("--list", list, "list presets and types, then exit");
  app.add_flag("--dry-run", dry_run, "plan and print the summary without writing");
  app.add_flag("--tensors", tensors, "print every tensor with its type and shape");
  CLI11_PARSE(app, argc, argv);

  if (list) {
    std::cout << list_text();
    return 0;
  }
  if (o.preset.empty()) {
    std::cerr << "strata-mkmodel: error: --preset is required (see --list)\n";
    return 2;
  }
  if (out.empty() && !dry_run) {
    std::cerr << "strata-mkmodel: error: --output is required (or --dry-run)\n";
    return 2;
  }
  try {
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
      const bool tty = ::isatty(2);
      const auto progress = [tty](std::uint64_t done, std::uint64_t total) {
        if (tty) std::fprintf(stderr, "\r  %7.0f / %.0f MB", double(done) / 1e6, double(total) / 1e6);
      };
      const write_stats st = write_model(m, out, progress);
      if (tty) std::fprintf(stderr, "\n");
      std::printf("wrote %s: %.1f MB in %.2f s (%.0f MB/s)\n", out.c_str(), double(st.bytes) / 1e6, st.seconds,
                  double(st.bytes) / 1e6 / std::max(st.seconds, 1e-9));
    }
    std::cout << summary(m);
  } catch (const usage_error& e) {
    std::cerr << "strata-mkmodel: error: " << e.what() << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "strata-mkmodel: error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
