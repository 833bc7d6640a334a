// Settings every backend's model derives the same way from the engine options and the model's
// hyper-parameters: context size and KV-cache configuration.
#pragma once
#include <cstdint>

#include "strata/arch/architecture.hpp"
#include "strata/kv/kv_config.hpp"
#include "strata/runtime/engine.hpp"

namespace strata::rt {

// -c, or the model's training context when 0.
inline std::uint32_t context_size(const arch::hparams& hp, const engine_options& opt) {
  return opt.n_ctx ? opt.n_ctx : hp.n_ctx_train;
}

// The KV cache of `n_layer` layers (a slice of the model under -ngl, else all of them).
inline kv::kv_config kv_config_for(const arch::hparams& hp, const engine_options& opt, std::uint32_t n_layer) {
  kv::kv_config c;
  c.n_layer = n_layer;
  c.n_head_kv = hp.n_head_kv;
  c.head_dim = hp.head_dim;
  c.n_ctx = context_size(hp, opt);
  c.n_seq = opt.n_seq;
  c.type_k = opt.type_k;
  c.type_v = opt.type_v;
  c.full_precision_window = opt.kv_window;
  c.max_batch = opt.n_batch;
  return c;
}

}  // namespace strata::rt
