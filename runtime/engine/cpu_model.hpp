// CPU-backed model: mmap'd GGUF + cpu backend + decoder<Arch> + KV storage. The template is
// instantiated once per architecture in runtime/instantiate/arch_<name>.cpp.
#pragma once
#include <memory>

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

 private:
  void step(const graph::batch& b, std::span<float> logits, std::span<std::int32_t> ids) {
    // One pass: each token's position must continue its sequence (cached length + tokens of
    // that sequence earlier in this batch); then reserve KV slots per sequence.
    auto& t = kv_.table();
    pending_.assign(t.n_seq(), 0);
    for (std::size_t i = 0; i < b.size(); ++i) {
      const std::uint32_t seq = b.seq_ids[i];
      const std::uint32_t pos = std::uint32_t(b.positions[i]);
      if (seq >= t.n_seq())
        throw error("batch sequence id " + std::to_string(seq) + " out of range (" + std::to_string(t.n_seq()) + ")");
      if (pos != t.length(seq) + pending_[seq])
        throw error("batch position " + std::to_string(pos) + " does not continue sequence " + std::to_string(seq) +
                    " (length " + std::to_string(t.length(seq)) + ")");
      ++pending_[seq];
    }
    for (std::uint32_t s = 0; s < t.n_seq(); ++s)
      if (pending_[s]) t.reserve_append(s, pending_[s]);
    dec_.forward(b, kv_, logits, {}, {}, ids);
    for (std::uint32_t s = 0; s < t.n_seq(); ++s) {
      if (!pending_[s]) continue;
      seq_tokens_.clear();
      for (std::size_t i = 0; i < b.size(); ++i)
        if (b.seq_ids[i] == s) seq_tokens_.push_back(b.tokens[i]);
      t.commit(s, seq_tokens_);
    }
  }

 private:
  static std::uint32_t ctx_of(const gguf::file& f, const engine_options& opt) {
    if (opt.n_ctx) return opt.n_ctx;
    return Arch::load_hparams(f.gguf()).n_ctx_train;
  }
  static graph::decoder_options graph_options(const gguf::file& f, const engine_options& opt) {
    return {.max_batch = opt.n_batch, .max_ctx = ctx_of(f, opt), .max_outputs = opt.max_outputs};
  }
  static kv::kv_config kv_config(const arch::hparams& hp, const engine_options& opt) {
    kv::kv_config c;
    c.n_layer = hp.n_layer;
    c.n_head_kv = hp.n_head_kv;
    c.head_dim = hp.head_dim;
    c.n_ctx = opt.n_ctx ? opt.n_ctx : hp.n_ctx_train;
    c.n_seq = opt.n_seq;
    c.type_k = opt.type_k;
    c.type_v = opt.type_v;
    c.full_precision_window = opt.kv_window;
    c.max_batch = opt.n_batch;
    return c;
  }

  std::unique_ptr<gguf::file> file_;
  engine_options opt_;
  kernels::cpu::backend be_;
  graph::decoder<Arch, kernels::cpu::backend> dec_;
  kernels::cpu::kv_storage kv_;
  std::vector<std::int32_t> seq_tokens_;
  std::vector<std::uint32_t> pending_;  // tokens per sequence in the current batch
};

template <class Arch>
std::unique_ptr<model> make_cpu_model(std::unique_ptr<gguf::file> f, const engine_options& opt) {
  return std::make_unique<cpu_model<Arch>>(std::move(f), opt);
}

// One explicit instantiation per architecture lives in runtime/instantiate/.
#define STRATA_DECLARE_CPU_MODEL(ARCH) \
  extern template std::unique_ptr<model> make_cpu_model<ARCH>(std::unique_ptr<gguf::file>, const engine_options&);

}  // namespace strata::rt
