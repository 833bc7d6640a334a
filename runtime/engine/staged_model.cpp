// The engine's model over one or more stages (runtime/engine/stage.hpp). It is the one owner of
// the KV bookkeeping: a step reserves the batch's slots in the block table, runs every stage
// (each reads the table, none changes it) and commits the tokens; sessions and the scheduler
// truncate sequences through model::kv().
#include <algorithm>
#include <stdexcept>

#include "model_config.hpp"
#include "stage.hpp"

namespace strata::rt {

std::unique_ptr<stage> make_stage(backend_kind kind, const gguf::reader& r, const engine_options& opt,
                                  const layer_slice& layers) {
  switch (kind) {
    case backend_kind::cpu: return make_cpu_stage(r, opt, layers);
    case backend_kind::vulkan:
#ifdef STRATA_HAS_VULKAN
      return make_vulkan_stage(r, opt, layers);
#else
      throw error("this build of Strata has no Vulkan backend (configure with -DSTRATA_VULKAN=ON); use --backend cpu");
#endif
    case backend_kind::auto_select: break;
  }
  throw error("internal: a stage needs a resolved backend");
}

namespace {

class staged_model final : public model {
 public:
  staged_model(std::unique_ptr<gguf::file> f, const engine_options& opt, const arch::hparams& hp,
               std::span<const stage_plan> plan)
      : file_(std::move(f)), opt_(opt), hp_(hp), table_(kv_config_for(hp_, opt_, hp_.n_layer)) {
    std::uint32_t next = 0;
    for (const auto& p : plan) {
      if (p.layers.first != next || p.layers.count == 0 || p.layers.embed != (next == 0))
        throw error("internal: stages must cover consecutive, non-empty layer slices");
      next += p.layers.count;
      if (p.layers.head != (next == hp_.n_layer)) throw error("internal: only the last stage has the head");
      stages_.push_back(make_stage(p.kind, file_->gguf(), opt_, p.layers));
      slices_.push_back(p.layers);
      kinds_.push_back(p.kind);
    }
    if (next != hp_.n_layer) throw error("internal: the stages do not cover every layer");
    if (stages_.size() > 1) hidden_.resize(std::size_t(opt_.n_batch) * hp_.n_embd);
  }

  const arch::hparams& hparams() const noexcept override { return hp_; }
  const gguf::reader& gguf() const noexcept override { return file_->gguf(); }
  const engine_options& options() const noexcept override { return opt_; }
  std::string backend_description() const override {
    if (stages_.size() == 1) return stages_[0]->description();
    std::string d;
    for (std::size_t i = 0; i < stages_.size(); ++i)
      d += (i ? ", " : "") + stages_[i]->description() + " for layers " + std::to_string(slices_[i].first) + "-" +
           std::to_string(slices_[i].first + slices_[i].count - 1);
    return d;
  }
  std::string startup_report() const override {
    std::string r;
    for (const auto& s : stages_)
      if (auto t = s->startup_report(); !t.empty()) r += (r.empty() ? "" : "; ") + t;
    return r;
  }
  std::vector<kernel_time> kernel_profile() const override {
    std::vector<kernel_time> out;
    for (const auto& s : stages_)
      for (auto& k : s->kernel_profile()) out.push_back(std::move(k));
    return out;
  }
  void reset_kernel_profile() override {
    for (const auto& s : stages_) s->reset_kernel_profile();
  }
  kv::block_table& kv() noexcept override { return table_; }
  std::uint32_t n_gpu_layers() const noexcept override {
    std::uint32_t n = 0;
    for (std::size_t i = 0; i < stages_.size(); ++i)
      if (kinds_[i] == backend_kind::vulkan) n += slices_[i].count;
    return n;
  }
  std::vector<std::uint32_t> cpu_expert_layers() const override {
    std::vector<std::uint32_t> out;
    for (const auto& s : slices_) out.insert(out.end(), s.cpu_expert_layers.begin(), s.cpu_expert_layers.end());
    return out;
  }

  std::vector<std::uint32_t> cached_expert_layers() const override {
    std::vector<std::uint32_t> out;
    for (const auto& s : slices_) out.insert(out.end(), s.cached_expert_layers.begin(), s.cached_expert_layers.end());
    return out;
  }
  expert_cache_counters expert_cache() const override {
    expert_cache_counters c;
    for (const auto& s : stages_) {
      const auto e = s->expert_cache();
      c.layers += e.layers;
      c.slots = std::max(c.slots, e.slots);
      c.hits += e.hits, c.misses += e.misses, c.evictions += e.evictions, c.bytes_uploaded += e.bytes_uploaded;
      c.tokens = std::max(c.tokens, e.tokens);
      c.gpu_blocks += e.gpu_blocks, c.cpu_blocks += e.cpu_blocks;
      c.predictors += e.predictors;
      c.prefetched += e.prefetched, c.prefetch_bytes += e.prefetch_bytes;
      c.prefetch_used += e.prefetch_used, c.prefetch_wasted += e.prefetch_wasted;
      c.predicted_routed += e.predicted_routed, c.routed_with_prediction += e.routed_with_prediction;
      c.lookup_blocks += e.lookup_blocks, c.host_read_bytes += e.host_read_bytes;
      c.miss_cpu_blocks += e.miss_cpu_blocks;
      c.cpu_miss_tokens = std::max(c.cpu_miss_tokens, e.cpu_miss_tokens);
      c.stage_bytes += e.stage_bytes, c.staged_blocks += e.staged_blocks, c.staged_bytes += e.staged_bytes;
      c.share_blocks += e.share_blocks;
    }
    return c;
  }

  std::vector<std::uint32_t> streamed_layers() const override {
    std::vector<std::uint32_t> out;
    for (const auto& s : slices_) out.insert(out.end(), s.streamed_layers.begin(), s.streamed_layers.end());
    return out;
  }
  stream_counters streaming() const override {
    stream_counters c;
    for (const auto& s : stages_) {
      const auto e = s->streaming();
      c.layers += e.layers, c.ring_bytes += e.ring_bytes, c.host_bytes += e.host_bytes;
      c.bytes_per_step += e.bytes_per_step, c.bytes_streamed += e.bytes_streamed;
      c.tokens = std::max(c.tokens, e.tokens), c.steps = std::max(c.steps, e.steps);
      c.cpu_steps = std::max(c.cpu_steps, e.cpu_steps), c.cpu_tokens = std::max(c.cpu_tokens, e.cpu_tokens);
      c.link_layers += e.link_layers, c.link_bytes_per_step += e.link_bytes_per_step;
    }
    return c;
  }

  std::vector<std::uint32_t> expert_streamed_layers() const override {
    std::vector<std::uint32_t> out;
    for (const auto& s : slices_) out.insert(out.end(), s.streamed_expert_layers.begin(), s.streamed_expert_layers.end());
    return out;
  }
  stream_counters expert_streaming() const override {
    stream_counters c;
    for (const auto& s : stages_)  // one GPU stage at most
      if (const auto e = s->expert_streaming(); e.layers) c = e;
    return c;
  }

  std::uint32_t step_granule() const noexcept override {  // the widest tile of any stage
    std::uint32_t g = 1;
    for (const auto& s : stages_) g = std::max(g, s->step_granule());
    return g;
  }

  recording_counters step_recordings() const override {
    recording_counters c;
    for (const auto& s : stages_) {
      const auto e = s->step_recordings();
      c.steps += e.steps, c.ms += e.ms;
      if (e.last_dispatches) {  // a step runs every stage, one after another: a level between two
        c.last_barriers += e.last_barriers + (c.last_dispatches ? 1 : 0);
        c.last_dispatches += e.last_dispatches;
      }
    }
    return c;
  }

  handoff_counters handoffs() const override {
    handoff_counters c;
    for (const auto& s : stages_) {  // one GPU stage at most hands off; every stage runs every step
      const auto e = s->handoffs();
      c.steps = std::max(c.steps, e.steps), c.tokens = std::max(c.tokens, e.tokens);
      c.handoff_steps += e.handoff_steps, c.handoffs += e.handoffs, c.polled_steps += e.polled_steps;
    }
    return c;
  }

  std::vector<std::uint32_t> disk_layers() const override {
    std::vector<std::uint32_t> out;
    for (const auto& s : slices_)
      for (const auto& t : s.disk_tensors)
        if (out.empty() || out.back() != t.block) out.push_back(t.block);
    std::sort(out.begin(), out.end());
    out.erase(std::unique(out.begin(), out.end()), out.end());
    return out;
  }
  disk_counters disk_tier() const override {
    disk_counters c;
    for (const auto& s : stages_) {
      const auto e = s->disk_tier();
      c.blocks += e.blocks, c.slots += e.slots, c.slot_bytes = std::max(c.slot_bytes, e.slot_bytes);
      c.bytes_per_step += e.bytes_per_step, c.bytes_read += e.bytes_read, c.block_reads += e.block_reads;
      c.stalls += e.stalls, c.read_seconds += e.read_seconds, c.stall_seconds += e.stall_seconds;
      c.steps = std::max(c.steps, e.steps), c.tokens = std::max(c.tokens, e.tokens);
    }
    return c;
  }

  recording_counters record_steps(const step_shapes& s) override {
    const recording_counters before = step_recordings();
    for (const auto& st : stages_) st->record_steps(s, table_.capacity(), table_);
    const recording_counters after = step_recordings();
    return {after.steps - before.steps, after.ms - before.ms};
  }

  void forward(const graph::batch& b, std::span<float> logits) override { step(b, logits, {}); }
  void forward_argmax(const graph::batch& b, std::span<std::int32_t> ids) override { step(b, {}, ids); }
  // Every backend: the last stage (the one with the head) hands out the final-norm rows.
  void forward_embeddings(const graph::batch& b, std::span<float> out) override { step(b, {}, {}, out); }
  bool supports_embeddings() const noexcept override { return true; }

 private:
  // Stage i reads the hidden states stage i - 1 handed out; the same host rows serve as both
  // (a stage takes its input at write(), before it produces its output).
  void step(const graph::batch& b, std::span<float> logits, std::span<std::int32_t> ids, std::span<float> embd = {}) {
    table_.reserve_step(b.seq_ids, b.positions);
    const std::size_t last = stages_.size() - 1;
    for (std::size_t i = 0; i <= last; ++i)
      stages_[i]->forward(b, table_, i == last ? logits : std::span<float>{},
                          i ? std::span<const float>(hidden_) : std::span<const float>{},
                          i < last ? std::span<float>(hidden_) : std::span<float>{},
                          i == last ? ids : std::span<std::int32_t>{}, i == last ? embd : std::span<float>{});
    table_.commit_step(b.seq_ids, b.tokens);
  }

  std::unique_ptr<gguf::file> file_;
  engine_options opt_;
  arch::hparams hp_;
  kv::block_table table_;
  std::vector<std::unique_ptr<stage>> stages_;
  std::vector<layer_slice> slices_;
  std::vector<backend_kind> kinds_;
  std::vector<float> hidden_;
};

}  // namespace

std::unique_ptr<model> make_staged_model(std::unique_ptr<gguf::file> f, const engine_options& opt,
                                         const arch::hparams& hp, std::span<const stage_plan> plan) {
  return std::make_unique<staged_model>(std::move(f), opt, hp, plan);
}

}  // namespace strata::rt
