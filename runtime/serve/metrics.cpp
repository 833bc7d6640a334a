// Prometheus text for /metrics (metrics.hpp).
#include "metrics.hpp"

#include <cstdio>

namespace strata::serve {
namespace {
void family(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}
void sample(std::string& out, const char* name, double v, const std::string& labels = {}) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  out += name;
  out += labels;
  out += ' ';
  out += buf;
  out += '\n';
}
// A metric without labels: its family header and its one sample.
void metric(std::string& out, const char* name, const char* type, const char* help, double v) {
  family(out, name, type, help);
  sample(out, name, v);
}
}  // namespace

std::string server_metrics::render(const rt::scheduler_stats& s, std::uint32_t slots) const {
  std::string out;
  {
    std::lock_guard lk(mu_);
    family(out, "strata_requests_total", "counter", "HTTP requests by endpoint and status.");
    for (const auto& [key, n] : requests_)
      sample(out, "strata_requests_total", double(n),
             "{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}");
    metric(out, "strata_time_to_first_token_seconds_sum", "counter",
           "Summed time to first token of generations.", ttft_sum_);
    metric(out, "strata_time_to_first_token_seconds_count", "counter",
           "Generations that produced a first token.", double(ttft_count_));
  }
  metric(out, "strata_prompt_tokens_total", "counter",
         "Prompt tokens evaluated (prefix-cache hits excluded).", double(s.prompt_tokens));
  metric(out, "strata_generation_tokens_total", "counter", "Tokens generated.", double(s.generated_tokens));
  metric(out, "strata_prompt_cache_hit_tokens_total", "counter",
         "Prompt tokens reused from the prefix cache.", double(s.cached_prompt_tokens));
  metric(out, "strata_prefix_cache_hits_total", "counter",
         "Requests that reused a cached prefix.", double(s.prefix_cache_hits));
  metric(out, "strata_forward_steps_total", "counter", "Batched forward passes.", double(s.steps));
  metric(out, "strata_busy_seconds_total", "counter", "Seconds spent in forward passes and sampling.", s.busy_seconds);
  metric(out, "strata_constrained_tokens_total", "counter",
         "Tokens sampled under a grammar (structured output, tool calls).", double(s.constrained_tokens));
  metric(out, "strata_constraint_seconds_total", "counter",
         "Seconds spent sampling grammar-constrained tokens (the mask, the masked draw, advancing the grammar).",
         s.constraint_seconds);
  metric(out, "strata_embedding_tokens_total", "counter",
         "Input tokens evaluated for /v1/embeddings.", double(s.embedded_tokens));
  metric(out, "strata_generation_tokens_per_second", "gauge",
         "Generated tokens per busy second since start.",
         s.busy_seconds > 0 ? double(s.generated_tokens) / s.busy_seconds : 0.0);
  metric(out, "strata_requests_running", "gauge", "Sequences holding a slot.", s.running);
  metric(out, "strata_requests_waiting", "gauge", "Requests queued for a slot.", s.waiting);
  metric(out, "strata_slots", "gauge", "Sequences that can run at once.", slots);
  metric(out, "strata_kv_cache_used_tokens", "gauge",
         "KV cache token slots in use (cached prefixes included).", s.kv_used);
  metric(out, "strata_kv_cache_usage_ratio", "gauge",
         "Fraction of the KV cache pool in use.", s.kv_total ? double(s.kv_used) / s.kv_total : 0.0);
  if (const auto& r = s.recordings; r.steps) {  // a recording backend (Vulkan): the rest of the steps replayed
    metric(out, "strata_steps_recorded_total", "counter",
           "Steps recorded into GPU command buffers (one per step size and form; every other step replays one).",
           double(r.steps));
    metric(out, "strata_step_recording_seconds_total", "counter", "Host seconds spent recording those steps.", r.ms / 1e3);
  }
  if (const auto& h = s.handoffs; h.steps) {  // the Vulkan backend's CPU hand-offs (memory tiers)
    metric(out, "strata_gpu_steps_total", "counter", "Steps the GPU backend ran since load.", double(h.steps));
    metric(out, "strata_gpu_step_tokens_total", "counter", "Tokens of those steps (per token: divide).", double(h.tokens));
    metric(out, "strata_handoff_steps_total", "counter", "Steps with at least one hand-off between the GPU and the CPU.",
           double(h.handoff_steps));
    metric(out, "strata_handoffs_total", "counter",
           "Hand-offs between the GPU and the CPU (routed experts on the CPU, GPU-cached blocks, dense FFNs on the CPU).",
           double(h.handoffs));
  }
  if (const auto& c = s.expert_cache; c.layers) {  // GPU-cached MoE experts (--expert-cache)
    metric(out, "strata_expert_cache_slots", "gauge", "GPU expert slots per cached MoE layer.", c.slots);
    metric(out, "strata_expert_cache_layers", "gauge", "MoE layers whose routed experts are GPU-cached.", c.layers);
    metric(out, "strata_expert_cache_hits_total", "counter",
           "Routed experts found in their layer's GPU slots (per step).", double(c.hits));
    metric(out, "strata_expert_cache_misses_total", "counter",
           "Routed experts uploaded into a GPU slot (per step).", double(c.misses));
    metric(out, "strata_expert_cache_evictions_total", "counter",
           "Experts whose GPU slot was taken by another.", double(c.evictions));
    metric(out, "strata_expert_cache_uploaded_bytes_total", "counter",
           "Expert weight bytes copied host -> GPU slots.", double(c.bytes_uploaded));
    metric(out, "strata_expert_cache_tokens_total", "counter",
           "Tokens of the steps the cache served (bytes per token: divide).", double(c.tokens));
    metric(out, "strata_expert_cache_cpu_blocks_total", "counter",
           "Layer-steps whose experts ran on the CPU (more experts than slots, or misses sent there).", double(c.cpu_blocks));
    metric(out, "strata_expert_cache_miss_cpu_blocks_total", "counter",
           "Of those, layer-steps sent to the CPU for their missed experts (STRATA_VK_CACHE_CPU_MISSES).",
           double(c.miss_cpu_blocks));
    metric(out, "strata_expert_cache_prefetched_total", "counter",
           "Experts uploaded into a GPU slot ahead of their layer's step (router-driven prefetch).", double(c.prefetched));
    metric(out, "strata_expert_cache_prefetch_bytes_total", "counter",
           "Expert weight bytes of those uploads (also in strata_expert_cache_uploaded_bytes_total).",
           double(c.prefetch_bytes));
    metric(out, "strata_expert_cache_prefetch_used_total", "counter",
           "Experts uploaded ahead that their step then used.", double(c.prefetch_used));
    metric(out, "strata_expert_cache_prefetch_wasted_total", "counter",
           "Experts uploaded ahead and evicted before any use.", double(c.prefetch_wasted));
    metric(out, "strata_expert_cache_predicted_total", "counter",
           "Routed experts the layer before predicted (recall: divide by strata_expert_cache_routed_predicted_total).",
           double(c.predicted_routed));
    metric(out, "strata_expert_cache_routed_predicted_total", "counter",
           "Routed experts of layer-steps that had a prediction.", double(c.routed_with_prediction));
    metric(out, "strata_expert_cache_lookup_blocks_total", "counter",
           "Layer-steps whose kernels mapped experts to slots themselves (misses read from host memory, no split).",
           double(c.lookup_blocks));
    metric(out, "strata_expert_cache_host_read_bytes_total", "counter",
           "Expert weight bytes the GPU's kernels read from host memory over PCIe on a miss.", double(c.host_read_bytes));
    metric(out, "strata_expert_cache_share_blocks_total", "counter",
           "Layer-steps sent to the CPU for a miss with the GPU computing a share of the expert beside it.",
           double(c.share_blocks));
    metric(out, "strata_expert_cache_staged_blocks_total", "counter",
           "Layer-steps of prompt steps that copied the layer's experts whole into the GPU staging pair first.",
           double(c.staged_blocks));
    metric(out, "strata_expert_cache_staged_bytes_total", "counter",
           "Expert weight bytes those copies moved host -> GPU.", double(c.staged_bytes));
  }
  if (const auto& c = s.streaming; c.layers) {  // dense layer streaming (--stream-layers, --fit)
    metric(out, "strata_stream_layers", "gauge", "Blocks whose dense FFN is streamed through the GPU ring.", c.layers);
    metric(out, "strata_stream_link_layers", "gauge",
           "Of those, blocks the link still copies in the steps that compute the others on the CPU (--stream-link).",
           c.link_layers);
    metric(out, "strata_stream_ring_bytes", "gauge", "GPU memory of the layer-streaming ring (both slots).",
           double(c.ring_bytes));
    metric(out, "strata_stream_bytes_total", "counter",
           "Dense FFN weight bytes copied host -> GPU ring.", double(c.bytes_streamed));
    metric(out, "strata_stream_tokens_total", "counter",
           "Tokens of every step since load, the CPU's decode steps included (bytes per token: divide).",
           double(c.tokens));
  }
  if (const auto& c = s.expert_streaming; c.layers) {  // CPU experts streamed in prompt steps (the default)
    metric(out, "strata_expert_stream_layers", "gauge",
           "MoE blocks whose CPU-computed experts are copied to the GPU ring in long prompt steps.", c.layers);
    metric(out, "strata_expert_stream_ring_bytes", "gauge", "GPU memory of the expert ring (both slots).",
           double(c.ring_bytes));
    metric(out, "strata_expert_stream_cpu_tokens", "gauge",
           "Steps of at most this many tokens hand the experts to the CPU instead.", c.cpu_tokens);
    metric(out, "strata_expert_stream_bytes_total", "counter", "Expert weight bytes copied host -> GPU ring.",
           double(c.bytes_streamed));
    metric(out, "strata_expert_stream_tokens_total", "counter",
           "Tokens of every step since load, hand-off steps included (bytes per token: divide).", double(c.tokens));
    metric(out, "strata_expert_stream_steps_total", "counter",
           "Steps since load; those that streamed: this minus the hand-off steps.", double(c.steps));
    metric(out, "strata_expert_stream_cpu_steps_total", "counter", "Steps that handed the experts to the CPU.",
           double(c.cpu_steps));
  }
  if (const auto& c = s.disk; c.blocks) {  // the disk tier (--ram-budget short of the model, -ot ...=disk)
    metric(out, "strata_disk_blocks", "gauge", "CPU blocks read from the model file every step (O_DIRECT, io_uring).",
           c.blocks);
    metric(out, "strata_disk_ring_bytes", "gauge", "RAM of the disk tier's ring (all slots).",
           double(c.slot_bytes * c.slots));
    metric(out, "strata_disk_bytes_read_total", "counter", "Weight bytes read from the drive.", double(c.bytes_read));
    metric(out, "strata_disk_tokens_total", "counter", "Tokens of the steps that read them (bytes per token: divide).",
           double(c.tokens));
    metric(out, "strata_disk_read_seconds_total", "counter", "Time the reader spent reading (GB/s: bytes / this).",
           c.read_seconds);
    metric(out, "strata_disk_stall_seconds_total", "counter", "Time the compute thread waited for a block's bytes.",
           c.stall_seconds);
  }
  return out;
}

}  // namespace strata::serve
