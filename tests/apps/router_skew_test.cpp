// strata-mkmodel --router skewed (apps/mkmodel/router_skew.hpp): the target shape reproduces the
// published Qwen3-30B-A3B numbers, the fitted row scales give that routing under the fit's model
// (independent per-expert logits), and a generated model's router rows carry the scales.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <string>
#include <unistd.h>

#include "generate.hpp"
#include "random_blocks.hpp"
#include "router_skew.hpp"
#include "strata/gguf/reader.hpp"

namespace mk = strata::mkmodel;

namespace {
// Share of the busiest expert and how many experts hold 90% of the selections.
std::pair<double, std::uint32_t> top_and_cover90(std::vector<double> count) {
  std::sort(count.begin(), count.end(), std::greater<>());
  const double total = std::accumulate(count.begin(), count.end(), 0.0);
  std::uint32_t cover = 0;
  for (double acc = 0; acc < 0.9 * total;) acc += count[cover++];
  return {count[0] / total, cover};
}
}  // namespace

TEST_CASE("skewed router: target shares are Qwen3-30B-A3B's measured shape") {
  const auto s = mk::skewed_router_shares(128, 8);
  CHECK(std::accumulate(s.begin(), s.end(), 0.0) == doctest::Approx(1.0));
  CHECK(s[0] == doctest::Approx(0.043));
  CHECK(std::accumulate(s.begin(), s.begin() + 65, 0.0) == doctest::Approx(0.9).epsilon(0.001));
  CHECK(std::is_sorted(s.begin(), s.end(), std::greater<>()));
  const auto scout = mk::skewed_router_shares(16, 1);  // scaled by n: 4.3% x 8
  CHECK(scout[0] == doctest::Approx(0.344));
  CHECK_THROWS_AS(mk::skewed_router_shares(8, 9), strata::error);
}

TEST_CASE("skewed router: fitted scales reproduce the shape (top 4.3%, 65 of 128 experts for 90%)") {
  const auto rank = mk::skewed_router_rank_scales(128, 8);
  const auto [top, cover] = top_and_cover90(mk::simulate_router(rank, 8, 20000, 7));
  CHECK(top == doctest::Approx(0.043).epsilon(0.12));
  CHECK(cover >= 62);
  CHECK(cover <= 68);
  const auto uniform = top_and_cover90(mk::simulate_router(std::vector<float>(128, 1.0f), 8, 20000, 7));
  CHECK(uniform.second > 105);  // what random router rows give: near-uniform
  // Each layer shuffles which expert is hot; the multiset of scales stays.
  auto a = mk::scales_for_layer(rank, 1), b = mk::scales_for_layer(rank, 2);
  CHECK(a != b);
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  CHECK(a == b);
}

TEST_CASE("skewed router: a generated model's router rows carry the scales, bad --router refused") {
  mk::options o;
  o.preset = "tiny-qwen3moe";
  o.type = "Q8_0";
  o.router = "skewed";
  o.threads = 2;
  const auto m = mk::plan_model(o);
  const auto path = std::filesystem::temp_directory_path() / ("strata_router_skew_" + std::to_string(::getpid()) + ".gguf");
  mk::write_model(m, path, {});
  {
    const strata::gguf::file f(path);
    const auto rank = mk::skewed_router_rank_scales(8, 2);
    const auto& t = f->tensor("blk.1.ffn_gate_inp.weight");
    REQUIRE(t.type == strata::gguf::type_id::f32);
    const auto want = mk::scales_for_layer(rank, mk::tensor_seed(o.seed, "blk.1.ffn_gate_inp.weight"));
    for (std::uint64_t r = 0; r < t.ne[1]; ++r) {
      double ss = 0;
      for (std::uint64_t c = 0; c < t.ne[0]; ++c) {
        float v;
        std::memcpy(&v, t.data.data() + (r * t.ne[0] + c) * 4, 4);
        ss += double(v) * v;
      }
      const double rms = std::sqrt(ss / double(t.ne[0]));
      CAPTURE(r);
      CHECK(rms / (0.1 * want[r]) == doctest::Approx(1.0).epsilon(0.2));  // 256 N(0, 0.1 s) values
    }
  }
  std::filesystem::remove(path);
  o.router = "zipf";
  CHECK_THROWS_WITH(mk::plan_model(o), doctest::Contains("unknown --router 'zipf'"));
}
