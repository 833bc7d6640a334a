// strata-run: model info today; generation, chat, logits dump and tokenization arrive with
// later issues. Flags follow llama.cpp's names where an equivalent exists.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>
#include <iostream>

#include "modes.hpp"
#include "strata/core/error.hpp"

int main(int argc, char** argv) {
  strata::app::run_options opt;
  CLI::App app{"strata-run: run and inspect GGUF models"};
  app.add_option("-m,--model", opt.model, "GGUF model file")->required();
  app.add_flag("--info", opt.info, "print architecture, hyper-parameters, tokenizer and tensor table");
  app.add_flag("--json", opt.json, "with --info: print one JSON object instead of text");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  try {
    if (opt.info) return strata::app::run_info(opt);
    std::cerr << "strata-run: nothing to do: pass --info (generation arrives with the CPU inference issue)\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "strata-run: error: " << e.what() << "\n";
    return 1;
  }
}
