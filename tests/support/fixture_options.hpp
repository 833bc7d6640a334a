// Test support: the engine options the fixtures' logits were produced with (n_ctx 512), two
// threads, a batch of 256, on the given backend.
#pragma once
#include "strata/runtime/engine.hpp"

namespace strata::test {

inline rt::engine_options fixture_options(rt::backend_kind backend = rt::backend_kind::cpu, int n_gpu_layers = -1) {
  rt::engine_options opt;
  opt.backend = backend;
  opt.n_gpu_layers = n_gpu_layers;
  opt.threads = 2;
  opt.n_ctx = 512;  // the fixtures were produced with n_ctx 512
  opt.n_batch = 256;
  return opt;
}

}  // namespace strata::test
