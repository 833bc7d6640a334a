// CPU-backed model: mmap'd GGUF + cpu backend + decoder<Arch> + KV storage. The template is
// instantiated once per architecture in runtime/instantiate/arch_<name>.cpp.
#pragma once
#include <memory>

#include "model_config.hpp"
#include "step_bookkeeping.hpp"
#include "strata/graph/decoder.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/runtime/engine.hpp"

namespace strata::rt {

template <class Arch>
class cpu_model final : public model {
 public:
  cpu_model(std::unique_ptr<gguf::file> f, const engine_options& opt)
      : file_(std::move(f)),
        opt_(opt),
        be_(opt.threads ? opt.threads : kernels::cpu::thread_pool::physical_cores(),
            select_kernel_table(best_isa())),
        dec_(be_, file_->gguf(), graph_options(*file_, opt_)),
        kv_(be_.make_kv(kv_config(dec_.hparams(), opt_))) {}

  const arch::hparams& hparams() const noexcept override { return dec_.hparams(); }
  const gguf::reader& gguf() const noexcept override { return file_->gguf(); }
  const engine_options& options() const noexcept override { return opt_; }
  std::string backend_description() const override {
    return "cpu (" + std::to_string(be_.threads()) + " threads, " + std::string(kernels::cpu::name_of(best_isa())) + ")";
  }
  kv::block_table& kv() noexcept override { return kv_.table(); }

  void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) override { step(b, {}, ids); }
  void forward(const graph::batch& b, std::span<float> logits) override { step(b, logits, {}); }
  void forward_embeddings(const graph::batch& b, std::span<float> out) override { step(b, {}, {}, out); }
  bool supports_embeddings() const noexcept override { return true; }

 private:
  void step(const graph::batch& b, std::span<float> logits, std::span<std::int32_t> ids, std::span<float> embd = {}) {
    steps_.before(kv_.table(), b);
    dec_.forward(b, kv_, logits, {}, {}, ids, embd);
    steps_.after(kv_.table(), b);
  }

 private:
  static graph::decoder_options graph_options(const gguf::file& f, const engine_options& opt) {
    return {.max_batch = opt.n_batch, .max_ctx = context_size(Arch::load_hparams(f.gguf()), opt),
            .max_outputs = opt.max_outputs};
  }
  static kv::kv_config kv_config(const arch::hparams& hp, const engine_options& opt) {
    return kv_config_for(hp, opt, hp.n_layer);
  }

  std::unique_ptr<gguf::file> file_;
  engine_options opt_;
  kernels::cpu::backend be_;
  graph::decoder<Arch, kernels::cpu::backend> dec_;
  kernels::cpu::kv_storage kv_;
  step_bookkeeping steps_;
};

template <class Arch>
std::unique_ptr<model> make_cpu_model(std::unique_ptr<gguf::file> f, const engine_options& opt) {
  return std::make_unique<cpu_model<Arch>>(std::move(f), opt);
}

// One explicit instantiation per architecture lives in runtime/instantiate/.
#define STRATA_DECLARE_CPU_MODEL(ARCH) \
  extern template std::unique_ptr<model> make_cpu_model<ARCH>(std::unique_ptr<gguf::file>, const engine_options&);

}  // namespace strata::rt
