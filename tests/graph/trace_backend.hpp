// A backend that computes nothing and records every op the decoder calls, with the plain
// parameters it was given: the decoder's side of graph/backend_contract.hpp checked without a
// kernel (which ops a layer plan produces, in which order, on which KV layer).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "strata/graph/backend_contract.hpp"

namespace strata::test {

struct trace_backend {
  struct tensor {
    std::uint32_t id = 0, rows = 0, cols = 0;
    tensor first_rows(std::uint32_t n) const noexcept { return {id, n, cols}; }
    tensor first_cols(std::uint32_t n) const noexcept { return {id, rows, n}; }
    tensor split_rows(std::uint32_t parts) const noexcept { return {id, rows * parts, cols / parts}; }
  };
  struct buffer {
    std::uint32_t id = 0, rows = 0, cols = 0;
    tensor view(std::uint32_t n) const noexcept { return {id, n, cols}; }
    tensor all() const noexcept { return view(rows); }
  };
  struct weight {
    std::string name;
    std::uint64_t ne[4] = {0, 1, 1, 1};
    explicit operator bool() const noexcept { return !name.empty(); }
  };
  struct kv_state {
    kv::kv_config cfg;
  };

  struct op {
    std::string name;
    std::uint32_t layer = ~0u;  // kv_store / attention: the KV layer
    std::uint32_t rows = 0;     // rows of the first tensor
    std::string weight;         // matmul / rms_norm / embed / rope freq factors
  };
  std::vector<op> ops;
  std::vector<std::string> loaded;
  graph::step_inputs step;
  std::vector<graph::rope_params> ropes;
  std::vector<graph::position_scale_params> scales;
  std::vector<graph::attention_params> attentions;
  std::vector<graph::moe_params> moes;
  std::uint32_t reserved_tokens = 0, reserved_routed = 0, next_id = 1;
  std::uint32_t host_rows = 0;  // rows the last read() / argmax() hands to the host
  // The step's batch as begin() saw it (its spans point into the decoder's storage).
  std::vector<std::int32_t> step_tokens, step_positions;
  std::vector<std::uint32_t> step_seq_ids;
  std::vector<std::uint8_t> step_logits;

  weight load(const gguf::tensor_info& t) {
    loaded.emplace_back(t.name);
    weight w{std::string(t.name), {}};
    for (int d = 0; d < 4; ++d) w.ne[d] = t.ne[d];
    return w;
  }
  buffer alloc(std::uint32_t rows, std::uint32_t cols) { return {next_id++, rows, cols}; }
  void reserve(std::uint32_t max_tokens, std::uint32_t max_routed) {
    reserved_tokens = max_tokens;
    reserved_routed = max_routed;
  }
  kv_state make_kv(const kv::kv_config& c) { return {c}; }

  void begin(const graph::step_inputs& s) {
    step = s;
    step_tokens.assign(s.tokens.tokens.begin(), s.tokens.tokens.end());
    step_positions.assign(s.tokens.positions.begin(), s.tokens.positions.end());
    step_seq_ids.assign(s.tokens.seq_ids.begin(), s.tokens.seq_ids.end());
    step_logits.assign(s.tokens.logits.begin(), s.tokens.logits.end());
    ops.push_back({"begin", ~0u, std::uint32_t(s.tokens.size()), {}});
  }
  void embed(const weight& w, tensor out) { ops.push_back({"embed", ~0u, out.rows, w.name}); }
  void rms_norm(tensor x, const weight* w, float, tensor) { ops.push_back({"rms_norm", ~0u, x.rows, w ? w->name : ""}); }
  void matmul(const weight& w, tensor x, tensor) { ops.push_back({"matmul", ~0u, x.rows, w.name}); }
  void rope(tensor x, std::uint32_t, const graph::rope_params& p, const weight* ff) {
    ops.push_back({"rope", ~0u, x.rows, ff ? ff->name : ""});
    ropes.push_back(p);
  }
  void scale_by_position(tensor x, const graph::position_scale_params& p) {
    ops.push_back({"scale_by_position", ~0u, x.rows, {}});
    scales.push_back(p);
  }
  void kv_store(kv_state&, std::uint32_t layer, tensor k, tensor) { ops.push_back({"kv_store", layer, k.rows, {}}); }
  void attention(const kv_state&, std::uint32_t layer, tensor q, const graph::attention_params& p, tensor) {
    ops.push_back({"attention", layer, q.rows, {}});
    attentions.push_back(p);
  }
  void swiglu(tensor g, tensor, tensor) { ops.push_back({"swiglu", ~0u, g.rows, {}}); }
  void add(tensor a, tensor, tensor) { ops.push_back({"add", ~0u, a.rows, {}}); }
  void moe_ffn(const graph::moe_weights<weight>& w, const graph::moe_params& p, tensor x, const graph::moe_scratch<tensor>&,
               tensor) {
    ops.push_back({"moe_ffn", ~0u, x.rows, w.gate_inp->name});
    moes.push_back(p);
  }
  void select_rows(tensor, tensor out) { ops.push_back({"select_rows", ~0u, out.rows, {}}); }
  void write(tensor dst, std::span<const float>) { ops.push_back({"write", ~0u, dst.rows, {}}); }
  void read(tensor src, std::span<float> dst) {
    ops.push_back({"read", ~0u, src.rows, {}});
    host_rows = std::uint32_t(dst.size() / src.cols);
  }
  void argmax(tensor src, std::span<std::int32_t> dst) {
    ops.push_back({"argmax", ~0u, src.rows, {}});
    host_rows = std::uint32_t(dst.size());
  }
  void finish() { ops.push_back({"finish", ~0u, 0, {}}); }

  // Names of the recorded ops, in order.
  std::vector<std::string> names() const {
    std::vector<std::string> n;
    for (const auto& o : ops) n.push_back(o.name);
    return n;
  }
  std::size_t count(const std::string& name) const {
    std::size_t c = 0;
    for (const auto& o : ops) c += o.name == name;
    return c;
  }
};
static_assert(graph::backend<trace_backend>);

// The trace backend as a recording backend would pad its steps (backend_contract.hpp,
// step_rows): 1 and 2 tokens as they are, more as 8.
struct padding_trace_backend : trace_backend {
  std::uint32_t step_rows(std::uint32_t n) const { return n <= 2 ? n : 8; }
};

}  // namespace strata::test
