// /metrics text: the GPU expert cache's families appear only when a cache runs, with the
// scheduler's snapshot of the model's counters.
#include <doctest/doctest.h>

#include <string>

#include "serve/metrics.hpp"

TEST_CASE("metrics: expert cache counters are rendered when the model GPU-caches experts") {
  strata::serve::server_metrics m;
  strata::rt::scheduler_stats s;
  CHECK(m.render(s, 1).find("strata_expert_cache") == std::string::npos);
  s.expert_cache.layers = 4;
  s.expert_cache.slots = 16;
  s.expert_cache.hits = 30;
  s.expert_cache.misses = 10;
  s.expert_cache.evictions = 6;
  s.expert_cache.bytes_uploaded = 123456789;
  s.expert_cache.tokens = 12;
  s.expert_cache.cpu_blocks = 2;
  s.expert_cache.miss_cpu_blocks = 1;
  s.expert_cache.share_blocks = 1;
  s.expert_cache.staged_blocks = 8;
  s.expert_cache.staged_bytes = 987654321;
  const std::string t = m.render(s, 1);
  CHECK(t.find("# TYPE strata_expert_cache_hits_total counter\nstrata_expert_cache_hits_total 30\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_misses_total 10\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_evictions_total 6\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_uploaded_bytes_total 123456789\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_tokens_total 12\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_cpu_blocks_total 2\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_miss_cpu_blocks_total 1\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_share_blocks_total 1\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_staged_blocks_total 8\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_staged_bytes_total 987654321\n") != std::string::npos);
  CHECK(t.find("# TYPE strata_expert_cache_slots gauge\nstrata_expert_cache_slots 16\n") != std::string::npos);
  CHECK(t.find("strata_expert_cache_layers 4\n") != std::string::npos);
  CHECK(t.find("strata_stream") == std::string::npos);
  // Prefetch's counters with the cache's (zero when prefetch is off).
  CHECK(t.find("strata_expert_cache_prefetched_total 0\n") != std::string::npos);
  s.expert_cache.predictors = 3;
  s.expert_cache.prefetched = 40;
  s.expert_cache.prefetch_bytes = 4000;
  s.expert_cache.prefetch_used = 25;
  s.expert_cache.prefetch_wasted = 9;
  s.expert_cache.predicted_routed = 70;
  s.expert_cache.routed_with_prediction = 100;
  const std::string p = m.render(s, 1);
  CHECK(p.find("# TYPE strata_expert_cache_prefetched_total counter\nstrata_expert_cache_prefetched_total 40\n") != std::string::npos);
  CHECK(p.find("strata_expert_cache_prefetch_bytes_total 4000\n") != std::string::npos);
  CHECK(p.find("strata_expert_cache_prefetch_used_total 25\n") != std::string::npos);
  CHECK(p.find("strata_expert_cache_prefetch_wasted_total 9\n") != std::string::npos);
  CHECK(p.find("strata_expert_cache_predicted_total 70\n") != std::string::npos);
  CHECK(p.find("strata_expert_cache_routed_predicted_total 100\n") != std::string::npos);
}

TEST_CASE("metrics: the GPU backend's hand-offs to the CPU are rendered once it has run a step") {
  strata::serve::server_metrics m;
  strata::rt::scheduler_stats s;
  CHECK(m.render(s, 1).find("strata_handoffs_total") == std::string::npos);  // no GPU backend
  s.handoffs.steps = 65;
  s.handoffs.tokens = 576;
  s.handoffs.handoff_steps = 64;
  s.handoffs.handoffs = 64 * 19;
  const std::string t = m.render(s, 1);
  CHECK(t.find("# TYPE strata_handoffs_total counter\nstrata_handoffs_total 1216\n") != std::string::npos);
  CHECK(t.find("strata_handoff_steps_total 64\n") != std::string::npos);
  CHECK(t.find("strata_gpu_steps_total 65\n") != std::string::npos);
  CHECK(t.find("strata_gpu_step_tokens_total 576\n") != std::string::npos);
}

TEST_CASE("metrics: layer-streaming counters are rendered when the model streams dense FFNs") {
  strata::serve::server_metrics m;
  strata::rt::scheduler_stats s;
  CHECK(m.render(s, 1).find("strata_stream") == std::string::npos);
  s.streaming.layers = 3;
  s.streaming.ring_bytes = 4096;
  s.streaming.bytes_streamed = 987654321;
  s.streaming.tokens = 17;
  s.streaming.link_layers = 1;
  const std::string t = m.render(s, 1);
  CHECK(t.find("# TYPE strata_stream_bytes_total counter\nstrata_stream_bytes_total 987654321\n") != std::string::npos);
  CHECK(t.find("strata_stream_tokens_total 17\n") != std::string::npos);
  CHECK(t.find("# TYPE strata_stream_layers gauge\nstrata_stream_layers 3\n") != std::string::npos);
  CHECK(t.find("strata_stream_ring_bytes 4096\n") != std::string::npos);
  CHECK(t.find("# TYPE strata_stream_link_layers gauge\nstrata_stream_link_layers 1\n") != std::string::npos);
}

TEST_CASE("metrics: expert-streaming counters are rendered when CPU experts stream in prompt steps") {
  strata::serve::server_metrics m;
  strata::rt::scheduler_stats s;
  CHECK(m.render(s, 1).find("strata_expert_stream") == std::string::npos);
  s.expert_streaming.layers = 18;
  s.expert_streaming.ring_bytes = 391643136;
  s.expert_streaming.cpu_tokens = 45;
  s.expert_streaming.bytes_streamed = 6582353920;
  s.expert_streaming.tokens = 576;  // one 512-token prompt step streamed, 64 decode steps handed off
  s.expert_streaming.steps = 65;
  s.expert_streaming.cpu_steps = 64;
  const std::string t = m.render(s, 1);
  CHECK(t.find("# TYPE strata_expert_stream_layers gauge\nstrata_expert_stream_layers 18\n") != std::string::npos);
  CHECK(t.find("strata_expert_stream_ring_bytes 391643136\n") != std::string::npos);
  CHECK(t.find("strata_expert_stream_cpu_tokens 45\n") != std::string::npos);
  CHECK(t.find("# TYPE strata_expert_stream_bytes_total counter\nstrata_expert_stream_bytes_total 6582353920\n") !=
        std::string::npos);
  CHECK(t.find("strata_expert_stream_tokens_total 576\n") != std::string::npos);
  CHECK(t.find("strata_expert_stream_steps_total 65\n") != std::string::npos);
  CHECK(t.find("strata_expert_stream_cpu_steps_total 64\n") != std::string::npos);
  CHECK(t.find("strata_stream_layers") == std::string::npos);  // the dense ring's counters stay apart
}
