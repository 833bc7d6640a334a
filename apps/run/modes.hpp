// strata-run modes: each takes the parsed options and returns the process exit code.
#pragma once
#include <string>

namespace strata::app {

struct run_options {
  std::string model;  // -m
  bool info = false;  // --info
  bool json = false;  // --json
};

int run_info(const run_options& opt);

}  // namespace strata::app
