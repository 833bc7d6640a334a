// GPU-cached routed experts (memory tiers, issue 14 item 3): a cached block's expert tensors live
// in host-visible memory and the GPU holds `expert_slots` of its experts in device-local slots
// laid out as the full tensor would be ([slot][expert bytes]), so the expert matvecs run
// unchanged on slot ids instead of expert ids. The step splits after the router's top-k, as for
// the CPU hand-off (cpu_experts.cpp): the host reads the routed ids, asks the block's SLRU
// (tiers::expert_slot_cache) for a slot per distinct expert, records the copies of the missed
// experts and the slot ids into a small command buffer and submits it with the recorded expert
// matvecs and the rest of the step: one fence wait per cached block and step, nothing allocated.
// A step routing more distinct experts than slots (a long prompt) computes that block on the CPU
// (the hand-off's kernels) instead: its uploads would evict experts the same step still reads.
// Router-driven prefetch: the part before a block's split also scores the next cached block's
// router on this block's FFN input (the next router times the ratio of the two FFN norms'
// weights, built at load: the ranking equals the next router's on this hidden state normalised
// by the next norm, 1 / rms being positive). At the split the host ranks those scores, places the
// predicted experts in the next block's slots and uploads them on the side queue (a timeline
// semaphore the next block's submit waits on), so the copies run beside this block's experts and
// the layers up to the next split; a device with one queue submits them ahead of this block's
// parts. Placement never changes the math: the next block's routing decides what runs.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <unordered_map>

#include "backend_impl.hpp"
#include "pinned_copy.hpp"
#include "strata/core/byte_size.hpp"
#include "strata/core/error.hpp"
#include "strata/quant/quantize_rows.hpp"

namespace strata::gpu {

using namespace detail;

namespace {
int expert_part(std::string_view name) {
  if (name.find("ffn_gate_exps") != std::string_view::npos) return 0;
  if (name.find("ffn_up_exps") != std::string_view::npos) return 1;
  if (name.find("ffn_down_exps") != std::string_view::npos) return 2;
  return -1;
}
}  // namespace

// The counters, with the prefetch's used / unused experts from each block's slot cache.
expert_cache_stats backend::expert_cache() const {
  expert_cache_stats s = p_->cache_stats;
  for (const cached_block& b : p_->cached) {
    s.prefetch_used += b.cache.prefetch_used();
    s.prefetch_wasted += b.cache.prefetch_wasted();
  }
  return s;
}

void backend::impl::load_cached(const gguf::tensor_info& t, std::uint32_t layer, std::uint32_t id) {
  const int part = expert_part(t.name);
  if (part < 0 || t.ne[2] < 2 || t.ne[3] != 1)
    throw error("expert cache: tensor '" + std::string(t.name) + "' is not a gate, up or down expert tensor [n_in, n_out, n_expert]");
  const auto E = std::uint32_t(t.ne[2]);
  if (opt.expert_slots > E)
    throw error("--expert-cache " + std::to_string(opt.expert_slots) + ": '" + std::string(t.name) + "' has " +
                std::to_string(E) + " experts; the slots per layer must be 1.." + std::to_string(E));
  auto it = std::find_if(cached.begin(), cached.end(), [&](const cached_block& b) { return b.layer == layer; });
  if (it == cached.end()) it = cached.emplace(cached.end(), layer, E, opt.expert_slots);
  if (it->cache.experts() != E)
    throw error("expert cache: '" + std::string(t.name) + "' has " + std::to_string(E) + " experts, its layer's other expert tensors " +
                std::to_string(it->cache.experts()));
  if (t.data.size() % E) throw error("expert cache: '" + std::string(t.name) + "' is not a whole number of experts");
  const std::uint64_t eb = t.data.size() / E;
  it->weight[part] = id;
  it->expert_bytes[part] = eb;
  weight_entry e{&t, 0, 0, eb * opt.expert_slots};
  e.cache = std::int32_t(it - cached.begin());
  e.cache_cpu = std::int32_t(host->load(t));
  weights.push_back(e);
}

void backend::impl::upload_cached(std::uint32_t max_routed) {
  if (cached.empty()) return;
  std::uint32_t most = 0;
  std::vector<pinned_copy> copies;
  for (cached_block& b : cached) {
    for (int j = 0; j < 3; ++j)
      if (b.weight[j] == ~0u)
        throw error("expert cache: layer " + std::to_string(b.layer) + " lacks its " + (j == 0 ? "gate" : j == 1 ? "up" : "down") +
                    " expert tensor");
    const gguf::tensor_info &g = *weights.at(b.weight[0]).info, &u = *weights.at(b.weight[1]).info,
                            &d = *weights.at(b.weight[2]).info;
    b.up_at = g.data.size();
    b.host_gate_up = gpu_buffer(ctx, g.data.size() + u.data.size(), memory_kind::upload, "host experts " + std::string(g.name) + " + up");
    b.host_down = gpu_buffer(ctx, d.data.size(), memory_kind::upload, "host experts " + std::string(d.name));
    copies.push_back({&g, g.data.size(), b.host_gate_up.mapped()});
    copies.push_back({&u, u.data.size(), b.host_gate_up.mapped() + b.up_at});
    copies.push_back({&d, d.data.size(), b.host_down.mapped()});
    for (int j = 0; j < 3; ++j) {
      cache_stats.host_bytes += weights.at(b.weight[j]).info->data.size();
      cache_stats.slot_bytes += weights.at(b.weight[j]).bytes;
    }
    most = std::max(most, b.cache.experts());
  }
  copy_pinned(copies);
  cache_seen.assign(most, 0);
  cache_slot_of.assign(most, 0);
  cache_distinct.reserve(most);
  for (auto& r : cache_regions) r.reserve(most);
  cache_ids_in = new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::readback, "expert cache: routed ids");
  cache_ids_out = new_buffer(std::uint64_t(max_routed) * 4 + 16, memory_kind::upload, "expert cache: slot ids");
  cache_stats.layers = std::uint32_t(cached.size());
  cache_stats.slots = opt.expert_slots;
  // The admission policy's switches (the lookup form's, and the split form's CPU misses).
  cache_decay = std::min(1.0f, env_float("STRATA_VK_CACHE_DECAY", cache_decay));
  cache_margin = env_float("STRATA_VK_CACHE_MARGIN", cache_margin);
  cache_admit_bytes = std::uint64_t(env_float("STRATA_VK_CACHE_ADMIT_MB", float(cache_admit_bytes >> 20)) * 1048576.0f);
  cache_cpu_misses = env_float("STRATA_VK_CACHE_CPU_MISSES", opt.expert_cpu_misses);
  cache_cpu_miss_tokens = std::uint32_t(env_float("STRATA_VK_CACHE_CPU_MISS_TOKENS", float(cache_cpu_miss_tokens)));
  cache_stats.cpu_miss_tokens = cache_cpu_misses > 0 ? cache_cpu_miss_tokens : 0;
  if (cache_cpu_misses > 1)
    throw error("STRATA_VK_CACHE_CPU_MISSES=" + std::to_string(cache_cpu_misses) +
                ": expected the share of a step's distinct experts (0 < F <= 1) whose misses send the block to the CPU");
  // Off by default: on the H200 (session 52) it cost 28-33% of qwen3-30b-a3b's tg64 with 32 or 64
  // slots. The next block's split comes one layer (~60-250 us) after the guesses, so it waits for
  // their copies much as for misses, and the wrong guesses (27-55% of them) double the bytes.
  // STRATA_VK_EXPERT_PREFETCH=1 turns it on where the device has a side queue and timeline
  // semaphores; on a one-queue device (lavapipe: the tests) it then queues behind the step's parts.
  // The lookup form first: it never splits a step at a cached block, so nothing there to prefetch at.
  init_cache_lookup(max_routed);
  init_miss_handoffs(max_routed);
  init_cache_stage();
  expert_prefetch = false;
  if (const char* v = std::getenv("STRATA_VK_EXPERT_PREFETCH")) expert_prefetch = std::string_view(v) == "1" && !cache_lookup;
  if (expert_prefetch) make_prefetch_predictors();
  if (cache_cpu_misses > 0) {
    // Each block's routing counts, and a command buffer for its admissions' copies (on the side
    // queue where the device has one, behind a timeline value the block's next GPU step waits on).
    cache_candidates.reserve(most);
    for (cached_block& b : cached) {
      b.freq.assign(b.cache.experts(), 0.0f);
      b.prefetch_cmd = std::uint32_t(prefetch_cmds.size());
      prefetch_cmds.push_back(std::move(vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1))[0]));
    }
    if (!*prefetch_timeline && ctx.side_queue() && ctx.info().timeline) {
      const vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
      prefetch_timeline = vk::raii::Semaphore(ctx.device(), vk::SemaphoreCreateInfo({}, &type));
    }
  }
}

void backend::impl::make_prefetch_predictors() {
  std::unordered_map<std::string_view, std::uint32_t> by_name;
  for (std::uint32_t i = 0; i < weights.size(); ++i) by_name.emplace(weights[i].info->name, i);
  const auto find = [&](std::uint32_t layer, const char* what) -> const gguf::tensor_info* {
    const auto it = by_name.find("blk." + std::to_string(layer) + "." + what);
    return it == by_name.end() ? nullptr : weights[it->second].info;
  };
  // Blocks in layer order; each predicts the next one's experts.
  std::vector<std::size_t> order(cached.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) { return cached[a].layer < cached[b].layer; });
  struct pair_of {
    std::size_t from, to;
    const gguf::tensor_info *router, *norm_from, *norm_to;
  };
  std::vector<pair_of> pairs;
  std::uint64_t bytes = 0;
  std::uint32_t widest = 0;
  for (std::size_t i = 0; i + 1 < order.size(); ++i) {
    const cached_block &a = cached[order[i]], &b = cached[order[i + 1]];
    const gguf::tensor_info *r = find(b.layer, "ffn_gate_inp.weight"), *na = find(a.layer, "ffn_norm.weight"),
                            *nb = find(b.layer, "ffn_norm.weight");
    if (!r || !na || !nb || r->ne[1] != b.cache.experts() || r->ne[2] != 1 || r->ne[0] % 32 || na->type != gguf::type_id::f32 ||
        nb->type != gguf::type_id::f32 || na->ne[0] != r->ne[0] || nb->ne[0] != r->ne[0] || r->data.size() != quant::row_bytes(r->type, r->ne[0]) * r->ne[1])
      continue;
    pairs.push_back({order[i], order[i + 1], r, na, nb});
    bytes += std::uint64_t(r->ne[0]) * r->ne[1] * 4;
    widest = std::max(widest, std::uint32_t(r->ne[1]));
  }
  if (pairs.empty()) return;
  const std::uint64_t scores = std::uint64_t(cache_pred_tokens) * widest * 4;
  if (const auto& ledger = ctx.ledger(); ledger.budget && ledger.total() + bytes + scores > ledger.budget) {
    std::fprintf(stderr, "strata: expert cache: the prefetch predictors (%s) do not fit the GPU budget; experts are uploaded on a miss only\n",
                 format_byte_size(bytes + scores).c_str());
    return;
  }
  uploader up(ctx, uploader::default_staging_bytes);
  std::vector<float> p;
  for (const pair_of& q : pairs) {
    const auto H = std::size_t(q.router->ne[0]), E = std::size_t(q.router->ne[1]);
    p.resize(H * E);
    quant::dequantize_rows(q.router->type, q.router->data.data(), H * E, p.data());
    const auto* wa = reinterpret_cast<const float*>(q.norm_from->data.data());
    const auto* wb = reinterpret_cast<const float*>(q.norm_to->data.data());
    // The next block's norm over this block's: where this block's weight is 0 its input is 0 too.
    for (std::size_t i = 0; i < H; ++i) {
      const float ratio = wa[i] != 0.0f && std::isfinite(wb[i] / wa[i]) ? wb[i] / wa[i] : 0.0f;
      for (std::size_t e = 0; e < E; ++e) p[e * H + i] *= ratio;
    }
    cached_block& a = cached[q.from];
    a.predict = new_buffer(p.size() * 4, memory_kind::device, "weights: expert prefetch predictor (blk." + std::to_string(cached[q.to].layer) + ")");
    a.next = std::int32_t(q.to);
    a.hidden = std::uint32_t(H);
    up.copy(std::as_bytes(std::span(p)), buf(a.predict).handle(), 0);
    cached_block& b = cached[q.to];
    b.predicted.assign(E, 0);
    b.prefetch_cmd = std::uint32_t(prefetch_cmds.size());
    prefetch_cmds.push_back(std::move(vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 1))[0]));
  }
  up.flush();
  cache_pred_dev = new_buffer(scores, memory_kind::device, "expert cache: prefetch scores");
  cache_pred_host = new_buffer(scores, memory_kind::readback, "expert cache: prefetch scores to the host");
  cache_rank.resize(widest);
  cache_pred_union.reserve(widest);
  cache_stats.predictors = std::uint32_t(pairs.size());
  if (ctx.side_queue() && ctx.info().timeline) {
    const vk::SemaphoreTypeCreateInfo type(vk::SemaphoreType::eTimeline, 0);
    prefetch_timeline = vk::raii::Semaphore(ctx.device(), vk::SemaphoreCreateInfo({}, &type));
  }
  pipes.prepare(std::vector{router_product_req(false)});
}

// The next block's router scores of x's tokens (router_product.glsl's f32 form), for the split's
// copy to the host; 0 tokens where this block predicts nothing or the step is too long.
std::uint32_t backend::impl::record_prediction(const cached_block& b, const tensor& x) {
  if (!b.predict || x.rows > cache_pred_tokens || x.cols != b.hidden || x.off % 4 || x.stride % 4) return 0;
  const std::uint32_t E = cached.at(std::size_t(b.next)).cache.experts();
  const router_product_pc pc{.K = b.hidden, .w_off = 0, .x_off = x.off / 4, .x_stride = x.stride / 4,
                             .s_off = 0, .s_stride = 0, .out_off = 0, .out_stride = E};
  const binding bb[] = {bind_id(b.predict, false), bind(x, false), bind(x, false), bind_id(cache_pred_dev, true)};
  dispatch(router_product_req(false), bb, &pc, sizeof pc, E, x.rows);
  return x.rows;
}

void backend::impl::begin_cached_moe(const moe_weights& mw, const graph::moe_params& mp, const tensor& x,
                                     const tensor& logits) {
  const std::uint32_t n = x.rows, C = x.cols, E = logits.cols, pairs = n * mp.n_used;
  flush_all();  // everything deferred runs before the split
  const cached_block& block = cached.at(std::size_t(weights.at(mw.gate_exps->id).cache));
  const std::uint32_t predicted = expert_prefetch ? record_prediction(block, x) : 0;
  if (predicted) flush_all();
  // x and the logits to the host too, for a step the CPU computes (more experts than slots).
  record_handoff_in(x, logits);
  // The routed expert ids (top-k's output) to the host, bit for bit: a transfer, not a shader.
  const vk::raii::CommandBuffer& c = recording_cmd();
  c.pipelineBarrier(vk::PipelineStageFlagBits::eComputeShader, vk::PipelineStageFlagBits::eTransfer, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eShaderWrite, vk::AccessFlagBits::eTransferRead), {}, {});
  c.copyBuffer(buf(moe_ids).handle(), buf(cache_ids_in).handle(), vk::BufferCopy(0, 0, std::uint64_t(pairs) * 4));
  if (predicted) {
    const std::uint64_t bytes = std::uint64_t(predicted) * cached.at(std::size_t(block.next)).cache.experts() * 4;
    c.copyBuffer(buf(cache_pred_dev).handle(), buf(cache_pred_host).handle(), vk::BufferCopy(0, 0, bytes));
  }
  c.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eHost, {},
                    vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eHostRead), {}, {});
  rec.end();

  handoff& h = pending.handoffs.emplace_back();
  cache_split_open = weights.at(mw.gate_exps->id).cache;  // its expert kernels read slots by the host's slot ids
  const auto cpu_index = [&](const weight* w) { return std::uint32_t(weights.at(w->id).cache_cpu); };
  h.task = {cpu_index(mw.gate_exps), cpu_index(mw.up_exps), cpu_index(mw.down_exps), mp, n, C, E};
  h.cache = weights.at(mw.gate_exps->id).cache;
  h.pairs = pairs;
  h.predicted = predicted;
  auto bufs = vk::raii::CommandBuffers(ctx.device(), vk::CommandBufferAllocateInfo(*pool, vk::CommandBufferLevel::ePrimary, 4));
  h.upload = std::move(bufs[0]);
  h.gpu = std::move(bufs[1]);
  h.cpu = std::move(bufs[2]);
  h.cmd = std::move(bufs[3]);
  rec.resume(h.gpu, "expert cache: slots (host work + submit)");
}

void backend::impl::end_cached_moe(const tensor& out) {
  flush_all();  // the combine into out, here: what follows cannot know which part ran
  for (auto& q : quantized) q.reset();
  rec.end();
  handoff& h = pending.handoffs.back();
  rec.resume(h.cpu, "expert cache: CPU overflow");
  const std::uint32_t C = out.cols;
  const copy_rows_pc po{C, 0, C, out.off, out.stride};
  const binding bo[] = {bind_id(hand_out, false), bind_id(hand_out, false), bind(out, true)};
  dispatch(copy_req(false), bo, &po, sizeof po, div_up(C, wg), out.rows);
  rec.end();
  rec.resume(h.cmd, "expert cache: continue");
  cache_split_open = -1;
}

// Expert e's gate, up and down from b's host copies into slot `slot` (cache_regions); its bytes.
std::uint64_t backend::impl::queue_expert_copies(const cached_block& b, std::uint32_t e, std::uint32_t slot) {
  std::uint64_t bytes = 0;
  for (int j = 0; j < 3; ++j) {
    const std::uint64_t eb = b.expert_bytes[j];
    cache_regions[j].push_back(vk::BufferCopy(b.host_offset(j) + e * eb, weights.at(b.weight[j]).offset + slot * eb, eb));
    bytes += eb;
  }
  return bytes;
}

void backend::impl::record_expert_copies(const vk::raii::CommandBuffer& c, const cached_block& b) const {
  for (int j = 0; j < 3; ++j)
    if (!cache_regions[j].empty()) c.copyBuffer(b.host(j).handle(), chunks.at(weights.at(b.weight[j]).chunk).handle(), cache_regions[j]);
}

const std::uint32_t* backend::impl::read_routed(const handoff& h, const cached_block& b) {
  const auto* ids = reinterpret_cast<const std::uint32_t*>(buf(cache_ids_in).mapped());
  const std::uint32_t E = b.cache.experts();
  ++cache_stamp;
  cache_distinct.clear();
  for (std::uint32_t p = 0; p < h.pairs; ++p) {
    const std::uint32_t e = ids[p];
    if (e >= E) throw error("expert cache: the GPU routed expert " + std::to_string(e) + " of " + std::to_string(E));
    if (cache_seen[e] != cache_stamp) {
      cache_seen[e] = cache_stamp;
      cache_distinct.push_back(e);
    }
  }
  return ids;
}

void backend::impl::run_cached(handoff& h, bool last) {
  cached_block& b = cached.at(std::size_t(h.cache));
  const std::uint32_t* ids = read_routed(h, b);
  if (b.predicted_at == cache_step) {  // the block before predicted this step's experts
    cache_stats.routed_with_prediction += cache_distinct.size();
    for (const std::uint32_t e : cache_distinct) cache_stats.predicted_routed += b.predicted[e] == cache_step;
  }
  // STRATA_VK_CACHE_CPU_MISSES: the routing counts, and the misses that may send the step to the CPU.
  std::uint32_t missed = 0;
  if (cache_cpu_misses > 0) {
    note_routing(b, ids, h.pairs);
    for (const std::uint32_t e : cache_distinct) missed += !b.cache.resident(e);
  }
  const bool misses_to_cpu = missed && float(missed) >= cache_cpu_misses * float(cache_distinct.size());
  if (cache_distinct.size() > b.cache.slots() || misses_to_cpu) {  // the CPU computes this block for this step
    issue_prefetch(h, b);  // the next block's copies run while the CPU works
    run_handoff_on_cpu(h);
    ++cache_stats.cpu_blocks;
    const vk::CommandBuffer parts[] = {*h.cpu, *h.cmd, last ? output_cmd() : vk::CommandBuffer{}};
    const std::span<const vk::CommandBuffer> run(parts, parts[2] ? 3 : 2);
    if (!(cache_cpu_misses > 0)) return submit_and_wait(run);
    cache_stats.hits += cache_distinct.size() - missed;
    cache_stats.misses += missed;
    ++cache_stats.miss_cpu_blocks;
    // The GPU's parts after the CPU's sum read no slot of this block: the admissions' copies
    // (submitted next) run beside them.
    ctx.queue().submit(vk::SubmitInfo({}, {}, run), *fence);
    admit_cpu_misses(b);
    return wait_fence();
  }
  b.cache.begin_step();
  for (auto& r : cache_regions) r.clear();
  // Hits first (pinned as they are accessed), so that a miss never takes the slot of an expert
  // this step still reads. In place: std::stable_partition may allocate.
  std::partition(cache_distinct.begin(), cache_distinct.end(), [&](std::uint32_t e) { return b.cache.resident(e); });
  for (const std::uint32_t e : cache_distinct) {
    const auto r = b.cache.access(e);
    cache_slot_of[e] = r.slot;
    if (r.hit) {
      ++cache_stats.hits;
      continue;
    }
    ++cache_stats.misses;
    cache_stats.evictions += r.evicted >= 0;
    cache_stats.bytes_uploaded += queue_expert_copies(b, e, r.slot);
    cache_moved(b, e, r.slot, r.evicted);
  }
  auto* slots = reinterpret_cast<std::uint32_t*>(buf(cache_ids_out).mapped());
  for (std::uint32_t p = 0; p < h.pairs; ++p) slots[p] = cache_slot_of[ids[p]];
  h.upload.reset();
  h.upload.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  record_expert_copies(h.upload, b);
  h.upload.copyBuffer(buf(cache_ids_out).handle(), buf(moe_ids).handle(), vk::BufferCopy(0, 0, std::uint64_t(h.pairs) * 4));
  h.upload.end();
  ++cache_stats.gpu_blocks;
  const vk::CommandBuffer parts[] = {*h.upload, *h.gpu, *h.cmd, last ? output_cmd() : vk::CommandBuffer{}};
  submit_cached(std::span(parts, parts[3] ? 4 : 3), b);
  issue_prefetch(h, b);  // the next block's copies, behind this block's parts on the queue or beside them
  wait_fence();
}

// At block b's split: rank the next block's scores per token, place the union of the top-k in its
// slots (unless it holds more experts than slots: that step will likely run on the CPU) and
// submit the uploads of those not resident: on the side queue (waiting only on the previous
// prefetch into the same block), or on the step's queue behind the parts already submitted.
void backend::impl::issue_prefetch(const handoff& h, const cached_block& b) {
  if (!h.predicted || b.next < 0) return;
  cached_block& nb = cached.at(std::size_t(b.next));
  const std::uint32_t E = nb.cache.experts(), k = std::min(h.task.params.n_used, E);
  const auto* scores = reinterpret_cast<const float*>(buf(cache_pred_host).mapped());
  std::vector<std::uint32_t>& want = cache_pred_union;
  want.clear();
  nb.predicted_at = cache_step;
  for (std::uint32_t t = 0; t < h.predicted; ++t) {
    const float* st = scores + std::size_t(t) * E;
    for (std::uint32_t e = 0; e < E; ++e) cache_rank[e] = e;
    // Highest first, ties to the lower id (as the GPU's top-k); NaN scores rank last.
    const auto above = [&](std::uint32_t a, std::uint32_t c) {
      const float sa = std::isnan(st[a]) ? -INFINITY : st[a], sc = std::isnan(st[c]) ? -INFINITY : st[c];
      return sa > sc || (sa == sc && a < c);
    };
    std::partial_sort(cache_rank.begin(), cache_rank.begin() + k, cache_rank.begin() + E, above);
    for (std::uint32_t i = 0; i < k; ++i)
      if (const std::uint32_t e = cache_rank[i]; nb.predicted[e] != cache_step) {
        nb.predicted[e] = cache_step;
        want.push_back(e);
      }
  }
  if (want.size() > nb.cache.slots()) return;
  for (auto& r : cache_regions) r.clear();
  nb.cache.begin_prefetch();
  for (const std::uint32_t e : want) {
    const auto r = nb.cache.prefetch(e);
    if (!r.uploaded) continue;
    ++cache_stats.prefetched;
    cache_stats.evictions += r.evicted >= 0;
    cache_moved(nb, e, r.slot, r.evicted);
    const std::uint64_t bytes = queue_expert_copies(nb, e, r.slot);
    cache_stats.bytes_uploaded += bytes;
    cache_stats.prefetch_bytes += bytes;
  }
  if (!cache_regions[0].empty()) submit_block_copies(nb);
}

// cache_regions' copies into b's slots, on the side queue (after the last copies into b, signalling
// b.prefetch_value, which b's next GPU step waits on), or with one queue behind what was submitted.
void backend::impl::submit_block_copies(cached_block& nb) {
  const bool side = *prefetch_timeline;
  // The command buffer may still be in flight from an earlier step whose block ran on the CPU.
  if (side && nb.prefetch_value) wait_prefetch_value(nb.prefetch_value);
  const vk::raii::CommandBuffer& pc = prefetch_cmds.at(nb.prefetch_cmd);
  pc.reset();
  pc.begin(vk::CommandBufferBeginInfo(vk::CommandBufferUsageFlagBits::eOneTimeSubmit));
  record_expert_copies(pc, nb);
  // Later copies into these slots (a miss's upload) and the expert matvecs come after these.
  pc.pipelineBarrier(vk::PipelineStageFlagBits::eTransfer, vk::PipelineStageFlagBits::eTransfer | vk::PipelineStageFlagBits::eComputeShader,
                              {}, vk::MemoryBarrier(vk::AccessFlagBits::eTransferWrite, vk::AccessFlagBits::eTransferWrite | vk::AccessFlagBits::eShaderRead),
                              {}, {});
  pc.end();
  const vk::CommandBuffer cb = *pc;
  if (!side) {  // one queue: after the parts submitted before, before the next block's
    ctx.queue().submit(vk::SubmitInfo({}, {}, cb));
    return;
  }
  const std::uint64_t wait_value = nb.prefetch_value, signal_value = prefetch_counter + 1;
  const vk::Semaphore sem = *prefetch_timeline;
  const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
  const vk::TimelineSemaphoreSubmitInfo values(wait_value ? 1u : 0u, &wait_value, 1u, &signal_value);
  vk::SubmitInfo si(wait_value ? 1u : 0u, &sem, &stage, 1u, &cb, 1u, &sem);
  si.pNext = &values;
  ctx.side_queue()->submit(si);
  prefetch_counter = nb.prefetch_value = signal_value;  // only once submitted: a failed submit signals nothing
}

// b's parts, waiting on the copies of its prefetch on the side queue where one is pending; the
// caller waits on the fence.
void backend::impl::submit_cached(std::span<const vk::CommandBuffer> parts, const cached_block& b) {
  if (!*prefetch_timeline || !b.prefetch_value) return ctx.queue().submit(vk::SubmitInfo({}, {}, parts), *fence);
  const vk::Semaphore sem = *prefetch_timeline;
  const vk::PipelineStageFlags stage = vk::PipelineStageFlagBits::eAllCommands;
  const std::uint64_t value = b.prefetch_value;
  const vk::TimelineSemaphoreSubmitInfo values(1u, &value, 0u, nullptr);
  vk::SubmitInfo si(1u, &sem, &stage, std::uint32_t(parts.size()), parts.data());
  si.pNext = &values;
  ctx.queue().submit(si, *fence);
}

void backend::impl::wait_prefetch_value(std::uint64_t value) {
  const vk::Semaphore s = *prefetch_timeline;
  if (ctx.device().waitSemaphores(vk::SemaphoreWaitInfo({}, s, value), UINT64_MAX) != vk::Result::eSuccess)
    throw error("expert cache: the prefetch copies did not complete");
}

void backend::impl::note_routing(cached_block& b, const std::uint32_t* ids, std::uint32_t pairs) {
  const float decay = std::pow(cache_decay, float(std::max(batch_tokens, 1u)));
  for (float& f : b.freq) f *= decay;
  for (std::uint32_t p = 0; p < pairs; ++p) b.freq[ids[p]] += 1.0f;  // ids checked by run_cached
}

// A block-step the CPU computed: its resident experts refreshed (and pinned), then the missed ones
// most routed first, each admitted where a slot is free or its count beats the SLRU victim's by
// cache_margin, within the step's upload budget; their copies run beside the rest of the step.
void backend::impl::admit_cpu_misses(cached_block& b) {
  b.cache.begin_step();
  cache_candidates.clear();
  for (const std::uint32_t e : cache_distinct) {
    if (b.cache.resident(e)) b.cache.access(e);
    else cache_candidates.push_back(e);
  }
  for (auto& r : cache_regions) r.clear();
  admit_candidates(b, cache_step_admitted, cache_admit_budget(), [&](std::uint32_t e, const tiers::expert_slot_cache::result& r) {
    queue_expert_copies(b, e, r.slot);
    cache_moved(b, e, r.slot, r.evicted);
  });
  if (!cache_regions[0].empty()) submit_block_copies(b);
}

void backend::impl::abandon_cached_step() noexcept {
  try {
    ctx.device().waitIdle();
  } catch (...) {  // a lost device: nothing more to wait for
  }
  for (cached_block& b : cached) {
    b.cache = tiers::expert_slot_cache(b.cache.experts(), b.cache.slots(), tiers::cache_policy::slru);
    if (!b.map.empty()) std::fill(b.map.begin() + 1, b.map.end(), -1);  // every expert from the host copy until admitted again
    b.map_dirty = true;
  }
  cache_admitted.clear();
  cache_inflight.clear();
  // A step that failed mid-way: no block counts as the CPU's, and every misses region may hold a partial sum.
  std::fill(cache_cpu_now.begin(), cache_cpu_now.end(), char(0));
  std::fill(cache_miss_dirty.begin(), cache_miss_dirty.end(), cache_cpu_miss_tokens);
}

void backend::impl::wait_prefetches() {
  if (*prefetch_timeline && prefetch_counter) wait_prefetch_value(prefetch_counter);
}

}  // namespace strata::gpu
