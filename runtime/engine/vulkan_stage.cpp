// The Vulkan backend in the engine: how a stage makes, describes and profiles it, and the Vulkan
// decoder of every architecture (arch/all.hpp), instantiated here once (built with STRATA_VULKAN).
#include <cstdio>

#include "../vulkan/backend.hpp"
#include "decoder_stage.hpp"

namespace strata::rt {

template <>
struct engine_backend<gpu::backend> {
  static std::unique_ptr<gpu::backend> make(const engine_options& opt, const layer_slice& s) {
    // opt.gpu_budget is already the engine's share (model.cpp sets it from the plan, which kept
    // back device_memory.hpp's driver reserve): taking the reserve here again left --fit's plan
    // 256 MiB short of the ledger at 12G.
    return std::make_unique<gpu::backend>(gpu::backend_options{opt.device, opt.gpu_profile, {}, opt.progress, opt.gpu_budget,
                                                               s.cpu_expert_layers, opt.threads, s.cached_expert_layers,
                                                               s.expert_slots, s.streamed_layers,
                                                               s.stream_cpu_tokens, s.streamed_expert_layers,
                                                               s.expert_cpu_tokens, s.stream_link_layers,
                                                               s.stream_link_ratio, s.expert_cpu_misses,
                                                               s.expert_cache_stage, opt.f16_weights});
  }
  static model::expert_cache_counters expert_cache(const gpu::backend& be) {
    const gpu::expert_cache_stats s = be.expert_cache();
    return {s.layers,         s.slots,          s.hits,          s.misses,           s.evictions,
            s.bytes_uploaded, s.tokens,         s.gpu_blocks,    s.cpu_blocks,       s.predictors,
            s.prefetched,     s.prefetch_bytes, s.prefetch_used, s.prefetch_wasted, s.predicted_routed,
            s.routed_with_prediction, s.lookup_blocks, s.host_read_bytes, s.miss_cpu_blocks, s.cpu_miss_tokens,
            s.stage_bytes, s.staged_blocks, s.staged_bytes, s.share_blocks};
  }
  static model::stream_counters streaming(const gpu::backend& be) {
    const gpu::stream_stats s = be.streaming();
    return {s.layers, s.ring_bytes, s.host_bytes, s.bytes_per_step, s.bytes_streamed, s.tokens, s.steps,
            s.cpu_steps, s.cpu_tokens, 0, 0, s.link_layers, s.link_bytes_per_step};
  }
  static model::stream_counters expert_streaming(const gpu::backend& be) {
    const gpu::stream_stats s = be.expert_streaming();
    return {s.layers, s.ring_bytes, s.host_bytes, s.bytes_per_step, s.bytes_streamed, s.tokens, s.steps,
            s.cpu_steps, s.cpu_tokens, s.share_blocks, s.share_bytes};
  }
  static model::recording_counters step_recordings(const gpu::backend& be) {
    const gpu::step_recording_stats s = be.recordings();
    return {s.steps, s.ms, be.dispatches_per_step(), be.barriers_per_step()};
  }
  static model::handoff_counters handoffs(const gpu::backend& be) {
    const gpu::handoff_stats s = be.handoffs();
    return {s.steps, s.tokens, s.handoff_steps, s.handoffs, s.polled_steps};
  }
  static std::uint32_t step_granule(const gpu::backend& be) { return be.step_granule(); }
  static std::string describe(const gpu::backend& be) { return be.description(); }
  static std::string startup_report(const gpu::backend& be) {
    const auto& s = be.startup();
    char buf[256];
    std::snprintf(buf, sizeof buf,
                  "%u pipelines in %.0f ms (%u SPIR-V compiled, %u from cache); %.2f GiB of weights uploaded in %.0f ms",
                  s.pipelines, s.pipelines_ms, s.spirv_compiled, s.spirv_cached, double(s.weight_bytes) / double(1ull << 30),
                  s.upload_ms);
    // The engine's own account of GPU memory (what --gpu-budget caps), to set beside nvidia-smi.
    const gpu::memory_use_bytes m = be.memory_use();
    const auto mib = [](std::uint64_t b) { return double(b) / double(1ull << 20); };
    char mem[320];
    std::snprintf(mem, sizeof mem, "; GPU memory %.1f MiB (weights %.1f, KV %.1f, scratch %.1f)", mib(m.total()),
                  mib(m.weights), mib(m.kv), mib(m.scratch));
    std::string out = std::string(buf) + mem;
    if (m.budget) {  // the engine's share of --gpu-budget (device_memory.hpp gpu_driver_reserve)
      std::snprintf(mem, sizeof mem, " of the %.1f MiB --gpu-budget leaves the engine", mib(m.budget));
      out += mem;
    }
    if (m.driver_usage) {
      std::snprintf(mem, sizeof mem, ", %.1f MiB in use as the driver reports it (VK_EXT_memory_budget)", mib(m.driver_usage));
      out += mem;
    }
    if (s.f16_copies) {
      std::snprintf(mem, sizeof mem,
                    "; f16 copies of %u of %u weight matrices for prompt steps (%.1f MiB, expanded in %.0f ms; "
                    "--f16-weights off saves them)",
                    s.f16_copies, s.f16_candidates, mib(s.f16_copy_bytes), s.f16_copy_ms);
      out += mem;
    }
    if (const gpu::expert_cache_stats c = be.expert_cache(); c.layers) {
      std::snprintf(mem, sizeof mem, "; expert cache: %u slots x %u MoE layers (%.1f MiB on the GPU, %.1f MiB in host memory)",
                    c.slots, c.layers, mib(c.slot_bytes), mib(c.host_bytes));
      out += mem;
      if (c.lookup)
        out += ", mapped to slots by the expert kernels (a miss read from host memory over the link; admissions between steps)";
      if (c.cpu_miss_tokens) {
        std::snprintf(mem, sizeof mem,
                      c.miss_handoff ? ", steps of up to %u tokens hand each cached layer to the host after its router, "
                                       "which computes the layer's experts on the CPU when they miss"
                                     : ", steps of up to %u tokens split at each cached layer, their misses computed on the CPU",
                      c.cpu_miss_tokens);
        out += mem;
        if (c.miss_handoff && c.miss_slice_percent) {
          std::snprintf(mem, sizeof mem,
                        " (in single-token steps the GPU computing the first %u%% of a missed expert's columns from host "
                        "memory beside the CPU)",
                        c.miss_slice_percent);
          out += mem;
        }
      }
      if (c.stage_bytes) {
        std::snprintf(mem, sizeof mem,
                      ", prompt steps of more than %u tokens copying each cached layer's experts whole into a %.1f MiB "
                      "staging pair on the GPU",
                      c.stage_tokens, mib(c.stage_bytes));
        out += mem;
      }
      if (c.predictors) {
        std::snprintf(mem, sizeof mem, ", %u blocks prefetched from the block before's router prediction", c.predictors);
        out += mem;
      }
    }
    if (const gpu::stream_stats s = be.expert_streaming(); s.layers) {
      std::snprintf(mem, sizeof mem,
                    "; expert streaming: routed experts of %u CPU blocks (%.1f MiB pinned) through a 2-slot ring (%.1f MiB "
                    "on the GPU) in steps of more than %u tokens, %.1f MiB per such step",
                    s.layers, mib(s.host_bytes), mib(s.ring_bytes), s.cpu_tokens, mib(s.bytes_per_step));
      out += mem;
    }
    if (const gpu::stream_stats s = be.streaming(); s.layers) {
      std::snprintf(mem, sizeof mem,
                    "; layer streaming: dense FFN of %u blocks (%.1f MiB pinned) through a 2-slot ring (%.1f MiB on the "
                    "GPU), %.1f MiB streamed per step",
                    s.layers, mib(s.host_bytes), mib(s.ring_bytes), mib(s.bytes_per_step));
      out += mem;
      if (s.cpu_tokens) {
        std::snprintf(mem, sizeof mem, " (steps of <= %u tokens compute them on the CPU instead", s.cpu_tokens);
        out += mem;
        if (s.link_layers) {
          std::snprintf(mem, sizeof mem, ", but for %u whose %.1f MiB the link copies meanwhile", s.link_layers,
                        mib(s.link_bytes_per_step));
          out += mem;
        }
        out += ")";
      }
    }
    return out;
  }
  static std::vector<model::kernel_time> kernel_profile(const gpu::backend& be) {
    std::vector<model::kernel_time> out;
    for (const auto& k : be.profile()) out.push_back({k.label, k.total_ms, k.calls, k.weight_bytes});
    return out;
  }
  static void reset_kernel_profile(gpu::backend& be) { be.reset_profile(); }
};

std::unique_ptr<stage> make_vulkan_stage(const gguf::reader& r, const engine_options& opt, const layer_slice& layers) {
  return make_decoder_stage<gpu::backend>(r, opt, layers);
}

}  // namespace strata::rt
