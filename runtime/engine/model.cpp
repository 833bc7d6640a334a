// Model loading (which backend runs which layers) and sessions.
#include <algorithm>
#include <memory>

#include "stage.hpp"
#include "strata/arch/all.hpp"
#include "strata/runtime/placement.hpp"
#ifdef STRATA_HAS_VULKAN
#include "../vulkan/devices.hpp"
#endif

namespace strata::rt {

bool vulkan_compiled_in() noexcept {
#ifdef STRATA_HAS_VULKAN
  return true;
#else
  return false;
#endif
}

// auto: the Vulkan backend when a real GPU is present (lavapipe, a CPU emulation, is slower
// than the CPU backend), else the CPU backend.
backend_kind resolve_backend(backend_kind k, int device) {
  if (k != backend_kind::auto_select) return k;
#ifdef STRATA_HAS_VULKAN
  try {
    const auto devs = gpu_device_kinds();
    if (device >= 0) return std::size_t(device) < devs.size() ? backend_kind::vulkan : backend_kind::cpu;
    for (bool is_gpu : devs)
      if (is_gpu) return backend_kind::vulkan;
  } catch (const std::exception&) {  // no loader or driver: the CPU it is
  }
#else
  (void)device;
#endif
  return backend_kind::cpu;
}

std::unique_ptr<model> model::load(const std::filesystem::path& path, const engine_options& opt) {
  if (opt.n_seq == 0) throw error("number of parallel sequences must be at least 1");
  auto f = std::make_unique<gguf::file>(path);
  const auto arch_name = std::string((*f)->get_string(gguf::keys::architecture));
  try {
    const arch::hparams hp = arch::visit(arch_name, [&](auto a) { return decltype(a)::load_hparams(f->gguf()); });
    const backend_kind kind = resolve_backend(opt.backend, opt.device);
    const std::uint32_t L = hp.n_layer;
    // Which blocks run on the GPU and which blocks' experts the CPU computes: -ngl and the
    // overrides, or the planner's choice within the budgets (--fit); see placement.hpp.
    const bool gpu = kind == backend_kind::vulkan;
    engine_options eo = opt;
    eo.n_batch = prompt_step_tokens(path, f->gguf(), hp, opt, gpu);  // -b, or the engine's choice
    const placement_inputs in = placement_for(path, f->gguf(), hp, eo, gpu);
    const tiers::engine_layout layout = choose_layout(in, eo, gpu);
    eo.gpu_budget = gpu && (opt.gpu_budget || opt.fit) ? in.plan.gpu_budget : 0;  // the Vulkan ledger's cap
    const std::uint32_t n = layout.n_gpu_layers;
    std::vector<stage_plan> plan;
    if (n > 0)
      plan.push_back({backend_kind::vulkan,
                      {0, n, true, n == L, layout.handoff_layers(), layout.cached_layers(), layout.expert_slots,
                       layout.streamed_layers(), layout.stream_cpu_tokens, {}, {}, 0,
                       layout.expert_streamed_layers(), layout.expert_cpu_tokens, layout.link_layers(),
                       tiers::link_bytes_per_cpu_byte(in.plan.links), layout.expert_cpu_misses ? 1.0f : 0.0f,
                       layout.expert_cache_stage}});
    if (n < L) {
      layer_slice cpu{n, L - n, n == 0, true, {}, {}, 0, {}, 0, {}, {}, 0, {}, 0, {}, 0, 0, false};
      for (std::size_t i = 0; i < in.demand.tensors.size(); ++i) {  // the disk tier's tensors
        if (!layout.disk.on_disk[i]) continue;
        const tiers::tensor_demand& t = in.demand.tensors[i];
        const gguf::tensor_info* info = f->gguf().find_tensor(t.name);
        if (!info) throw error("internal: disk-backed tensor '" + t.name + "' is not in the file");
        cpu.disk_tensors.push_back({t.name, std::uint32_t(t.layer), info->file_offset, info->nbytes});
      }
      cpu.disk_file = path;
      cpu.disk_slots = layout.disk.slots;
      plan.push_back({backend_kind::cpu, std::move(cpu)});
    }
    return make_staged_model(std::move(f), eo, hp, plan);
  } catch (const format_error&) {
    throw;
  } catch (const error& e) {
    throw error(path.string() + ": " + e.what());
  }
}

session::session(model& m, std::uint32_t seq) : model_(&m), seq_(seq) {
  if (seq >= m.kv().n_seq())
    throw error("session: sequence " + std::to_string(seq) + " out of range (" + std::to_string(m.kv().n_seq()) + ")");
  const auto& opt = m.options();
  const std::uint32_t B = opt.n_batch;
  pos_.resize(B);
  seq_ids_.assign(B, seq);
  want_.resize(B);
  last_.resize(m.hparams().n_vocab);
  const std::uint32_t rows = opt.max_outputs ? std::min(opt.max_outputs, B) : B;
  chunk_logits_.resize(std::size_t(rows) * m.hparams().n_vocab);
}

void session::run(std::span<const std::int32_t> toks, std::uint32_t start_pos, bool every_row, float* out) {
  const std::uint32_t V = model_->hparams().n_vocab;
  const std::uint32_t B = model_->options().n_batch;
  const std::uint32_t max_rows = std::uint32_t(chunk_logits_.size() / V);
  const std::uint32_t step = every_row ? std::min(B, max_rows) : B;
  for (std::size_t i = 0; i < toks.size(); i += step) {
    const std::uint32_t n = std::uint32_t(std::min<std::size_t>(step, toks.size() - i));
    for (std::uint32_t j = 0; j < n; ++j) {
      pos_[j] = std::int32_t(start_pos + i + j);
      want_[j] = every_row || (i + j + 1 == toks.size());
    }
    const graph::batch b{toks.subspan(i, n), std::span(pos_).first(n), std::span(seq_ids_).first(n), std::span(want_).first(n)};
    model_->forward(b, chunk_logits_);
    if (every_row) std::copy_n(chunk_logits_.begin(), std::size_t(n) * V, out + i * V);
    else if (i + n == toks.size()) std::copy_n(chunk_logits_.begin(), V, last_.begin());
    // A prefill of several steps reports each one (strata-run draws a bar for long prompts).
    if (toks.size() > step && model_->options().progress)
      model_->options().progress({"prefill", i + n, toks.size(), "tokens"});
  }
  if (every_row && !toks.empty()) std::copy_n(out + (toks.size() - 1) * V, V, last_.begin());
}

std::span<const float> session::prefill(std::span<const std::int32_t> prompt, std::vector<float>* all_logits) {
  if (prompt.empty()) throw error("empty prompt");
  const auto& hp = model_->hparams();
  const std::uint32_t cap = model_->kv().capacity();
  if (prompt.size() > cap)
    throw error("prompt of " + std::to_string(prompt.size()) + " tokens is longer than the context size " + std::to_string(cap));
  auto& kv = model_->kv();
  std::uint32_t keep = all_logits ? 0 : kv.common_prefix(seq_, prompt);
  if (keep == prompt.size()) --keep;  // re-evaluate the last token to get its logits
  kv.truncate(seq_, keep);
  reused_ = keep;
  const auto rest = prompt.subspan(keep);
  if (all_logits) {
    all_logits->resize(prompt.size() * std::size_t(hp.n_vocab));
    run(rest, keep, true, all_logits->data());
  } else {
    run(rest, keep, false, nullptr);
  }
  return last_;
}

std::int32_t session::decode_argmax(std::int32_t token) {
  if (n_past() + 1 > model_->kv().capacity())
    throw error("context full: " + std::to_string(n_past()) + " tokens of " + std::to_string(model_->kv().capacity()));
  const std::int32_t t[1] = {token};
  pos_[0] = std::int32_t(n_past());
  want_[0] = 1;
  const graph::batch b{t, std::span(pos_).first(1), std::span(seq_ids_).first(1), std::span(want_).first(1)};
  std::int32_t id = -1;
  model_->forward_argmax(b, std::span(&id, 1));
  return id;
}

std::span<const float> session::decode(std::int32_t token) {
  const std::int32_t t[1] = {token};
  if (n_past() + 1 > model_->kv().capacity())
    throw error("context full: " + std::to_string(n_past()) + " tokens of " + std::to_string(model_->kv().capacity()));
  run(t, n_past(), false, nullptr);
  return last_;
}

}  // namespace strata::rt

namespace strata::rt {
std::vector<std::string> vulkan_devices() {
#ifdef STRATA_HAS_VULKAN
  try {
    return gpu::list_devices();
  } catch (const std::exception&) {
    return {};
  }
#else
  return {};
#endif
}
}  // namespace strata::rt
