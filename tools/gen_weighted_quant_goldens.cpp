// Writes the golden bytes of ggml's importance-weighted quantizers (ggml_quantize_chunk with an
// imatrix) for tests/quant/weighted_test.cpp: tests/fixtures/quant/imatrix.f32 (1024 seeded
// positive weights, one per column) and <TYPE>.imatrix.q.bin for each format that takes one,
// quantizing the 8 x 1024 rows of tests/fixtures/quant/input.f32. Built against a llama.cpp
// build, never by Strata's build:
//   g++ -std=c++17 -O2 tools/gen_weighted_quant_goldens.cpp -I$LLAMA/ggml/include \
//       -L$LLAMA_BUILD/bin -lggml-base -Wl,-rpath,$LLAMA_BUILD/bin -o /tmp/gen && /tmp/gen tests/fixtures/quant
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "ggml.h"

int main(int argc, char** argv) {
  if (argc != 2) return std::fprintf(stderr, "usage: %s tests/fixtures/quant\n", argv[0]), 2;
  const std::string dir = argv[1];
  constexpr int n_per_row = 1024, nrows = 8;
  std::vector<float> x(n_per_row * nrows), imatrix(n_per_row);
  std::FILE* f = std::fopen((dir + "/input.f32").c_str(), "rb");
  if (!f || std::fread(x.data(), 4, x.size(), f) != x.size()) return std::fprintf(stderr, "cannot read input.f32\n"), 1;
  std::fclose(f);
  // Mean squared activations look like this: positive, spread over decades, some columns ~0.
  std::uint64_t s = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < n_per_row; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = double(s >> 11) * 0x1.0p-53;
    imatrix[i] = i % 97 == 0 ? 0.0f : float(0.001 * (1.0 + 999.0 * u * u * u));
  }
  f = std::fopen((dir + "/imatrix.f32").c_str(), "wb");
  std::fwrite(imatrix.data(), 4, imatrix.size(), f);
  std::fclose(f);
  const ggml_type types[] = {GGML_TYPE_Q4_0, GGML_TYPE_Q4_1, GGML_TYPE_Q5_0, GGML_TYPE_Q5_1, GGML_TYPE_Q2_K, GGML_TYPE_Q3_K,
                             GGML_TYPE_Q4_K, GGML_TYPE_Q5_K, GGML_TYPE_Q6_K, GGML_TYPE_IQ4_NL, GGML_TYPE_IQ4_XS};
  for (const ggml_type t : types) {
    std::vector<std::uint8_t> q(ggml_row_size(t, n_per_row) * nrows);
    ggml_quantize_chunk(t, x.data(), q.data(), 0, nrows, n_per_row, imatrix.data());
    std::string name = ggml_type_name(t);
    for (auto& c : name) c = char(c >= 'a' && c <= 'z' ? c - 32 : c);
    f = std::fopen((dir + "/" + name + ".imatrix.q.bin").c_str(), "wb");
    std::fwrite(q.data(), 1, q.size(), f);
    std::fclose(f);
    std::printf("%s: %zu bytes\n", name.c_str(), q.size());
  }
}
