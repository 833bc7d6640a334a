#include "mma_layout.hpp"

#include <array>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "commands.hpp"
#include "context.hpp"
#include "memory.hpp"
#include "pipelines.hpp"
#include "strata/core/error.hpp"

namespace strata::gpu {

namespace {

// One warp of shaders/mma_layout.glsl (with `defines`), its N output words read back.
template <std::size_t N>
std::array<std::uint32_t, N> run_probe(const context& ctx, pipeline_registry& pipes,
                                       std::vector<std::pair<std::string, std::string>> defines) {
  const pipeline& pl = pipes.get({"mma_layout", std::nullopt, std::move(defines), 1});
  gpu_buffer out(ctx, N * 4, memory_kind::readback, "cooperative-matrix layout probe");
  run_once(ctx, [&](command_recorder& rec) {
    const binding b[] = {{{out.handle(), 0, out.size(), 0}, true}};
    rec.dispatch(pl, b, nullptr, 0, 1);
  }, "cooperative-matrix layout probe");
  std::array<std::uint32_t, N> v{};
  std::memcpy(v.data(), out.mapped(), sizeof v);
  return v;
}

template <std::size_t N>
std::string glsl_list(const std::array<int, N>& a) {
  std::string s;
  for (std::size_t i = 0; i < N; ++i) {
    if (i) s += ',';
    s += std::to_string(a[i]);  // (not "," + std::to_string(..): GCC 12's -Wrestrict misfires on that form)
  }
  return s;
}

}  // namespace

std::optional<mma_layout> probe_mma_layout(const context& ctx, pipeline_registry& pipes) {
  const auto v = run_probe<257>(ctx, pipes, {{"WG", "32"}, {"COOPMAT", "1"}});
  if (v[256] != 8) return std::nullopt;
  std::array<int, 8> dr{}, dc{};
  std::array<bool, 256> seen{};
  bool quad = true;
  for (std::uint32_t lane = 0; lane < 32; ++lane)
    for (std::uint32_t e = 0; e < 8; ++e) {
      const std::uint32_t p = v[lane * 8 + e], p0 = v[lane * 8];
      if (p >= 256 || seen[p]) return std::nullopt;
      seen[p] = true;
      const int r = int(p / 16) - int(p0 / 16), col = int(p % 16) - int(p0 % 16);
      if (e == 0) quad = quad && p0 / 16 == lane / 4 && p0 % 16 == 2 * (lane % 4);
      if (lane == 0) dr[e] = r, dc[e] = col;
      else if (dr[e] != r || dc[e] != col) return std::nullopt;
    }
  mma_layout l{glsl_list(dr), glsl_list(dc)};
  l.quad = quad && dr == std::array<int, 8>{0, 0, 0, 0, 8, 8, 8, 8} && dc == std::array<int, 8>{0, 1, 8, 9, 0, 1, 8, 9};
  return l;
}

std::optional<f16_fragments> probe_f16_fragments(const context& ctx, pipeline_registry& pipes, std::string* dump) {
  if (!ctx.info().nv_coopmat_n8) return std::nullopt;
  const auto v = run_probe<417>(ctx, pipes, {{"WG", "32"}, {"COOPMAT", "1"}, {"F16_AB", "1"}});
  if (dump) {
    *dump = "elements " + std::to_string(v[384] & 0xFF) + " + " + std::to_string(v[384] >> 8) + " a lane";
    for (std::uint32_t lane = 0; lane < 8; ++lane) {
      *dump += "; lane " + std::to_string(lane) + ":";
      for (std::uint32_t e = 0; e < 12; ++e) {
        if (e == 8) *dump += " |";
        *dump += ' ';
        *dump += std::to_string(v[lane * 12 + e]);
      }
    }
  }
  if (v[384] != (8u | (4u << 8))) return std::nullopt;
  const auto offset_ok = [](int o) { return o == 0 || o == 1 || o == 8 || o == 9; };
  const auto col_bit = [](int c) { return 1u << (c / 8 * 2 + c % 2); };
  // A (16 r + c): lane l = 4 g + t holds rows g + {0, 8}, columns 2t + {0, 1, 8, 9}, each once,
  // at the same offsets in every lane; each even element and the next in one row at columns c, c+1.
  std::array<int, 8> ar{}, ac{};
  for (std::uint32_t lane = 0; lane < 32; ++lane)
    for (std::uint32_t e = 0; e < 8; ++e) {
      const std::uint32_t x = v[lane * 12 + e];
      if (x >= 256) return std::nullopt;
      const int dr = int(x / 16) - int(lane / 4), dc = int(x % 16) - 2 * int(lane % 4);
      if ((dr != 0 && dr != 8) || !offset_ok(dc)) return std::nullopt;
      if (lane == 0) ar[e] = dr, ac[e] = dc;
      else if (ar[e] != dr || ac[e] != dc) return std::nullopt;
    }
  std::uint32_t a_seen = 0;
  for (std::uint32_t e = 0; e < 8; ++e) a_seen |= col_bit(ac[e]) << (ar[e] / 2);
  if (a_seen != 0xFFu) return std::nullopt;
  for (std::uint32_t e = 0; e < 8; e += 2)
    if (ar[e] != ar[e + 1] || ac[e] % 2 || ac[e + 1] != ac[e] + 1) return std::nullopt;
  f16_fragments out{glsl_list(ar), glsl_list(ac), {}};
  // B (8 k + n): lane l holds token g, k = 2t + {0, 1, 8, 9}, likewise; else B goes through
  // shared memory (b_ks empty).
  std::array<int, 4> bk{};
  bool b_quad = true;
  for (std::uint32_t lane = 0; lane < 32 && b_quad; ++lane)
    for (std::uint32_t e = 0; e < 4 && b_quad; ++e) {
      const std::uint32_t x = v[lane * 12 + 8 + e];
      const int dk = int(x / 8) - 2 * int(lane % 4);
      b_quad = x < 128 && x % 8 == lane / 4 && offset_ok(dk) && (lane == 0 || bk[e] == dk);
      if (lane == 0) bk[e] = dk;
    }
  std::uint32_t b_seen = 0;
  for (std::uint32_t e = 0; e < 4 && b_quad; ++e) b_seen |= col_bit(bk[e]);
  for (std::uint32_t e = 0; e < 4 && b_quad; e += 2) b_quad = bk[e] % 2 == 0 && bk[e + 1] == bk[e] + 1;
  if (b_quad && b_seen == 0xFu) out.b_ks = glsl_list(bk);
  return out;
}

}  // namespace strata::gpu
