// Continuous-batching scheduler over one rt::model: requests queue up (bounded), take a KV
// sequence ("slot") whose cached tokens share the longest prefix with their prompt, and then every
// step runs ONE forward pass holding the next token of every decoding sequence plus at most
// prefill_chunk prompt tokens (chunked prefill), so weights are read once per step, running
// streams never wait for a whole prefill, and the shortest pending prompt goes first so a short
// request starts promptly beside a long one. The design is backend-agnostic: only the per-step
// token budget (n_batch, prefill_chunk) differs between a CPU and a GPU model. Results flow back
// through generation_stream objects that a server polls.
#pragma once
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "strata/runtime/pooling.hpp"
#include "strata/runtime/token_constraint.hpp"
#include "strata/sampling/chain.hpp"
#include "strata/sampling/logprobs.hpp"
#include "strata/sampling/stop.hpp"
#include "strata/tokenizer/tokenizer.hpp"

namespace strata::rt {

enum class finish_reason : std::uint8_t {
  none,
  eog,           // the model ended its turn
  max_tokens,    // the request's token limit
  stop_string,   // a stop string matched (stop_index says which)
  context_full,  // the sequence or the KV pool ran out of room
  cancelled,     // the client went away
  error,         // see generation_stream::state::error
  embedded,      // an embedding request: state::embedding holds the pooled vector
};

// Log-probabilities of one generated token (OpenAI logprobs), from the raw logits.
struct token_logprobs {
  static constexpr std::size_t max_top = 20;  // the OpenAI API's top_logprobs limit
  std::int32_t token = 0;
  float logprob = 0;
  std::uint32_t n_top = 0;                    // entries of `top` in use, most likely first
  std::array<sampling::token_logprob, max_top> top{};
};

// The output side of one request, shared by the scheduler thread (writer) and a server
// connection (reader). The writer appends text and calls the notify hook; the reader takes
// whatever accumulated since its last take().
class generation_stream {
 public:
  struct state {
    std::string text;               // new text since the previous take()
    bool prefill_done = false;      // the prompt has been evaluated (first token sampled)
    bool done = false;
    finish_reason reason = finish_reason::none;
    std::size_t stop_index = 0;     // for finish_reason::stop_string
    std::string error;              // for finish_reason::error
    std::uint32_t prompt_tokens = 0;
    std::uint32_t cached_tokens = 0;      // prompt tokens reused from the prefix cache
    std::uint32_t completion_tokens = 0;  // generated tokens, end-of-turn token excluded
    std::vector<token_logprobs> logprobs; // new tokens' log-probabilities, when requested
    std::vector<float> embedding;         // finish_reason::embedded: the pooled, L2-normalized vector
  };

  // Called (from the scheduler thread) after new output; must be cheap and thread-safe.
  void set_notify(std::function<void()> fn) { notify_ = std::move(fn); }

  // Moves new text into `out.text` (replacing it) and copies the rest of the state.
  void take(state& out) {
    std::lock_guard lk(mu_);
    out.text.clear();
    out.text.swap(st_.text);
    out.logprobs.clear();  // the two vectors trade storage, so neither side reallocates for long
    out.logprobs.swap(st_.logprobs);
    if (st_.done) out.embedding = st_.embedding;
    out.prefill_done = st_.prefill_done;
    out.done = st_.done;
    out.reason = st_.reason;
    out.stop_index = st_.stop_index;
    out.error = st_.error;
    out.prompt_tokens = st_.prompt_tokens;
    out.cached_tokens = st_.cached_tokens;
    out.completion_tokens = st_.completion_tokens;
  }
  void cancel() noexcept { cancelled_.store(true, std::memory_order_relaxed); }
  bool cancelled() const noexcept { return cancelled_.load(std::memory_order_relaxed); }

  // Scheduler side.
  void on_prefill(std::uint32_t prompt_tokens, std::uint32_t cached) {
    std::lock_guard lk(mu_);
    st_.prefill_done = true;
    st_.prompt_tokens = prompt_tokens;
    st_.cached_tokens = cached;
  }
  void on_text(std::string_view t, std::uint32_t completion_tokens, const token_logprobs* lp = nullptr) {
    std::lock_guard lk(mu_);
    st_.text += t;
    st_.completion_tokens = completion_tokens;
    if (lp) st_.logprobs.push_back(*lp);
  }
  void on_embedding(std::span<const float> v) {
    std::lock_guard lk(mu_);
    st_.embedding.assign(v.begin(), v.end());
  }
  void on_finish(finish_reason r, std::size_t stop_index = 0, std::string err = {}) {
    {
      std::lock_guard lk(mu_);
      st_.done = true;
      st_.reason = r;
      st_.stop_index = stop_index;
      st_.error = std::move(err);
    }
    notify();
  }
  void notify() {
    if (notify_) notify_();
  }

 private:
  std::mutex mu_;
  state st_;
  std::atomic<bool> cancelled_{false};
  std::function<void()> notify_;
};

// What to generate. The sampler and stop conditions are built (and validated) by the caller, so
// bad parameters are reported before anything is queued.
struct generation_request {
  std::vector<std::int32_t> prompt;
  sampling::sampler sampler;
  sampling::stop_conditions stop;
  std::unique_ptr<token_constraint> constraint{};  // grammar etc.; null: any token
  std::int32_t top_logprobs = -1;  // -1: no logprobs; 0..token_logprobs::max_top: chosen + that many
  // Not none: an embedding request; the prompt is evaluated without the LM head, its final-norm
  // hidden states pooled and L2-normalized, and nothing is generated (sampler and stop unused).
  pooling embed = pooling::none;

  // The row's next token is the argmax of the raw logits and nothing else is read from them: a
  // generation (not an embedding), greedy with no logit_bias or penalties (sampler::plain_greedy;
  // temperature > 0, which draws from the seeded RNG, is never plain), no constraint (dormant
  // ones included: they watch every token and may switch on), no logprobs. Only such rows may
  // take a token from a backend-side argmax instead of the host sampler.
  bool plain_greedy() const noexcept {
    return embed == pooling::none && !constraint && top_logprobs < 0 && sampler.plain_greedy();
  }
};

struct scheduler_options {
  std::uint32_t max_queue = 64;      // waiting requests beyond the running ones; more: rejected
  // Most prompt tokens per step, shared by every prompt being prefilled (0: the model's n_batch).
  // Each step's cost grows with it, so it bounds the inter-token latency of running streams
  // while prompts are prefilled; decode rows come on top (one per running stream). A step with
  // decode rows fits its prompt tokens to the model's step_granule(): it may take up to
  // granule - 1 more to fill the token tile it pays for, or leave out a tail that would open one.
  std::uint32_t prefill_chunk = 0;
  // A prompt passed over this many steps in a row (shorter ones took the budget) goes first, so
  // a stream of short requests cannot starve a long prompt.
  std::uint32_t max_prefill_skips = 8;
  // Record every step shape the loop can run before the first request (model::record_steps), so
  // that no request waits for a recording; false: shapes record on first use.
  bool record_ahead = true;
};

// Counters for /metrics (monotonic unless noted).
struct scheduler_stats {
  std::uint64_t prompt_tokens = 0;        // evaluated prompt tokens (cache hits excluded)
  std::uint64_t cached_prompt_tokens = 0; // prompt tokens served from the prefix cache
  std::uint64_t prefix_cache_hits = 0;    // requests that reused at least one cached token
  std::uint64_t generated_tokens = 0;
  std::uint64_t requests_finished = 0;
  std::uint64_t steps = 0;                // forward passes
  double busy_seconds = 0;                // time spent in forward passes and sampling
  std::uint64_t constrained_tokens = 0;   // tokens sampled under a token_constraint mask
  double constraint_seconds = 0;          // time spent sampling those under the mask and advancing the constraint
  std::uint64_t embedded_tokens = 0;      // prompt tokens evaluated for embedding requests
  std::uint32_t running = 0;              // gauge: sequences holding a slot
  std::uint32_t waiting = 0;              // gauge: queued requests
  std::uint32_t kv_used = 0, kv_total = 0;  // gauge: KV token slots in use / in the pool
  model::expert_cache_counters expert_cache;  // the GPU expert cache's counters (--expert-cache), after the last step
  model::stream_counters streaming;           // dense layer streaming's counters (--stream-layers), after the last step
  model::stream_counters expert_streaming;    // CPU experts streamed through the expert ring in prompt steps
  model::disk_counters disk;                  // the disk tier's counters (CPU blocks read from the file), after the last step
  model::recording_counters recordings;       // steps the GPU recorded (the rest replayed), after the last step
  model::handoff_counters handoffs;           // CPU hand-offs of the steps since load (memory tiers), after the last step
};

class scheduler {
 public:
  scheduler(model& m, const tokenizer::tokenizer& tok, scheduler_options opt = {});
  ~scheduler();
  scheduler(const scheduler&) = delete;
  scheduler& operator=(const scheduler&) = delete;

  // Queues a request; false when the queue is full (the caller answers 429/503). Throws
  // strata::error for an empty prompt or one that cannot fit the context.
  bool submit(std::shared_ptr<generation_stream> out, generation_request req);
  scheduler_stats stats() const;
  std::uint32_t context_size() const noexcept { return model_->kv().capacity(); }
  std::uint32_t slots() const noexcept { return model_->kv().n_seq(); }
  // The step shapes recorded before the first request (model::record_steps; zeros off Vulkan).
  model::recording_counters recorded_ahead() const noexcept { return ahead_; }
  // Finishes every request (reason: cancelled) and joins the worker; idempotent.
  void shutdown();

 private:
  struct slot;
  struct job {
    std::shared_ptr<generation_stream> out;
    generation_request req;
  };
  void loop();
  void admit(std::unique_lock<std::mutex>& lk);
  bool step();
  // step()'s parts: rows of the batch (decodes, then prompt chunks), the pass, the sampling.
  std::uint32_t gather_decodes();
  std::uint32_t gather_prompts(std::uint32_t n);
  bool run_forward(std::uint32_t n);
  std::uint32_t sample_rows(std::uint32_t n);
  bool greedy_step(std::uint32_t n) const;
  // A row's next token: drawn from its logits, or the backend's argmax in a greedy step (empty logits).
  void sample_row(slot& s, std::span<const float> logits, std::int32_t argmax, std::uint32_t& generated);
  void embed_pass();  // the step's embedding rows, in a forward pass of their own
  void finish(slot& s, finish_reason r, std::size_t stop_index = 0, std::string err = {});
  bool make_room(std::uint32_t seq, std::uint32_t n_tokens);
  void publish(bool stepped, double step_seconds, std::uint32_t generated);  // stats_ after a step

  model* model_;
  const tokenizer::tokenizer* tok_;
  scheduler_options opt_;
  std::vector<slot> slots_;
  std::uint64_t clock_ = 0;        // admission counter: least recently used idle slot is evicted first
  std::uint32_t step_blocks_ = 0;  // KV blocks the rows gathered so far in this step will take

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<job> queue_;
  std::size_t busy_ = 0;  // slots holding a request (guarded by mu_; slots_ is the worker's)
  bool stopping_ = false;
  scheduler_stats stats_;

  // Per-step buffers, sized once.
  std::vector<std::int32_t> tokens_, positions_;
  std::vector<std::uint32_t> seq_ids_;
  std::vector<std::uint8_t> want_;
  std::vector<std::uint32_t> row_slot_;
  std::vector<slot*> prefill_order_;
  model::recording_counters ahead_;
  std::uint32_t granule_ = 1;  // model::step_granule(): mixed steps' prompt tokens are fitted to it
  std::vector<float> logits_;
  // Steps whose every output row samples plain greedy (no constraint, no logprobs) read back one
  // id per row (the backend's argmax), not n_vocab floats: 4 bytes instead of ~600 KB a row.
  std::vector<std::int32_t> argmax_;
  bool argmax_step_ = false;
  std::vector<float> embd_;           // [max rows][n_embd] of an embedding pass
  token_logprobs lp_;                 // the row being sampled
  double constraint_seconds_ = 0;     // since the last publish()
  std::uint32_t constrained_ = 0, embedded_ = 0;
  std::thread worker_;
};

}  // namespace strata::rt
