// The parallel copy into pinned buffers (runtime/vulkan/pinned_copy.hpp): row ranges on every
// core give the same bytes as one copy_gpu_rows call per tensor, for grouped rows (Q8_0, 8-block
// rows), plain rows (Q4_K) and a tensor's first rows only; partial rows are refused.
#include <doctest/doctest.h>

#include <cstring>
#include <random>
#include <vector>

#include "../../runtime/vulkan/pinned_copy.hpp"
#include "../../runtime/vulkan/quant_layout.hpp"
#include "strata/core/error.hpp"

namespace {

strata::gguf::tensor_info test_tensor(strata::gguf::type_id t, std::uint64_t ne0, std::uint64_t rows,
                                 const std::vector<std::byte>& data) {
  strata::gguf::tensor_info ti;
  ti.name = "test tensor";
  ti.type = t;
  ti.n_dims = 2;
  ti.ne = {ne0, rows, 1, 1};
  ti.nbytes = data.size();
  ti.data = data;
  return ti;
}

std::vector<std::byte> random_bytes(std::size_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::byte> v(n);
  for (auto& b : v) b = std::byte(rng() & 0xFFu);
  return v;
}

}  // namespace

TEST_CASE("pinned copy: row ranges on every core give one copy_gpu_rows' bytes") {
  using strata::gguf::type_id;
  namespace gpu = strata::gpu;
  // Q8_0, 256-element rows (8 blocks: grouped), 20,000 rows: 5.4 MB, more than one 4 MiB range.
  const std::uint64_t q8_rows = 20000, q8_rb = 8 * 34;
  const auto q8 = random_bytes(q8_rows * q8_rb, 1);
  const auto t8 = test_tensor(type_id::q8_0, 256, q8_rows, q8);
  REQUIRE(gpu::grouped_rows(type_id::q8_0, 256));
  // Q4_K, 4096-element rows (plain), all 3,000 rows of which the first 2,999 are copied.
  const std::uint64_t q4_rows = 3000, q4_rb = 16 * 144;
  const auto q4 = random_bytes(q4_rows * q4_rb, 2);
  const auto t4 = test_tensor(type_id::q4_k, 4096, q4_rows, q4);

  std::vector<std::byte> want8(q8.size()), want4((q4_rows - 1) * q4_rb);
  gpu::copy_gpu_rows(type_id::q8_0, 256, q8, want8.data());
  gpu::copy_gpu_rows(type_id::q4_k, 4096, std::span(q4).first(want4.size()), want4.data());
  std::vector<std::byte> got8(q8.size()), got4(want4.size() + 16, std::byte{0x5A});
  const gpu::pinned_copy copies[] = {{&t8, q8.size(), got8.data()}, {&t4, want4.size(), got4.data()}};
  gpu::copy_pinned(copies);
  CHECK(std::memcmp(got8.data(), want8.data(), want8.size()) == 0);
  CHECK(std::memcmp(got4.data(), want4.data(), want4.size()) == 0);
  CHECK(got4[want4.size()] == std::byte{0x5A});  // nothing past the bytes asked for

  const gpu::pinned_copy partial[] = {{&t4, q4_rb + 1, got4.data()}};
  CHECK_THROWS_WITH_AS(gpu::copy_pinned(partial), doctest::Contains("are not whole rows"), strata::error);
}
