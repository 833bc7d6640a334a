// Every GPU dequantizer (shaders/quant/<fmt>.glsl) against the C++ format header's dequant(),
// through the get_rows kernel (the embedding lookup is a plain dequant): rows quantized by the
// format's reference quantizer, rows of random bytes (every code and scale bit pattern) and
// the ggml golden rows of tests/fixtures/quant. Bit-exact: each dequantizer does the C++
// header's float operations in its order and `precise` stops FMA contraction.
#include <doctest/doctest.h>

#include <algorithm>
#include <cfloat>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <vector>

#include "strata/core/error.hpp"
#include "strata/core/fp16.hpp"
#include "strata/quant/all.hpp"
#include "vulkan/vk_harness.hpp"

namespace {

using namespace strata;
namespace vkt = strata::test::vk;

#ifdef STRATA_HAS_VULKAN

template <class... F, class G>
void for_each_format(quant::type_list<F...>, G&& g) {
  (g(F{}), ...);
}

// Random blocks re-rolled until every value is finite, below 1e6 and either zero or a normal
// float: "sane scales", so a device that flushes subnormals (Vulkan allows it) still has to
// match bit for bit. F32 blocks are single floats, re-rolled the same way.
template <class Fmt>
std::vector<typename Fmt::block> raw_blocks(std::size_t n_blocks, std::mt19937& rng) {
  using B = typename Fmt::block;
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<B> w(n_blocks);
  for (auto& b : w)
    for (;;) {
      auto* p = reinterpret_cast<unsigned char*>(&b);
      for (std::size_t k = 0; k < sizeof(B); ++k) p[k] = static_cast<unsigned char>(byte(rng));
      float y[Fmt::block_elems];
      Fmt::dequant(b, std::span<float, Fmt::block_elems>(y, Fmt::block_elems));
      if (std::all_of(y, y + Fmt::block_elems,
                      [](float v) { return std::isfinite(v) && std::fabs(v) < 1e6f && (v == 0 || std::fabs(v) >= FLT_MIN); }))
        break;
    }
  return w;
}

// Weight-like floats: normal with a scale that changes every 32 elements (1e-3 .. 10).
std::vector<float> varied_floats(std::size_t n, std::mt19937& rng) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::uniform_real_distribution<float> ud(-3.0f, 1.0f);
  std::vector<float> x(n);
  for (std::size_t g = 0; g < n; g += 32) {
    const float sigma = std::pow(10.0f, ud(rng));
    for (std::size_t j = g; j < std::min(n, g + 32); ++j) x[j] = sigma * nd(rng);
  }
  return x;
}

std::string upper(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = char(c >= 'a' && c <= 'z' ? c - 32 : c);
  return r;
}

struct row_set {
  std::vector<std::byte> bytes;  // rows of K elements in the format
  std::string what;
  std::size_t rows = 0;
};

// Runs embed() (the get_rows kernel) over `ids` (rows of a K-wide table of `type`) on a fresh backend.
std::vector<float> gpu_get_rows(gguf::type_id type, const std::vector<std::byte>& table, std::uint32_t K,
                                std::uint32_t rows, const std::vector<std::int32_t>& ids) {
  vkt::weight_store store;
  gpu::backend be;
  const auto w = be.load(store.add("dequant.table", type, table, K, rows));
  const std::uint32_t n = std::uint32_t(ids.size());
  const auto out = be.alloc(n, K);
  be.reserve(n, 0);
  auto kv = be.make_kv(vkt::small_kv());
  vkt::batch_data b = vkt::batch_data::rows(n);
  b.tokens = ids;
  std::vector<float> y(std::size_t(n) * K);
  be.begin(graph::step_inputs{b.view()});
  be.embed(w, out.view(n));
  be.read(out.view(n), y);
  be.finish();
  return y;
}

TEST_CASE("vulkan dequant: get_rows is bit-exact with the C++ dequant for every format") {
  if (!vkt::available()) return;
  for_each_format(quant::all{}, [&](auto fmt) {
    using Fmt = decltype(fmt);
    using B = typename Fmt::block;
    constexpr gguf::type_id type = Fmt::gguf_type;
    CAPTURE(Fmt::name);
    if (!gpu::gpu_supports(type)) {
      // Activation-only formats have no weight kernels on any backend.
      CHECK((type == gguf::type_id::q8_1 || type == gguf::type_id::q8_k));
      return;
    }
    constexpr std::uint32_t K = 1024;  // the fixtures' row length: 4..64 blocks, all parts
    const std::size_t row_bytes = K / Fmt::block_elems * sizeof(B);
    std::mt19937 rng(1234u + unsigned(type));

    // Table: 4 quantized rows, 4 raw rows, then the fixture rows where this format has them.
    std::vector<std::byte> table;
    std::vector<std::string> origin;  // per row, for messages
    for (int r = 0; r < 4; ++r) {
      const auto x = varied_floats(K, rng);
      std::vector<B> blocks(K / Fmt::block_elems);
      quant::quantize_row<Fmt>(x.data(), blocks.data(), K);
      const auto* p = reinterpret_cast<const std::byte*>(blocks.data());
      table.insert(table.end(), p, p + row_bytes);
      origin.push_back("quantized row " + std::to_string(r));
    }
    for (int r = 0; r < 4; ++r) {
      const auto blocks = raw_blocks<Fmt>(K / Fmt::block_elems, rng);
      const auto* p = reinterpret_cast<const std::byte*>(blocks.data());
      table.insert(table.end(), p, p + row_bytes);
      origin.push_back("raw-bytes row " + std::to_string(r));
    }
    std::vector<float> golden;  // ggml's dequant of the fixture rows
    const auto dir = test::fixture_dir() / "quant";
    for (const char* kind : {"", ".from_model"}) {
      const auto q = dir / (upper(Fmt::name) + kind + ".q.bin");
      const auto d = dir / (upper(Fmt::name) + kind + ".dequant.f32");
      if (!std::filesystem::exists(q) || !std::filesystem::exists(d)) continue;
      const auto qb = test::read_bytes(q);
      const auto df = test::read_f32(d);
      REQUIRE(qb.size() == 8 * row_bytes);
      REQUIRE(df.size() == 8 * K);
      table.insert(table.end(), qb.begin(), qb.end());
      golden.insert(golden.end(), df.begin(), df.end());
      for (int r = 0; r < 8; ++r) origin.push_back(upper(Fmt::name) + kind + " fixture row " + std::to_string(r));
    }
    const std::uint32_t rows = std::uint32_t(origin.size());
    const std::uint32_t n_random = 8;

    // Every row once in a shuffled order, plus two repeats.
    std::vector<std::int32_t> ids(rows);
    for (std::uint32_t i = 0; i < rows; ++i) ids[i] = std::int32_t(i);
    std::shuffle(ids.begin(), ids.end(), rng);
    ids.push_back(ids[0]);
    ids.push_back(3);
    const auto got = gpu_get_rows(type, table, K, rows, ids);

    std::size_t mismatches = 0;
    std::vector<float> want(K);
    for (std::size_t t = 0; t < ids.size(); ++t) {
      const std::uint32_t r = std::uint32_t(ids[t]);
      quant::dequant_row<Fmt>(reinterpret_cast<const B*>(table.data() + r * row_bytes), want.data(), K);
      if (r >= n_random)  // the C++ dequant is itself bit-exact with ggml's golden floats
        REQUIRE(std::memcmp(want.data(), golden.data() + (r - n_random) * K, K * 4) == 0);
      const float* g = got.data() + t * K;
      for (std::uint32_t i = 0; i < K; ++i) {
        if (std::memcmp(&g[i], &want[i], 4) == 0) continue;
        if (++mismatches <= 8)
          MESSAGE(Fmt::name << " " << origin[r] << " element " << i << ": GPU " << g[i] << ", C++ " << want[i]);
      }
    }
    CHECK(mismatches == 0);
  });
}

// The GPU's row layout (quant_layout.hpp): where copy_gpu_rows puts each field of a group, and
// get_rows over grouped Q6_K rows (2,048 elements: 8 blocks; the case above has 4-block rows,
// grouped for Q8_0 only) bit-exact with the C++ dequant.
TEST_CASE("vulkan dequant: Q6_K and Q8_0 rows in the GPU's groups of 8 blocks") {
  using B = quant::q8_0::block;
  std::vector<B> blocks(16);  // two rows of 256 elements
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    blocks[i].d = to_fp16(float(i + 1));
    for (std::size_t j = 0; j < 32; ++j) blocks[i].qs[j] = std::int8_t(i * 7 + j);
  }
  const auto src = std::as_bytes(std::span(blocks));
  std::vector<std::byte> dst(src.size());
  gpu::copy_gpu_rows(gguf::type_id::q8_0, 256, src, dst.data());
  for (std::size_t i = 0; i < blocks.size(); ++i) {
    const std::size_t g = i / 8 * 8 * sizeof(B), b = i % 8;
    CHECK(std::memcmp(dst.data() + g + 2 * b, &blocks[i].d, 2) == 0);            // the 8 scales first
    CHECK(std::memcmp(dst.data() + g + 16 + 32 * b, blocks[i].qs.data(), 32) == 0);  // then the 8 code arrays
  }
  CHECK(gpu::grouped_rows(gguf::type_id::q8_0, 256));
  CHECK_FALSE(gpu::grouped_rows(gguf::type_id::q8_0, 224));
  CHECK_FALSE(gpu::grouped_rows(gguf::type_id::q6_k, 1024));
  CHECK_FALSE(gpu::grouped_rows(gguf::type_id::q4_k, 2048));
  std::vector<std::byte> plain(src.size());
  gpu::copy_gpu_rows(gguf::type_id::q8_0, 224, src.first(7 * sizeof(B)), plain.data());  // 7-block rows: a plain copy
  CHECK(std::memcmp(plain.data(), src.data(), 7 * sizeof(B)) == 0);
  CHECK_THROWS_WITH_AS(gpu::copy_gpu_rows(gguf::type_id::q8_0, 256, src.first(7 * sizeof(B)), dst.data()),
                       doctest::Contains("are not whole rows of 256 elements"), strata::error);

  if (!vkt::available()) return;
  constexpr std::uint32_t K = 2048, rows = 6;
  std::mt19937 rng(2048);
  std::vector<std::byte> table;
  for (std::uint32_t r = 0; r < rows; ++r) {
    std::vector<quant::q6_k::block> row(K / 256);
    if (r % 2 == 0) {
      const auto x = varied_floats(K, rng);
      quant::quantize_row<quant::q6_k>(x.data(), row.data(), K);
    } else {
      row = raw_blocks<quant::q6_k>(K / 256, rng);
    }
    const auto* p = reinterpret_cast<const std::byte*>(row.data());
    table.insert(table.end(), p, p + row.size() * sizeof(quant::q6_k::block));
  }
  REQUIRE(gpu::grouped_rows(gguf::type_id::q6_k, K));
  const std::vector<std::int32_t> ids = {3, 0, 5, 1, 4, 2, 3};
  const auto got = gpu_get_rows(gguf::type_id::q6_k, table, K, rows, ids);
  std::vector<float> want(K);
  for (std::size_t t = 0; t < ids.size(); ++t) {
    CAPTURE(t);
    const auto* row = reinterpret_cast<const quant::q6_k::block*>(table.data() + std::size_t(ids[t]) * K / 256 * sizeof(quant::q6_k::block));
    quant::dequant_row<quant::q6_k>(row, want.data(), K);
    CHECK(std::memcmp(got.data() + t * K, want.data(), K * 4) == 0);
  }
}

#else
TEST_CASE("vulkan dequant: skipped") { CHECK(vkt::available() == false); }
#endif

}  // namespace
