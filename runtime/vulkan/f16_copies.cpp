// f16 copies of the layers' weight matrices for prompt steps (backend_options::f16_copies).
// A prompt step's tensor-core GEMM multiplies f16 tiles; without a copy it expands the quantized
// weights into the f16 scratch every step (dequant_f16.glsl, beside the GEMM before: ~2.5 bytes
// written and read a weight, a fixed cost of every step whatever its length) or expands each tile
// in place. With a copy it reads the copy, as it reads an F16 file's weights: the expansion runs
// once, here, with the same kernel, so the values are the scratch's bit for bit. Decode's matvecs
// read the quantized weights either way. Gate and up of a block share one buffer, up's rows after
// gate's, so the SwiGLU GEMM binds the pair as one range as it binds a scratch slot.
#include <algorithm>
#include <chrono>
#include <utility>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "backend_impl.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {
namespace {

constexpr std::uint64_t copy_gib = 1ull << 30;

}  // namespace

// Whether the prompt GEMM (record_mul_mm_f16, record_mm3_swiglu) may read a copy of weight e:
// a resident layer matrix of a format it expands to f16 tiles, where steps reach
// f16_copy_min_tokens (shorter ones keep their paths: the copy's bytes would bind them).
bool backend::impl::f16_copy_candidate(const weight_entry& e) const {
  const gguf::tensor_info& t = *e.info;
  return t.name.starts_with("blk.") && t.ne[2] == 1 && t.ne[1] > 1 && t.ne[0] % 64 == 0 && t.type != gguf::type_id::f16 &&
         f16_operands_ok(t.type) && resident(e) &&
         max_rows >= f16_copy_min_tokens && tiled_matmul(t.type, t.ne[0], max_rows);
}

void backend::impl::make_f16_copies() {
  if (!f16_copies.empty()) return;  // made once, at the first make_kv()
  const std::optional<bool> wanted = f16_copies_env ? f16_copies_env : opt.f16_copies;  // STRATA_VK_F16_COPIES first
  // Filled here, kept only once the expansion has run (a throw leaves no copy the GEMMs would read).
  std::vector<f16_copy> made(weights.size());
  if (!coopmat || !mm3 || !mm_xh || (wanted && !*wanted)) return;

  // Units in file order: a block's gate and up (same shape and format) as one pair buffer.
  struct unit {
    std::uint32_t first = 0, second = ~0u;
    std::uint64_t bytes = 0;
  };
  std::unordered_map<std::string_view, std::uint32_t> by_name;
  for (std::uint32_t i = 0; i < weights.size(); ++i) by_name.emplace(weights[i].info->name, i);
  std::vector<unit> units;
  std::vector<bool> taken(weights.size(), false);
  for (std::uint32_t i = 0; i < weights.size(); ++i) {
    const gguf::tensor_info& t = *weights[i].info;
    if (taken[i] || !f16_copy_candidate(weights[i])) continue;
    unit u{i, ~0u, t.ne[0] * t.ne[1] * 2};
    if (t.name.ends_with(".ffn_gate.weight")) {
      const std::string up_name = std::string(t.name.substr(0, t.name.size() - 16)) + ".ffn_up.weight";
      if (const auto it = by_name.find(up_name); it != by_name.end() && f16_copy_candidate(weights[it->second])) {
        const gguf::tensor_info& ut = *weights[it->second].info;
        if (ut.type == t.type && ut.ne[0] == t.ne[0] && ut.ne[1] == t.ne[1]) {
          u.second = it->second;
          u.bytes *= 2;
          taken[it->second] = true;
        }
      }
    }
    if (u.bytes > ctx.info().max_storage_range) continue;  // bound whole by the GEMM: beyond the device's range
    units.push_back(u);
  }
  stats.f16_candidates = std::uint32_t(units.size() + std::count_if(units.begin(), units.end(), [](const unit& u) { return u.second != ~0u; }));
  if (units.empty()) return;

  // What the copies may take: the budget's rest (on) or nothing (auto) under --gpu-budget, whose
  // placement is planned to the byte; without one the free device memory less a margin.
  std::uint64_t allowance = 0;
  const memory_ledger& ledger = ctx.ledger();
  if (ledger.budget) {
    // 512 MiB of the budget kept for the buffers steps make when first recorded (split attention's
    // partials, rotated queries, the expert cache's hand-off rows).
    const std::uint64_t used = ledger.total() + copy_gib / 2;
    if (wanted) allowance = ledger.budget > used ? ledger.budget - used : 0;
  } else {
    const device_memory now = ctx.memory_now();
    // Auto takes none on a CPU device (lavapipe: "device memory" is the host's RAM) or without
    // VK_EXT_memory_budget (the "free" figure is then the whole heap, blind to what is placed).
    if (!wanted && (now.is_cpu || !now.budget_ext)) return;
    const std::uint64_t free = now.budget_bytes > now.usage_bytes ? now.budget_bytes - now.usage_bytes : 0;
    const std::uint64_t margin = wanted ? copy_gib / 2 : std::max<std::uint64_t>(4 * copy_gib, now.heap_bytes / 4);
    allowance = free > margin ? free - margin : 0;
  }

  const auto t0 = std::chrono::steady_clock::now();
  // The units that fit (a smaller one later may still fit after one that does not), each its buffer.
  std::vector<std::pair<const unit*, std::uint32_t>> copies;
  for (const unit& u : units) {
    if (u.bytes > allowance) continue;
    allowance -= u.bytes;
    const std::string name(weights[u.first].info->name);
    copies.emplace_back(&u, new_buffer(u.bytes, memory_kind::device, "weights: f16 copy of " + name + " (prompt steps)"));
    stats.f16_copy_bytes += u.bytes;
  }
  if (copies.empty()) return;
  run_once(ctx, [&](command_recorder& r) {
    for (const auto& [u, id] : copies)
      for (const std::uint32_t w_id : {u->first, u->second}) {
        if (w_id == ~0u) continue;
        const gguf::tensor_info& t = *weights[w_id].info;
        const std::uint64_t at = w_id == u->second ? u->bytes / 2 : 0;
        made[w_id] = {id, at};
        ++stats.f16_copies;
        weight w;
        w.id = w_id;
        const pipeline& p = pipes.get(dequant_req(t.type));
        // Rows a dispatch: its granules (16 elements each, 256 a workgroup) within one grid row.
        const std::uint32_t K = std::uint32_t(t.ne[0]), N = std::uint32_t(t.ne[1]);
        const std::uint32_t per = std::max<std::uint32_t>(1, std::uint32_t(65535ull * 256 / (K / 16)));
        for (std::uint32_t r0 = 0; r0 < N; r0 += per) {
          const std::uint32_t rows = std::min(per, N - r0);
          const dequant_f16_pc dq{K, std::uint32_t(t.row_bytes()), r0, rows, std::uint32_t((at / 2 + std::uint64_t(r0) * K) / 8)};
          binding b[] = {bind_weight(w), bind_id(id, true)};
          b[1].disjoint = true;  // every dispatch writes its own rows
          r.dispatch(p, b, &dq, sizeof dq, detail::div_up(std::uint64_t(rows) * (K / 16), 256));
        }
      }
  }, "the f16 weight copies' expansion");
  f16_copies = std::move(made);
  stats.f16_copy_ms = ms_since(t0);
}

}  // namespace strata::gpu
