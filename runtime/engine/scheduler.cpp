// Continuous batching: one worker thread owns the model. Each step gathers the next token of
// every decoding sequence and fills the rest of the batch with prompt chunks (at most
// prefill_chunk tokens, shortest remaining prompt first), runs one forward pass, samples every
// output row and streams text back. Batching never changes a sequence's
// numbers: every op is row-wise (the CPU matmul's 4-token kernel equals its 1-token kernel bit
// for bit), so a request decodes the same tokens alone or among 31 others.
#include "strata/runtime/scheduler.hpp"

#include <algorithm>
#include <optional>
#include <tuple>

#include "strata/tokenizer/streaming_detokenizer.hpp"

namespace strata::rt {

struct scheduler::slot {
  std::uint32_t seq = 0;
  std::shared_ptr<generation_stream> out;  // null: idle (the KV cache keeps its tokens)
  std::optional<generation_request> req;
  std::optional<tokenizer::streaming_detokenizer> detok;
  std::uint32_t prompt_done = 0;  // prompt tokens already in the KV cache
  bool decoding = false;          // prompt evaluated; next_token is to be fed
  std::int32_t next_token = 0;
  std::uint64_t last_used = 0;
  std::uint32_t cached = 0;       // prompt tokens reused from the cache at admission
  std::uint32_t skipped = 0;      // steps in a row this prompt got no prefill tokens
  std::vector<float> pooled;      // embedding requests: sum (mean) or copy (cls, last) of rows
};

scheduler::scheduler(model& m, const tokenizer::tokenizer& tok, scheduler_options opt)
    : model_(&m), tok_(&tok), opt_(opt), granule_(m.step_granule()) {
  const auto& eo = m.options();
  const std::uint32_t n_seq = m.kv().n_seq();
  if (opt_.prefill_chunk == 0 || opt_.prefill_chunk > eo.n_batch) opt_.prefill_chunk = eo.n_batch;
  const std::uint32_t max_rows = eo.max_outputs ? std::min(eo.max_outputs, eo.n_batch) : eo.n_batch;
  if (max_rows < std::min(n_seq, eo.n_batch))
    throw error("scheduler: the model must allow one logits row per sequence (max_outputs " +
                std::to_string(max_rows) + " < " + std::to_string(n_seq) + " sequences)");
  if (eo.n_batch < n_seq)
    throw error("scheduler: batch size " + std::to_string(eo.n_batch) + " is smaller than the " +
                std::to_string(n_seq) + " parallel sequences");
  slots_.resize(n_seq);
  for (std::uint32_t i = 0; i < n_seq; ++i) slots_[i].seq = i;
  tokens_.resize(eo.n_batch);
  positions_.resize(eo.n_batch);
  seq_ids_.resize(eo.n_batch);
  want_.resize(eo.n_batch);
  row_slot_.resize(eo.n_batch);
  logits_.resize(std::size_t(std::min(max_rows, eo.n_batch)) * m.hparams().n_vocab);
  argmax_.resize(std::min(max_rows, eo.n_batch));
  // Embedding rows are not logits rows: any prompt token may be one (mean pooling wants all).
  if (m.supports_embeddings()) embd_.resize(std::size_t(eo.n_batch) * m.hparams().n_embd);
  stats_.kv_total = m.kv().n_slots();
  // Every step shape the loop can run, recorded now rather than while requests wait for it.
  if (opt_.record_ahead) ahead_ = m.record_steps({eo.n_batch, n_seq, max_rows});
  worker_ = std::thread([this] { loop(); });
}

scheduler::~scheduler() { shutdown(); }

void scheduler::shutdown() {
  {
    std::lock_guard lk(mu_);
    if (stopping_ && !worker_.joinable()) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
  for (auto& s : slots_)
    if (s.out) finish(s, finish_reason::cancelled);
  std::lock_guard lk(mu_);
  for (auto& j : queue_) j.out->on_finish(finish_reason::cancelled);
  queue_.clear();
}

bool scheduler::submit(std::shared_ptr<generation_stream> out, generation_request req) {
  if (req.prompt.empty()) throw error("empty prompt");
  if (req.embed != pooling::none && embd_.empty())
    throw error("embeddings are not implemented on the " + model_->backend_description() + " backend");
  if (req.top_logprobs > std::int32_t(token_logprobs::max_top))
    throw error("top_logprobs " + std::to_string(req.top_logprobs) + " exceeds the maximum of " +
                std::to_string(token_logprobs::max_top));
  const std::uint32_t cap = context_size();
  if (req.embed != pooling::none && req.prompt.size() > cap)  // an embedding generates nothing: cap tokens fit
    throw error("the input has " + std::to_string(req.prompt.size()) + " tokens; the context size is " +
                std::to_string(cap));
  if (req.embed == pooling::none && req.prompt.size() >= cap)
    throw error("the prompt has " + std::to_string(req.prompt.size()) + " tokens; the context size is " +
                std::to_string(cap) + " (one more token must fit)");
  {
    std::lock_guard lk(mu_);
    if (stopping_) return false;
    // Requests waiting beyond the free slots count against the queue bound.
    if (queue_.size() >= opt_.max_queue + (slots_.size() - busy_)) return false;
    queue_.push_back({std::move(out), std::move(req)});
    stats_.waiting = std::uint32_t(queue_.size());
  }
  cv_.notify_one();
  return true;
}

scheduler_stats scheduler::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

void scheduler::finish(slot& s, finish_reason r, std::size_t stop_index, std::string err) {
  if (!s.out) return;
  if (r != finish_reason::cancelled && r != finish_reason::error && s.detok) {
    const auto f = s.req->stop.finish(s.detok->flush());
    if (f.reason == sampling::stop_reason::stop_string) {
      r = finish_reason::stop_string;
      stop_index = f.stop_index;
    }
    s.out->on_text(f.emit, std::uint32_t(s.req->stop.n_generated()));
  }
  {
    // The slot counts as free before the client hears of the finish, so its next request fits.
    std::lock_guard lk(mu_);
    --busy_;
    stats_.running = std::uint32_t(busy_);
    ++stats_.requests_finished;
  }
  const auto out = std::move(s.out);
  s.out.reset();
  s.req.reset();
  s.detok.reset();
  s.decoding = false;
  out->on_finish(r, stop_index, std::move(err));
}

// Takes queued requests into idle slots, choosing the slot whose cached tokens share the
// longest prefix with the prompt (ties: least recently used), so shared system prompts and
// repeated conversations are not recomputed.
void scheduler::admit(std::unique_lock<std::mutex>& lk) {
  auto& kv = model_->kv();
  while (!queue_.empty()) {
    slot* best = nullptr;
    std::uint32_t best_len = 0;
    for (auto& s : slots_) {
      if (s.out) continue;
      const std::uint32_t n = kv.common_prefix(s.seq, queue_.front().req.prompt);
      if (!best || n > best_len || (n == best_len && s.last_used < best->last_used)) {
        best = &s;
        best_len = n;
      }
    }
    if (!best) break;
    job j = std::move(queue_.front());
    queue_.pop_front();
    stats_.waiting = std::uint32_t(queue_.size());
    if (j.out->cancelled()) {
      lk.unlock();
      j.out->on_finish(finish_reason::cancelled);
      lk.lock();
      continue;
    }
    const auto n_prompt = std::uint32_t(j.req.prompt.size());
    // The last prompt token is always evaluated again: its logits give the first token. Mean
    // and cls pooling need every (the first) token's hidden state: nothing is reused for them.
    const pooling pool = j.req.embed;
    const std::uint32_t keep =
        pool == pooling::mean || pool == pooling::cls ? 0 : std::min(best_len, n_prompt - 1);
    kv.truncate(best->seq, keep);
    ++busy_;
    best->out = std::move(j.out);
    best->req.emplace(std::move(j.req));
    best->detok.emplace(*tok_);
    best->prompt_done = keep;
    best->cached = keep;
    best->decoding = false;
    best->skipped = 0;
    if (pool != pooling::none) best->pooled.assign(model_->hparams().n_embd, 0.0f);
    best->last_used = ++clock_;
    stats_.cached_prompt_tokens += keep;
    stats_.prefix_cache_hits += keep > 0;
    stats_.prompt_tokens += n_prompt - keep;
  }
}

// Ensures seq can grow by n tokens in this step, on top of the blocks earlier rows of the step
// will take (step_blocks_), evicting idle slots' cached prefixes (least recently used first)
// when the shared block pool is short.
bool scheduler::make_room(std::uint32_t seq, std::uint32_t n) {
  auto& kv = model_->kv();
  const std::uint32_t bs = kv.block_size();
  const auto blocks_for = [&](std::uint32_t len) { return (len + bs - 1) / bs; };
  const std::uint32_t len = kv.length(seq);
  if (len + n > kv.capacity()) return false;
  const std::uint32_t need = blocks_for(len + n) - blocks_for(len);
  while (kv.free_blocks() < step_blocks_ + need) {
    slot* victim = nullptr;
    for (auto& s : slots_)
      if (!s.out && kv.length(s.seq) > 0 && (!victim || s.last_used < victim->last_used)) victim = &s;
    if (!victim) return false;
    kv.clear(victim->seq);
  }
  step_blocks_ += need;
  return true;
}

bool scheduler::step() {
  for (auto& s : slots_)
    if (s.out && s.out->cancelled()) finish(s, finish_reason::cancelled);
  embed_pass();
  step_blocks_ = 0;
  const std::uint32_t n = gather_prompts(gather_decodes());
  if (n == 0) {
    const bool embedded = embedded_ > 0;
    publish(embedded, 0.0, 0);
    return embedded;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (!run_forward(n)) return true;
  const std::uint32_t generated = sample_rows(n);
  publish(true, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), generated);
  return true;
}

// Decode rows first: every running stream advances by one token each step.
std::uint32_t scheduler::gather_decodes() {
  auto& kv = model_->kv();
  std::uint32_t n = 0;
  for (auto& s : slots_) {
    if (!s.out || !s.decoding) continue;
    if (!make_room(s.seq, 1)) {
      finish(s, finish_reason::context_full);
      continue;
    }
    tokens_[n] = s.next_token;
    positions_[n] = std::int32_t(kv.length(s.seq));
    seq_ids_[n] = s.seq;
    want_[n] = 1;
    row_slot_[n] = s.seq;
    ++n;
  }
  return n;
}

// The prompt budget of a step with `decode` decoding rows, fitted to the model's step granule g
// (a step's matmuls cost about what its rows rounded up to a multiple of g cost). Such steps
// recur while the streams run, so: fill the step's last tile when that many prompt tokens wait
// (up to g - 1 beyond prefill_chunk: the tile is paid for either way), else leave out the tail
// that would open a tile of its own (those tokens fill the next step's). A 63-decode server step
// with one 128-token prompt waiting was 191 rows at the cost of 256; now steps run 128 and 256.
namespace {
std::uint32_t fitted_prompt_budget(std::uint32_t decode, std::uint32_t budget, std::uint64_t waiting, std::uint32_t g,
                                   std::uint32_t max_rows) {
  const std::uint32_t take = std::uint32_t(std::min<std::uint64_t>(budget, waiting));
  if (g <= 1 || decode == 0 || take == 0 || decode + take <= g) return budget;
  const std::uint32_t total = decode + take, up = (total + g - 1) / g * g, down = total / g * g;
  if (up - decode <= waiting && up <= max_rows) return up - decode;
  return down > decode ? down - decode : budget;
}
}  // namespace

// Then prompt chunks within the prefill budget: shortest remaining prompt first (a short request
// starts at once beside a long one), except that a prompt passed over max_prefill_skips steps in
// a row goes first. Returns the batch's row count.
std::uint32_t scheduler::gather_prompts(std::uint32_t n) {
  auto& kv = model_->kv();
  std::uint32_t budget = std::min(opt_.prefill_chunk, std::uint32_t(tokens_.size()) - n);
  std::vector<slot*>& order = prefill_order_;
  order.clear();
  std::uint64_t waiting = 0;
  for (auto& s : slots_)
    if (s.out && !s.decoding && s.req->embed == pooling::none) {
      order.push_back(&s);
      waiting += s.req->prompt.size() - s.prompt_done;
    }
  // A fill past the unfitted budget only into free KV blocks: making room for it would evict idle
  // prefix caches, or fail where the unfitted chunk would have run.
  const std::uint32_t fitted = fitted_prompt_budget(n, budget, waiting, granule_, std::uint32_t(tokens_.size()));
  if (fitted <= budget || fitted - budget <= std::uint64_t(kv.free_blocks()) * kv.block_size()) budget = fitted;
  const auto rank = [&](const slot* s) {
    const bool starving = opt_.max_prefill_skips && s->skipped >= opt_.max_prefill_skips;
    return std::tuple(!starving, std::uint32_t(s->req->prompt.size()) - s->prompt_done, s->last_used);
  };
  std::sort(order.begin(), order.end(), [&](const slot* a, const slot* b) { return rank(a) < rank(b); });
  slot* starved = nullptr;  // first prompt that found no KV room
  for (slot* sp : order) {
    slot& s = *sp;
    const auto& prompt = s.req->prompt;
    const std::uint32_t take = std::min<std::uint32_t>(budget, std::uint32_t(prompt.size()) - s.prompt_done);
    if (take == 0 || !make_room(s.seq, take)) {
      if (take && !starved) starved = &s;  // waits for running sequences to free blocks
      ++s.skipped;
      continue;
    }
    for (std::uint32_t i = 0; i < take; ++i) {
      tokens_[n] = prompt[s.prompt_done + i];
      positions_[n] = std::int32_t(s.prompt_done + i);
      seq_ids_[n] = s.seq;
      want_[n] = s.prompt_done + i + 1 == prompt.size();
      row_slot_[n] = s.seq;
      ++n;
    }
    s.prompt_done += take;
    s.skipped = 0;
    budget -= take;
  }
  if (n == 0 && starved) {
    // Nothing can run and nothing will free blocks: give up on one prompt so its blocks become
    // evictable and the others can proceed.
    finish(*starved, finish_reason::error, 0, "the KV cache cannot hold this prompt (context size " +
                                                  std::to_string(kv.capacity()) + " tokens shared by all slots)");
  }
  return n;
}

// One forward pass over the gathered rows; false when it failed (its sequences are ended).
bool scheduler::run_forward(std::uint32_t n) {
  const graph::batch b{std::span(tokens_).first(n), std::span(positions_).first(n), std::span(seq_ids_).first(n),
                       std::span(want_).first(n)};
  try {
    argmax_step_ = greedy_step(n);
    if (argmax_step_) model_->forward_argmax(b, argmax_);
    else model_->forward(b, logits_);
    return true;
  } catch (const std::exception& e) {
    // A failed step leaves the rows' sequences unusable: end them and drop their caches.
    for (std::uint32_t i = 0; i < n; ++i) {
      slot& s = slots_[row_slot_[i]];
      if (s.out) finish(s, finish_reason::error, 0, e.what());
      model_->kv().clear(s.seq);
    }
    return false;
  }
}

// Whether every output row of the step is plain greedy (generation_request::plain_greedy: the
// argmax of the raw logits, lowest id among ties, is what the backends' argmax returns).
bool scheduler::greedy_step(std::uint32_t n) const {
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!want_[i]) continue;
    const slot& s = slots_[row_slot_[i]];
    if (s.out && !s.req->plain_greedy()) return false;
  }
  return true;
}

// Samples every output row of the step; returns the tokens generated (end-of-turn excluded).
std::uint32_t scheduler::sample_rows(std::uint32_t n) {
  const std::uint32_t V = model_->hparams().n_vocab;
  std::uint32_t row = 0, generated = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!want_[i]) continue;
    slot& s = slots_[row_slot_[i]];
    const std::uint32_t r = row++;
    if (!s.out) continue;
    const std::span<const float> lg =
        argmax_step_ ? std::span<const float>() : std::span<const float>(logits_.data() + std::size_t(r) * V, V);
    try {
      sample_row(s, lg, argmax_step_ ? argmax_[r] : -1, generated);
    } catch (const std::exception& e) {
      finish(s, finish_reason::error, 0, e.what());
    }
  }
  return generated;
}

void scheduler::sample_row(slot& s, std::span<const float> lg, std::int32_t argmax, std::uint32_t& generated) {
  auto& r = *s.req;
  if (!s.decoding) {
    s.decoding = true;
    s.out->on_prefill(std::uint32_t(r.prompt.size()), s.cached);
  }
  // Log-probabilities come from the raw row (the sampler masks its own copy).
  double lse = 0;
  if (r.top_logprobs >= 0) {
    lse = sampling::log_sum_exp(lg);
    lp_.n_top = std::uint32_t(sampling::top_logprobs(lg, lse, std::span(lp_.top).first(std::size_t(r.top_logprobs))));
  }
  std::int32_t t;
  if (lg.empty()) {  // greedy step: greedy_step() ruled out constraints and logprobs
    t = argmax;
  } else if (r.constraint) {
    const auto tc = std::chrono::steady_clock::now();
    t = r.constraint->active() ? r.sampler.sample(lg, *r.constraint) : r.sampler.sample(lg);
    r.constraint->accept(t);
    constraint_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - tc).count();
    ++constrained_;
  } else {
    t = r.sampler.sample(lg);
  }
  r.sampler.accept(t);
  const bool eog = r.stop.is_eog(t);
  const auto st = r.stop.on_token(t, eog ? std::string() : s.detok->feed(t));
  generated += !eog;
  if (r.top_logprobs >= 0) {
    lp_.token = t;
    lp_.logprob = sampling::logprob_of(lg[std::size_t(t)], lse);
  }
  s.out->on_text(st.emit, std::uint32_t(r.stop.n_generated()), r.top_logprobs >= 0 && !eog ? &lp_ : nullptr);
  switch (st.reason) {
    case sampling::stop_reason::none:
      s.next_token = t;
      if (model_->kv().length(s.seq) + 1 >= model_->kv().capacity()) finish(s, finish_reason::context_full);
      else s.out->notify();
      break;
    case sampling::stop_reason::eog: finish(s, finish_reason::eog); break;
    case sampling::stop_reason::max_tokens: finish(s, finish_reason::max_tokens); break;
    case sampling::stop_reason::stop_string: finish(s, finish_reason::stop_string, st.stop_index); break;
  }
}

// Embedding requests' prompt chunks (within the prefill budget) go through forward_embeddings; each finished prompt's pooled
// vector is normalized and handed to its stream.
void scheduler::embed_pass() {
  if (embd_.empty()) return;
  const std::uint32_t E = model_->hparams().n_embd;
  const std::uint32_t max_rows = std::uint32_t(embd_.size() / E);
  std::uint32_t n = 0, budget = std::min(opt_.prefill_chunk, max_rows);
  step_blocks_ = 0;
  slot* starved = nullptr;  // first prompt that found no KV room
  bool others = false;      // generation requests that may free blocks
  for (auto& s : slots_) {
    others = others || (s.out && s.req->embed == pooling::none);
    if (!s.out || s.req->embed == pooling::none || budget == 0) continue;
    const auto& prompt = s.req->prompt;
    const std::uint32_t take = std::min<std::uint32_t>(budget, std::uint32_t(prompt.size()) - s.prompt_done);
    if (take == 0) continue;
    if (!make_room(s.seq, take)) {
      if (!starved) starved = &s;
      continue;
    }
    if (s.prompt_done == s.cached) s.out->on_prefill(std::uint32_t(prompt.size()), s.cached);
    const pooling pool = s.req->embed;
    for (std::uint32_t i = 0; i < take; ++i) {
      const std::uint32_t pos = s.prompt_done + i;
      tokens_[n] = prompt[pos];
      positions_[n] = std::int32_t(pos);
      seq_ids_[n] = s.seq;
      want_[n] = pool == pooling::mean || (pool == pooling::cls && pos == 0) ||
                 (pool == pooling::last && pos + 1 == prompt.size());
      row_slot_[n] = s.seq;
      ++n;
    }
    s.prompt_done += take;
    budget -= take;
  }
  step_blocks_ = 0;
  if (n == 0 && starved && !others) {
    // Only embedding prompts hold the pool and none can grow: end one so the others can proceed.
    finish(*starved, finish_reason::error, 0, "the KV cache cannot hold this input (context size " +
                                                  std::to_string(model_->kv().capacity()) + " tokens shared by all slots)");
  }
  if (n == 0) return;
  const graph::batch b{std::span(tokens_).first(n), std::span(positions_).first(n), std::span(seq_ids_).first(n),
                       std::span(want_).first(n)};
  try {
    model_->forward_embeddings(b, embd_);
  } catch (const std::exception& e) {
    for (std::uint32_t i = 0; i < n; ++i) {
      slot& s = slots_[row_slot_[i]];
      if (s.out) finish(s, finish_reason::error, 0, e.what());
      model_->kv().clear(s.seq);
    }
    return;
  }
  embedded_ += n;
  std::uint32_t row = 0;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (!want_[i]) continue;
    slot& s = slots_[row_slot_[i]];
    const float* h = embd_.data() + std::size_t(row++) * E;
    if (s.req->embed == pooling::mean)
      for (std::uint32_t k = 0; k < E; ++k) s.pooled[k] += h[k];
    else
      std::copy_n(h, E, s.pooled.begin());
  }
  for (auto& s : slots_) {
    if (!s.out || s.req->embed == pooling::none || s.prompt_done < s.req->prompt.size()) continue;
    if (s.req->embed == pooling::mean)
      for (float& x : s.pooled) x /= float(s.req->prompt.size());
    l2_normalize(s.pooled);
    s.out->on_embedding(s.pooled);
    finish(s, finish_reason::embedded);
  }
}

void scheduler::publish(bool stepped, double step_seconds, std::uint32_t generated) {
  std::lock_guard lk(mu_);
  stats_.constrained_tokens += std::exchange(constrained_, 0);
  stats_.constraint_seconds += std::exchange(constraint_seconds_, 0.0);
  stats_.embedded_tokens += std::exchange(embedded_, 0);
  stats_.steps += stepped;
  stats_.busy_seconds += step_seconds;
  stats_.generated_tokens += generated;
  stats_.kv_used = model_->kv().used_slots();
  stats_.expert_cache = model_->expert_cache();
  stats_.streaming = model_->streaming();
  stats_.expert_streaming = model_->expert_streaming();
  stats_.disk = model_->disk_tier();
  stats_.recordings = model_->step_recordings();
  stats_.handoffs = model_->handoffs();
}

void scheduler::loop() {
  while (true) {
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] {
        if (stopping_ || !queue_.empty()) return true;
        for (const auto& s : slots_)
          if (s.out) return true;
        return false;
      });
      if (stopping_) return;
      admit(lk);
      stats_.running = std::uint32_t(busy_);
    }
    if (!step()) {
      // Nothing runnable (e.g. prompts waiting for KV room): yield briefly instead of spinning.
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
}

}  // namespace strata::rt
