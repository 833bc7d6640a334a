// Packed block layout: sizes, a pinned byte example (the layout shaders read), and pack/unpack
// round trips for every segment size and bit width.
#include <doctest/doctest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "strata/turboquant/block.hpp"

namespace tq = strata::turboquant;

TEST_CASE("block sizes: fp16 scale + b bits per coordinate") {
  CHECK(tq::block_bytes(128, 3) == 50);
  CHECK(tq::block_bytes(128, 4) == 66);
  CHECK(tq::block_bytes(128, 2) == 34);
  CHECK(tq::block_bytes(128, 1) == 18);
  CHECK(tq::block_bytes(64, 3) == 26);
  CHECK(tq::high_plane_offset(128, 3) == 34);
  CHECK(tq::high_plane_bytes(128, 3) == 16);
  CHECK(tq::high_plane_bytes(128, 4) == 0);
}

TEST_CASE("block layout: pinned bytes for 3 and 4 bits") {
  std::uint8_t idx[16];
  for (int i = 0; i < 16; ++i) idx[i] = std::uint8_t(i % 8);
  std::vector<std::uint8_t> blk(tq::block_bytes(16, 3), 0xAA);
  tq::pack_indices(idx, 16, 3, blk.data());
  // low plane: 2 bits per element, element i at byte i/4, bit 2(i%4): 0,1,2,3 -> 0b11100100
  CHECK(blk[2] == 0xE4);  // elements 0..3: low bits 0,1,2,3
  CHECK(blk[3] == 0xE4);  // elements 4..7: values 4..7 have low bits 0,1,2,3
  // high plane starts at 2 + 16/4 = 6: bit 2 of elements 0..7 = 0,0,0,0,1,1,1,1
  CHECK(blk[6] == 0xF0);
  CHECK(blk[0] == 0xAA);  // the scale is not touched
  std::vector<std::uint8_t> b4(tq::block_bytes(16, 4), 0);
  for (int i = 0; i < 16; ++i) idx[i] = std::uint8_t(i);
  tq::pack_indices(idx, 16, 4, b4.data());
  CHECK(b4[2] == 0x10);  // element 0 low nibble, element 1 high nibble
  CHECK(b4[9] == 0xFE);
}

TEST_CASE("pack/unpack round trip for every segment size and bit width") {
  std::mt19937 rng(1);
  for (std::size_t n : {16u, 32u, 64u, 128u, 256u})
    for (std::uint32_t b = 1; b <= 4; ++b) {
      CAPTURE(n);
      CAPTURE(b);
      std::vector<std::uint8_t> idx(n), back(n), blk(tq::block_bytes(n, b), 0);
      for (auto& v : idx) v = std::uint8_t(rng() % (1u << b));
      tq::pack_indices(idx.data(), n, b, blk.data());
      tq::unpack_indices(blk.data(), n, b, back.data());
      CHECK(idx == back);
    }
}

#include "strata/turboquant/glsl_layout.hpp"

TEST_CASE("GLSL layout is generated from the C++ constants") {
  const tq::format f3(128, 3);
  const std::string g = tq::glsl_layout(f3, "K");
  CHECK(g.find("#define TQK_ROW_BYTES 50u\n") != std::string::npos);
  CHECK(g.find("#define TQK_LOW_BITS 2u\n") != std::string::npos);
  CHECK(g.find("#define TQK_HIGH_BITS 1u\n") != std::string::npos);
  CHECK(g.find("const uint TQK_SEG_HIGH_OFFSET[1] = uint[](34u);") != std::string::npos);
  CHECK(g.find("const float TQK_CENTROIDS[16] = float[](-2.131470919e+00") != std::string::npos);
  CHECK(g.find("const uint TQK_SIGN_BITS[12] = uint[](2028495683u,") != std::string::npos);
  const std::string g96 = tq::glsl_layout(tq::format(96, 4), "V");
  CHECK(g96.find("const uint TQV_SEG_N[2] = uint[](64u, 32u);") != std::string::npos);
  CHECK(g96.find("const uint TQV_SEG_BYTE_OFFSET[2] = uint[](0u, 34u);") != std::string::npos);
  MESSAGE(g);
}
