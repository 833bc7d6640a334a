// The CPU backend's mixture-of-experts routing (each row's top-k experts and weights) and its
// experts over packed weights in a few pool jobs (run_packed); backend.hpp owns one, and its
// moe_experts falls back to a loop of matmuls over the same routing.
#pragma once
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <numeric>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "strata/arch/hparams_limits.hpp"
#include "strata/core/error.hpp"
#include "strata/graph/backend_contract.hpp"
#include "strata/kernels/cpu/format_kernels.hpp"
#include "strata/kernels/cpu/ops.hpp"
#include "strata/kernels/cpu/packed_gemm.hpp"
#include "strata/kernels/cpu/tensor.hpp"
#include "strata/kernels/cpu/thread_pool.hpp"

namespace strata::kernels::cpu {

class moe_runner {
 public:
  using moe_weights = graph::moe_weights<weight>;
  using moe_scratch = graph::moe_scratch<tensor>;

  // Routing buffers for up to max_routed (token, expert) pairs a step (backend::reserve).
  void reserve(std::uint32_t max_routed) {
    if (route_ids_.size() < max_routed) {
      route_ids_.resize(max_routed);
      route_w_.resize(max_routed);
      route_rows_.reserve(max_routed);
      route_pos_.resize(max_routed);
    }
    route_order_.reserve(arch::limits::max_experts);
    if (expert_done_.size() < arch::limits::max_experts) expert_done_.resize(arch::limits::max_experts);
    expert_off_.reserve(arch::limits::max_experts + 1);
    active_.reserve(arch::limits::max_experts);
  }

  // Each row's top mp.n_used experts of its router logits (rows x n_expert) and their weights
  // (backend::moe_route).
  void route(tensor logits, const graph::moe_params& mp) {
    const std::uint32_t n = logits.rows, E = logits.cols, k = mp.n_used;
    if (E > arch::limits::max_experts || k > E || std::size_t(n) * k > route_ids_.size())
      throw error("moe: " + std::to_string(n) + " rows x " + std::to_string(k) + " of " + std::to_string(E) +
                  " experts exceed the routing buffers (" + std::to_string(route_ids_.size()) + " entries)");
    std::int32_t* ids = route_ids_.data();
    float* wts = route_w_.data();
    std::vector<std::uint32_t>& order = route_order_;
    for (std::uint32_t t = 0; t < n; ++t) {
      const float* l = logits.row(t);
      order.resize(E);
      std::iota(order.begin(), order.end(), 0u);
      // Top-k by selection, highest first; ties keep the lower expert index first. (No
      // std::stable_sort: it may allocate, and this runs for every token.)
      for (std::uint32_t j = 0; j < k; ++j) {
        std::uint32_t best = j;
        for (std::uint32_t e = j + 1; e < E; ++e)
          if (l[order[e]] > l[order[best]] || (l[order[e]] == l[order[best]] && order[e] < order[best])) best = e;
        std::swap(order[j], order[best]);
      }
      if (mp.gating == graph::moe_gating::softmax) {
        const float mx = l[order[0]];
        double sum = 0.0;
        for (std::uint32_t e = 0; e < E; ++e) sum += std::exp(double(l[e] - mx));
        float wsum = 0.0f;
        for (std::uint32_t j = 0; j < k; ++j) {
          wts[t * k + j] = float(std::exp(double(l[order[j]] - mx)) / sum);
          wsum += wts[t * k + j];
        }
        wsum = std::max(wsum, 6.103515625e-5f);
        for (std::uint32_t j = 0; j < k; ++j) wts[t * k + j] /= wsum;
      } else {
        for (std::uint32_t j = 0; j < k; ++j) wts[t * k + j] = sigmoid(l[order[j]]);
      }
      for (std::uint32_t j = 0; j < k; ++j) ids[t * k + j] = std::int32_t(order[j]);
    }
    routed_rows_ = n;
  }

  // Keeps each routed row's first `kept` of its k (expert, weight) ranks, as a routing of `kept`
  // a row (weights unchanged: normalised over all k): the CPU's share of a block whose other
  // ranks another device computes (runtime/vulkan/cpu_experts.cpp).
  void keep_first_ranks(std::uint32_t k, std::uint32_t kept) {
    if (kept == 0 || kept > k) throw error("moe: keeping " + std::to_string(kept) + " of " + std::to_string(k) + " ranks");
    for (std::uint32_t t = 0; t < routed_rows_; ++t)
      for (std::uint32_t j = 0; j < kept; ++j) {  // in place: t * kept + j <= t * k + j
        route_ids_[t * kept + j] = route_ids_[t * k + j];
        route_w_[t * kept + j] = route_w_[t * k + j];
      }
  }

  // What an intermediate column range of packed experts must start at (run_packed's ff_begin):
  // whole packed row groups of gate/up and whole blocks of down's rows.
  static std::uint32_t slice_align(const weight& down) noexcept {
    return std::uint32_t(std::lcm<std::uint64_t>(pack_rows, gguf::block_elems(down.type)));
  }

  // Steps of at most `pairs` routed pairs run the packed experts in one pool job; 0: never.
  void set_fuse_pairs(std::uint32_t pairs) noexcept { moe_fuse_pairs_ = pairs; }

  // The last route(): its rows, and per (row, slot) pair the expert id and weight.
  std::uint32_t routed_rows() const noexcept { return routed_rows_; }
  const std::int32_t* ids() const noexcept { return route_ids_.data(); }
  const float* weights() const noexcept { return route_w_.data(); }
  // Scratch for a list of pairs (backend::moe_experts' rows of one expert).
  std::vector<std::uint32_t>& rows() noexcept { return route_rows_; }

  // backend::moe_experts for packed experts in a few pool jobs whatever the number of experts:
  // the routed (token, expert) pairs' rows gathered in expert order and quantized once, gate and
  // up of every expert, SwiGLU + the down's quantization, down of every expert, then each token's
  // sum. The loop in moe_experts runs four pool jobs per expert (32 per layer and token at 8 experts; in
  // decode each is a wake and a wait of every thread on a few microseconds of work). Every row
  // goes through the same packed gemm (whose result does not depend on the batch) and each
  // token adds its experts' rows in increasing expert order, as the loop does: the same bits.
  // Steps of at most moe_fuse_pairs_ pairs (decode) run one pool job, not three: the gather is
  // done by the caller (an unweighted input is quantized once per token and copied to its
  // pairs' rows), gate/up items come before every down item, and the thread that finishes an
  // expert's last gate/up chunk applies SwiGLU to its rows and quantizes them for down, while
  // that expert's down chunks wait for it (they can only wait on items already claimed, so
  // never on themselves); the token sums of one token run on the caller. Longer steps keep a
  // job per stage: one thread's SwiGLU over an expert's many rows would hold the others.
  // False (nothing done) when the experts have no packed copy or gate and up differ in format.
  // pool and act_scratch: the backend's thread pool and activation scratch (as reserve() sized it).
  // ff_begin > 0: only the experts' intermediate columns [ff_begin, n_ff) (gate/up rows and
  // down's inputs), whose sum another device adds to its own of [0, ff_begin) (the GPU's slice
  // of a CPU block: runtime/vulkan/cpu_experts.cpp); ff_begin a multiple of slice_align(D).
  bool run_packed(thread_pool& pool, std::vector<std::byte>& act_scratch, const moe_weights& mw, std::uint32_t pairs,
                  std::uint32_t k, bool weight_input, tensor x, const moe_scratch& s, tensor out, std::uint32_t ff_begin = 0) {
    const weight &G = *mw.gate_exps, &U = *mw.up_exps, &D = *mw.down_exps;
    if (!G.packed || !U.packed || !D.packed || G.kernels != U.kernels) return false;
    const std::uint32_t E = std::uint32_t(G.ne[2]), n_ff_all = std::uint32_t(G.ne[1]), n_embd = x.cols;
    if (ff_begin >= n_ff_all || ff_begin % slice_align(D) != 0)
      throw error("moe: intermediate columns from " + std::to_string(ff_begin) + " of " + std::to_string(n_ff_all) +
                  ": not a multiple of " + std::to_string(slice_align(D)) + " below the width");
    const std::uint32_t n_ff = n_ff_all - ff_begin;  // the columns this call computes
    const std::int32_t* ids = route_ids_.data();
    const float* wts = route_w_.data();
    // Counting sort of the pairs by expert: rows[r] is the pair at gathered row r.
    std::vector<std::uint32_t>& off = expert_off_;
    off.assign(E + 1, 0);
    for (std::uint32_t i = 0; i < pairs; ++i) ++off[std::uint32_t(ids[i]) + 1];
    active_.clear();
    for (std::uint32_t e = 0; e < E; ++e) {
      if (off[e + 1]) active_.push_back(e);
      off[e + 1] += off[e];
    }
    std::vector<std::uint32_t>& rows = route_rows_;
    rows.resize(pairs);
    for (std::uint32_t i = 0; i < pairs; ++i) {
      const std::uint32_t r = off[std::uint32_t(ids[i])]++;
      rows[r] = i;
      route_pos_[i] = r;
    }
    for (std::uint32_t e = E; e > 0; --e) off[e] = off[e - 1];  // back to each expert's first row
    off[0] = 0;

    const format_kernels &kg = *G.kernels, &kd = *D.kernels;
    const std::size_t stride_g = kg.gemm_act_bytes(n_embd), stride_d = kd.gemm_act_bytes(n_ff);
    // Fused: gate/up's input and down's input side by side (down's rows are written while other
    // experts' gate/up still read theirs); else down's input reuses gate/up's.
    const bool fused = pairs <= moe_fuse_pairs_ && std::size_t(pairs) * (stride_g + stride_d) <= act_scratch.size() &&
                       expert_done_.size() >= active_.size();
    if (std::size_t(pairs) * std::max(stride_g, stride_d) > act_scratch.size())
      throw error("moe: " + std::to_string(pairs) + " routed rows exceed the activation scratch reserve() sized");
    std::byte* act = act_scratch.data();
    std::byte* act_ff = fused ? act + std::size_t(pairs) * stride_g : act;
    const std::uint32_t n = pairs / k;
    if (fused && !weight_input) {  // every pair of a token reads the token's row: quantize it once
      for (std::uint32_t t = 0; t < n; ++t) {
        std::byte* first = act + std::size_t(route_pos_[t * k]) * stride_g;
        quantize_for_gemm(kg, x.row(t), first, n_embd);
        for (std::uint32_t j = 1; j < k; ++j) std::memcpy(act + std::size_t(route_pos_[t * k + j]) * stride_g, first, stride_g);
      }
    } else {
      pool.parallel_for(pairs, 1, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t r = b; r < e; ++r) {
          const float* src = x.row(rows[r] / k);
          float* dst = s.xin.row(std::uint32_t(r));
          const float f = weight_input ? wts[rows[r]] : 1.0f;
          for (std::uint32_t c = 0; c < n_embd; ++c) dst[c] = weight_input ? src[c] * f : src[c];
          quantize_for_gemm(kg, dst, act + r * stride_g, n_embd);
        }
      });
    }
    // SwiGLU of gathered rows [b, e) and their quantization for down.
    const auto swiglu_rows = [&](std::size_t b, std::size_t e) {
      for (std::size_t r = b; r < e; ++r) {
        float* g = s.gate.row(std::uint32_t(r)) + ff_begin;
        const float* u = s.up.row(std::uint32_t(r)) + ff_begin;
        for (std::uint32_t i = 0; i < n_ff; ++i) g[i] = silu(g[i]) * u[i];
        quantize_for_gemm(kd, g, act_ff + r * stride_d, n_ff);
      }
    };
    // Items over (expert, matrix, chunk of 16-row groups); a chunk's weights stay in L2 while
    // the expert's rows pass over them (as matmul_packed sizes them).
    // A stage's rows are groups [group0, group0 + groups) and its inputs the row elements from
    // k0 on (bytes k_skip into each packed group): gate/up's rows and down's inputs of the
    // columns this call computes.
    struct stage {
      const weight* w[2];
      tensor y[2];
      std::size_t mats, k_in, stride, group0, groups, group_bytes, k_skip, chunk, chunks, per_expert;
      const std::byte* act;
    };
    const auto make_stage = [&](std::initializer_list<std::pair<const weight*, tensor>> mats, std::size_t k_in,
                                std::size_t stride, const std::byte* in, std::size_t row0, std::size_t k0) {
      stage st{};
      for (const auto& [w, y] : mats) {
        st.w[st.mats] = w;
        st.y[st.mats++] = y;
      }
      st.k_in = k_in;
      st.stride = stride;
      st.group0 = row0 / pack_rows;
      st.groups = packed_groups(st.w[0]->ne[1]) - st.group0;
      st.group_bytes = pack_rows * st.w[0]->row_bytes;
      st.k_skip = k0 / gguf::block_elems(st.w[0]->type) * pack_rows * gguf::block_bytes(st.w[0]->type);
      st.chunk = std::clamp<std::size_t>((256u << 10) / st.group_bytes, 1, std::max<std::size_t>(1, st.groups / 2));
      st.chunks = (st.groups + st.chunk - 1) / st.chunk;
      st.per_expert = st.chunks * st.mats;
      st.act = in;
      return st;
    };
    const auto run_item = [&](const stage& st, std::size_t it) {
      const std::uint32_t ex = active_[it / st.per_expert];
      const std::size_t within = it % st.per_expert, c = within % st.chunks, m = within / st.chunks;
      const weight& w = *st.w[m];
      gemm_args a;
      a.w = w.packed + ex * w.packed_slab_bytes + st.k_skip;
      a.group_bytes = st.group_bytes;
      a.group_begin = st.group0 + c * st.chunk;
      a.group_end = std::min(st.group0 + st.groups, a.group_begin + st.chunk);
      a.act = reinterpret_cast<const std::uint8_t*>(st.act + off[ex] * st.stride);
      a.act_stride = st.stride;
      a.act_row_bytes = w.kernels->act_row_bytes(st.k_in);
      a.n_tok = off[ex + 1] - off[ex];
      a.y = st.y[m].row(off[ex]);
      a.y_stride = st.y[m].stride;
      a.n_rows = w.ne[1];
      a.k = st.k_in;
      w.kernels->gemm(a);
    };
    const stage gu = make_stage({{&G, s.gate}, {&U, s.up}}, n_embd, stride_g, act, ff_begin, 0);
    const stage dn = make_stage({{&D, s.y}}, n_ff, stride_d, act_ff, 0, ff_begin);
    const std::size_t A = active_.size(), n_gu = A * gu.per_expert;
    if (fused) {
      // expert_done_[a]: gate/up chunks of active expert a finished; per_expert + 1 once its
      // rows are SwiGLU'd and quantized (release: down's threads then see them).
      const auto ready = std::uint32_t(gu.per_expert + 1);
      for (std::size_t a = 0; a < A; ++a) expert_done_[a] = 0;
      pool.parallel_for(n_gu + A * dn.per_expert, 1, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t it = b; it < e; ++it) {
          if (it < n_gu) {
            run_item(gu, it);
            const std::size_t a = it / gu.per_expert;
            std::atomic_ref<std::uint32_t> done(expert_done_[a]);
            // acq_rel: the thread that completes the expert sees the other threads' rows of it.
            if (done.fetch_add(1, std::memory_order_acq_rel) + 1 != gu.per_expert) continue;
            swiglu_rows(off[active_[a]], off[active_[a] + 1]);
            done.store(ready, std::memory_order_release);
            continue;
          }
          const std::size_t d = it - n_gu, a = d / dn.per_expert;
          std::atomic_ref<std::uint32_t> done(expert_done_[a]);
          for (std::uint32_t spin = 0; done.load(std::memory_order_acquire) != ready; ++spin) {
            if (spin < 4096) STRATA_CPU_RELAX();
            else std::this_thread::yield();  // its last gate/up chunk's thread is not running
          }
          run_item(dn, d);
        }
      });
    } else {
      pool.parallel_for(n_gu, 1, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t it = b; it < e; ++it) run_item(gu, it);
      });
      pool.parallel_for(pairs, 1, [&](std::size_t b, std::size_t e, unsigned) { swiglu_rows(b, e); });
      pool.parallel_for(A * dn.per_expert, 1, [&](std::size_t b, std::size_t e, unsigned) {
        for (std::size_t it = b; it < e; ++it) run_item(dn, it);
      });
    }
    pool.parallel_for(n, 1, [&](std::size_t b, std::size_t e, unsigned) {
      for (std::size_t t = b; t < e; ++t) {
        std::uint32_t pos[arch::limits::max_experts_used];
        for (std::uint32_t j = 0; j < k; ++j) pos[j] = route_pos_[t * k + j];
        std::sort(pos, pos + k);  // rows are in expert order: increasing expert id
        float* o = out.row(std::uint32_t(t));
        for (std::uint32_t j = 0; j < k; ++j) {
          const float f = weight_input ? 1.0f : wts[rows[pos[j]]];
          const float* y = s.y.row(pos[j]);
          for (std::uint32_t c = 0; c < out.cols; ++c) o[c] += f * y[c];
        }
      }
    });
    return true;
  }

 private:
  std::vector<std::int32_t> route_ids_;
  std::vector<float> route_w_;
  std::vector<std::uint32_t> route_order_, route_rows_;
  std::vector<std::uint32_t> route_pos_;              // pair -> its gathered row (run_packed)
  std::vector<std::uint32_t> expert_off_, active_;    // per expert: first gathered row; experts routed
  std::uint32_t routed_rows_ = 0;  // rows of the last route()
  std::vector<std::uint32_t> expert_done_;  // fused run_packed: per active expert (atomic_ref)
  std::uint32_t moe_fuse_pairs_ = 64;       // steps of at most this many pairs run it fused
};

}  // namespace strata::kernels::cpu
