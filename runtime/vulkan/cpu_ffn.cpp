// The CPU side of the dense-FFN hand-off (cpu_ffn.hpp): the CPU backend's matmuls and SwiGLU
// over host views of the hand-off buffers.
#include "cpu_ffn.hpp"

#include <algorithm>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/kernels/cpu/backend.hpp"
#include "strata/runtime/cpu_kernels.hpp"

namespace strata::gpu {

struct cpu_ffn::state {
  kernels::cpu::backend be;
  std::vector<kernels::cpu::weight> weights;
  kernels::cpu::buffer gate, up;  // max_rows x the widest FFN
  std::uint32_t max_rows = 0;

  explicit state(unsigned threads)
      : be(threads ? threads : kernels::cpu::thread_pool::physical_cores(), rt::select_kernel_table(rt::best_isa())) {}
};

cpu_ffn::cpu_ffn(unsigned threads) : s_(std::make_unique<state>(threads)) {}
cpu_ffn::~cpu_ffn() = default;

unsigned cpu_ffn::threads() const noexcept { return s_->be.threads(); }
kernels::cpu::thread_pool& cpu_ffn::pool() noexcept { return s_->be.pool(); }

std::uint32_t cpu_ffn::load(const gguf::tensor_info& t) {
  if (t.ne[1] < 2 || t.ne[2] != 1 || t.ne[3] != 1)
    throw error("tensor '" + std::string(t.name) + "' is not a dense FFN matrix [n_in, n_out]");
  s_->weights.push_back(s_->be.load(t));
  return std::uint32_t(s_->weights.size() - 1);
}

void cpu_ffn::reserve(std::uint32_t max_rows) {
  auto& S = *s_;
  std::uint32_t width = 0;
  for (const auto& w : S.weights) width = std::max({width, std::uint32_t(w.ne[0]), std::uint32_t(w.ne[1])});
  S.gate = S.be.alloc(max_rows, width);
  S.up = S.be.alloc(max_rows, width);
  S.be.reserve(max_rows, 0);
  S.max_rows = max_rows;
}

void cpu_ffn::run(std::uint32_t gate, std::uint32_t up, std::uint32_t down, std::uint32_t rows, std::uint32_t cols,
                  const float* x, float* out) {
  auto& S = *s_;
  if (rows > S.max_rows) throw error("CPU FFN: " + std::to_string(rows) + " rows exceed the reserved " + std::to_string(S.max_rows));
  using ct = kernels::cpu::tensor;
  const auto& g = S.weights.at(gate);
  const auto ff = std::uint32_t(g.ne[1]);
  const ct xv{const_cast<float*>(x), rows, cols, cols};  // read only
  const ct gv = S.gate.all().first_rows(rows).first_cols(ff), uv = S.up.all().first_rows(rows).first_cols(ff);
  // Gate and up in one pool job, SwiGLU folded in, then down (the bits of matmul, swiglu, matmul).
  S.be.swiglu_ffn(g, S.weights.at(up), S.weights.at(down), xv, gv, uv, {out, rows, cols, cols});
}

}  // namespace strata::gpu
