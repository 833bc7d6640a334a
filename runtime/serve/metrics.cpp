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
}  // namespace

std::string server_metrics::render(const rt::scheduler_stats& s, std::uint32_t slots) const {
  std::string out;
  {
    std::lock_guard lk(mu_);
    family(out, "strata_requests_total", "counter", "HTTP requests by endpoint and status.");
    for (const auto& [key, n] : requests_)
      sample(out, "strata_requests_total", double(n),
             "{endpoint=\"" + key.first + "\",status=\"" + std::to_string(key.second) + "\"}");
    family(out, "strata_time_to_first_token_seconds_sum", "counter", "Summed time to first token of generations.");
    sample(out, "strata_time_to_first_token_seconds_sum", ttft_sum_);
    family(out, "strata_time_to_first_token_seconds_count", "counter", "Generations that produced a first token.");
    sample(out, "strata_time_to_first_token_seconds_count", double(ttft_count_));
  }
  family(out, "strata_prompt_tokens_total", "counter", "Prompt tokens evaluated (prefix-cache hits excluded).");
  sample(out, "strata_prompt_tokens_total", double(s.prompt_tokens));
  family(out, "strata_generation_tokens_total", "counter", "Tokens generated.");
  sample(out, "strata_generation_tokens_total", double(s.generated_tokens));
  family(out, "strata_prompt_cache_hit_tokens_total", "counter", "Prompt tokens reused from the prefix cache.");
  sample(out, "strata_prompt_cache_hit_tokens_total", double(s.cached_prompt_tokens));
  family(out, "strata_prefix_cache_hits_total", "counter", "Requests that reused a cached prefix.");
  sample(out, "strata_prefix_cache_hits_total", double(s.prefix_cache_hits));
  family(out, "strata_forward_steps_total", "counter", "Batched forward passes.");
  sample(out, "strata_forward_steps_total", double(s.steps));
  family(out, "strata_busy_seconds_total", "counter", "Seconds spent in forward passes and sampling.");
  sample(out, "strata_busy_seconds_total", s.busy_seconds);
  family(out, "strata_constrained_tokens_total", "counter", "Tokens sampled under a grammar (structured output, tool calls).");
  sample(out, "strata_constrained_tokens_total", double(s.constrained_tokens));
  family(out, "strata_constraint_seconds_total", "counter",
         "Seconds spent sampling grammar-constrained tokens (the mask, the masked draw, advancing the grammar).");
  sample(out, "strata_constraint_seconds_total", s.constraint_seconds);
  family(out, "strata_embedding_tokens_total", "counter", "Input tokens evaluated for /v1/embeddings.");
  sample(out, "strata_embedding_tokens_total", double(s.embedded_tokens));
  family(out, "strata_generation_tokens_per_second", "gauge", "Generated tokens per busy second since start.");
  sample(out, "strata_generation_tokens_per_second", s.busy_seconds > 0 ? double(s.generated_tokens) / s.busy_seconds : 0.0);
  family(out, "strata_requests_running", "gauge", "Sequences holding a slot.");
  sample(out, "strata_requests_running", s.running);
  family(out, "strata_requests_waiting", "gauge", "Requests queued for a slot.");
  sample(out, "strata_requests_waiting", s.waiting);
  family(out, "strata_slots", "gauge", "Sequences that can run at once.");
  sample(out, "strata_slots", slots);
  family(out, "strata_kv_cache_used_tokens", "gauge", "KV cache token slots in use (cached prefixes included).");
  sample(out, "strata_kv_cache_used_tokens", s.kv_used);
  family(out, "strata_kv_cache_usage_ratio", "gauge", "Fraction of the KV cache pool in use.");
  sample(out, "strata_kv_cache_usage_ratio", s.kv_total ? double(s.kv_used) / s.kv_total : 0.0);
  if (const auto& c = s.expert_cache; c.layers) {  // GPU-cached MoE experts (--expert-cache)
    family(out, "strata_expert_cache_slots", "gauge", "GPU expert slots per cached MoE layer.");
    sample(out, "strata_expert_cache_slots", c.slots);
    family(out, "strata_expert_cache_layers", "gauge", "MoE layers whose routed experts are GPU-cached.");
    sample(out, "strata_expert_cache_layers", c.layers);
    family(out, "strata_expert_cache_hits_total", "counter", "Routed experts found in their layer's GPU slots (per step).");
    sample(out, "strata_expert_cache_hits_total", double(c.hits));
    family(out, "strata_expert_cache_misses_total", "counter", "Routed experts uploaded into a GPU slot (per step).");
    sample(out, "strata_expert_cache_misses_total", double(c.misses));
    family(out, "strata_expert_cache_evictions_total", "counter", "Experts whose GPU slot was taken by another.");
    sample(out, "strata_expert_cache_evictions_total", double(c.evictions));
    family(out, "strata_expert_cache_uploaded_bytes_total", "counter", "Expert weight bytes copied host -> GPU slots.");
    sample(out, "strata_expert_cache_uploaded_bytes_total", double(c.bytes_uploaded));
    family(out, "strata_expert_cache_tokens_total", "counter", "Tokens of the steps the cache served (bytes per token: divide).");
    sample(out, "strata_expert_cache_tokens_total", double(c.tokens));
    family(out, "strata_expert_cache_cpu_blocks_total", "counter",
           "Layer-steps that routed more experts than slots and ran the experts on the CPU.");
    sample(out, "strata_expert_cache_cpu_blocks_total", double(c.cpu_blocks));
  }
  return out;
}

}  // namespace strata::serve
