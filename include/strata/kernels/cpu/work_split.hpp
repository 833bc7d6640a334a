// How the CPU backend cuts packed matmuls into pool items. Every item is a
// claim of the pool's shared word and (see thread_pool::set_batched_done) a count of finished
// items: with many threads, items of one 16-row group (9 KiB of Q4_K at K = 1024, well under a
// microsecond of streaming) made those atomics, on lines every thread writes, cost about as much
// as the items. The engine fills this from STRATA_CPU_* variables (runtime/engine/cpu_stage.cpp)
// so the old split can be A/B'd on one binary; the backend's defaults are these.
#pragma once
#include <cstddef>

namespace strata::kernels::cpu {

struct work_split {
  // A batch's (prefill's) groups: each thread's share cut in this many items, each also within
  // 256 KiB of weights (the split before work_split existed: 4).
  unsigned prefill_chunks_per_thread = 4;
  // A batch's gemm whose group chunks are fewer than threads × this many also cuts its tokens
  // (whole 16-token tiles) into as many parts as bring its items up to it: with 16 threads a
  // Qwen3-0.6B attn_output or ffn_down (64 groups) was 4 one-group items a thread, and a
  // thread that took the last one alone decided the job's end (0: no token parts, as before).
  unsigned prefill_min_items_per_thread = 0;
  // swiglu_ffn on batches of at least this many tokens runs SwiGLU (and down's activation
  // quantization) as its own job split by tokens, after gate and up, instead of on the thread
  // that finishes each 256-row block (0: always the latter, as before).
  unsigned swiglu_pass_min_tokens = 64;
  // Attention with fewer items (tiles x KV heads) than threads, a decode step's, splits each KV
  // head's query heads over more tiles (false: one tile per KV head, as before). Qwen3-0.6B has
  // 8 KV heads: 16 threads left half idle in decode attention.
  bool decode_attention_split_heads = true;
  // A decode matmul's groups: each thread's share cut in this many items (the split before
  // work_split existed: 8).
  unsigned decode_chunks_per_thread = 8;
  // ... but no item smaller than this many weight bytes (0: no floor, the old split). Only
  // bites from ~8 threads up on Qwen3-0.6B shapes (2 threads already take 36 KiB or more).
  std::size_t decode_min_item_bytes = 32u << 10;
};

}  // namespace strata::kernels::cpu
