// `strata-run --info -m FILE`: architecture, hyper-parameters, tokenizer, tensor table.
#include <cstdio>
#include <iostream>

#include "modes.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/runtime/model_info.hpp"

namespace strata::app {

int run_info(const run_options& opt) {
  const gguf::file f(opt.model);
  const auto summary = rt::summarize(f.gguf());
  if (opt.json) std::cout << rt::render_json(summary, f.gguf()) << "\n";
  else std::cout << rt::render_text(summary);
  return 0;
}

}  // namespace strata::app
