// Layers split over two backends (-ngl N): layers [0, N) and the embedding run on the GPU,
// layers [N, n_layer) and the output head on the CPU; each step's hidden states cross once,
// GPU -> host -> CPU. Both halves keep their own KV cache (for their layers) over identical
// block tables: the CPU table follows the GPU one (truncations included) before every step.
#pragma once
#include <memory>
#include <vector>

#include "../vulkan/backend.hpp"
#include "model_config.hpp"
#include "step_bookkeeping.hpp"
#include "strata/graph/decoder.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"
#include "strata/runtime/engine.hpp"

namespace strata::rt {

template <class Arch>
class hybrid_model final : public model {
 public:
  hybrid_model(std::unique_ptr<gguf::file> f, const engine_options& opt)
      : file_(std::move(f)),
        opt_(opt),
        hp_(Arch::load_hparams(file_->gguf())),
        n_gpu_(checked_layers(opt, hp_)),
        gpu_be_(std::make_unique<gpu::backend>(gpu::backend_options{opt.device, opt.gpu_profile, {}, opt.progress})),
        gpu_dec_(*gpu_be_, file_->gguf(), slice(0, n_gpu_, true, false)),
        gpu_kv_(gpu_be_->make_kv(kv_config(n_gpu_))),
        cpu_be_(opt.threads ? opt.threads : kernels::cpu::thread_pool::physical_cores(), select_kernel_table(best_isa())),
        cpu_dec_(cpu_be_, file_->gguf(), slice(n_gpu_, hp_.n_layer - n_gpu_, false, true)),
        cpu_kv_(cpu_be_.make_kv(kv_config(hp_.n_layer - n_gpu_))),
        hidden_(std::size_t(opt.n_batch) * hp_.n_embd) {}

  const arch::hparams& hparams() const noexcept override { return hp_; }
  const gguf::reader& gguf() const noexcept override { return file_->gguf(); }
  const engine_options& options() const noexcept override { return opt_; }
  std::string backend_description() const override {
    return gpu_be_->description() + " for layers 0-" + std::to_string(n_gpu_ - 1) + ", cpu (" +
           std::to_string(cpu_be_.threads()) + " threads, " + std::string(kernels::cpu::name_of(best_isa())) +
           ") for layers " + std::to_string(n_gpu_) + "-" + std::to_string(hp_.n_layer - 1);
  }
  kv::block_table& kv() noexcept override { return gpu_kv_.table(); }

  void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) override { step(b, {}, ids); }
  void forward(const graph::batch& b, std::span<float> logits) override { step(b, logits, {}); }

 private:
  void step(const graph::batch& b, std::span<float> logits, std::span<std::int32_t> ids) {
    auto& g = gpu_kv_.table();
    auto& c = cpu_kv_.table();
    for (std::uint32_t s = 0; s < g.n_seq(); ++s)  // callers truncate through kv() = the GPU table
      if (c.length(s) != g.length(s)) c.truncate(s, g.length(s));
    gpu_steps_.before(g, b);
    cpu_steps_.before(c, b);
    gpu_dec_.forward(b, gpu_kv_, {}, {}, hidden_);
    cpu_dec_.forward(b, cpu_kv_, logits, hidden_, {}, ids);
    gpu_steps_.after(g, b);
    cpu_steps_.after(c, b);
  }

 private:
  static std::uint32_t checked_layers(const engine_options& opt, const arch::hparams& hp) {
    if (opt.n_gpu_layers <= 0 || std::uint32_t(opt.n_gpu_layers) >= hp.n_layer)
      throw error("internal: hybrid model needs 0 < -ngl < n_layer");
    return std::uint32_t(opt.n_gpu_layers);
  }
  graph::decoder_options slice(std::uint32_t first, std::uint32_t n, bool embed, bool head) const {
    return {.max_batch = opt_.n_batch, .max_ctx = context_size(hp_, opt_), .max_outputs = opt_.max_outputs,
            .first_layer = first, .n_layers = n, .embed = embed, .head = head};
  }
  kv::kv_config kv_config(std::uint32_t layers) const { return kv_config_for(hp_, opt_, layers); }

  std::unique_ptr<gguf::file> file_;
  engine_options opt_;
  arch::hparams hp_;
  std::uint32_t n_gpu_;
  std::unique_ptr<gpu::backend> gpu_be_;
  graph::decoder<Arch, gpu::backend> gpu_dec_;
  gpu::kv_state gpu_kv_;
  kernels::cpu::backend cpu_be_;
  graph::decoder<Arch, kernels::cpu::backend> cpu_dec_;
  kernels::cpu::kv_storage cpu_kv_;
  std::vector<float> hidden_;
  step_bookkeeping gpu_steps_, cpu_steps_;
};

template <class Arch>
std::unique_ptr<model> make_hybrid_model(std::unique_ptr<gguf::file> f, const engine_options& opt) {
  return std::make_unique<hybrid_model<Arch>>(std::move(f), opt);
}

}  // namespace strata::rt
