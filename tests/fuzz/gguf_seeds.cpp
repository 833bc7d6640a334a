// Writes small seed GGUFs for the reader fuzzer (each < 64 KiB, the fuzzer's -max_len): a few
// synthetic files covering every value type, nested arrays, alignments, versions and tensor
// types, plus one "model-shaped" seed per GGUF given on the command line (its full metadata and
// tensor table, with every tensor cut down to one row so the data fits).
// usage: gguf_seeds <out dir> [model.gguf ...]
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "strata/gguf/reader.hpp"
#include "strata/gguf/writer.hpp"

namespace {

using namespace strata::gguf;
namespace fs = std::filesystem;

constexpr std::size_t max_seed = 64 * 1024;

void save(const fs::path& dir, const std::string& name, const std::vector<std::byte>& b) {
  if (b.size() > max_seed) {
    std::fprintf(stderr, "seed %s is %zu bytes, over %zu: skipped\n", name.c_str(), b.size(), max_seed);
    return;
  }
  reader check(b, name);  // every seed must parse: the fuzzer mutates from valid files
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}

std::vector<std::byte> noise(std::size_t n, std::mt19937& rng) {
  std::vector<std::byte> b(n);
  for (auto& x : b) x = std::byte(rng());
  return b;
}

template <class T>
owned_value arr(std::vector<T> v) {
  return owned_value::array(std::span<const T>(v));
}

// Every value type and a spread of tensor types, at the given alignment.
// `keep` owns the tensor bytes until the writer has written them.
std::vector<std::byte> all_types(std::uint32_t alignment, std::mt19937& rng,
                                 std::vector<std::vector<std::byte>>& keep) {
  writer w(alignment);
  w.set("general.architecture", "llama");
  w.set("u8", std::uint8_t(1));
  w.set("i8", std::int8_t(-1));
  w.set("u16", std::uint16_t(2));
  w.set("i16", std::int16_t(-2));
  w.set("u32", std::uint32_t(3));
  w.set("i32", std::int32_t(-3));
  w.set("f32", 0.5f);
  w.set("bool", true);
  w.set("u64", std::uint64_t(4));
  w.set("i64", std::int64_t(-4));
  w.set("f64", 0.25);
  w.set("str", "h\xc3\xa9llo");
  w.set("str.empty", "");
  w.set("arr.i32", arr<std::int32_t>({1, -2, 3}));
  w.set("arr.u8", arr<std::uint8_t>({0, 1}));
  w.set("arr.f64", arr<double>({1.0}));
  const bool bools[] = {true, false};  // not std::vector<bool>: it has no contiguous storage
  w.set("arr.bool", owned_value::array(std::span<const bool>(bools)));
  w.set_strings("arr.str", {"a", "", "bc"});
  w.set("arr.nested", owned_value::arrays({arr<std::int16_t>({5}), owned_value::strings({"x"}),
                                           owned_value::arrays({arr<std::uint64_t>({})})}));
  const std::vector<std::pair<type_id, std::vector<std::uint64_t>>> shapes = {
      {type_id::f32, {3}},       {type_id::f16, {2, 2}},      {type_id::q4_0, {32, 2}},  {type_id::q8_0, {32}},
      {type_id::q4_k, {256}},    {type_id::q6_k, {256}},      {type_id::bf16, {4, 1, 2}}, {type_id::i8, {1, 1, 1, 5}},
      {type_id::f32, {0}},       {type_id::f32, {}},          {type_id::mxfp4, {32}},    {type_id::iq2_xxs, {256}},
  };
  for (std::size_t i = 0; i < shapes.size(); ++i) {
    std::uint64_t n = 1;
    for (auto d : shapes[i].second) n *= d;
    const auto t = shapes[i].first;
    keep.push_back(noise(std::size_t(n / block_elems(t) * block_bytes(t)), rng));
    w.add_tensor("t" + std::to_string(i), t, shapes[i].second, keep.back());
  }
  return w.to_bytes();
}

// A model's metadata and tensor table, each tensor reduced to its first row.
std::vector<std::byte> model_shaped(const fs::path& path) {
  const file f(path);
  writer w;
  for (const auto& [k, v] : f->metadata()) w.set(std::string(k), owned_value::from(v));
  for (const auto& t : f->tensors()) {
    std::vector<std::uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    for (std::size_t d = 1; d < ne.size(); ++d) ne[d] = 1;
    w.add_tensor(std::string(t.name), t.type, ne, t.data.first(std::size_t(t.row_bytes())));
  }
  return w.to_bytes();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s <out dir> [model.gguf ...]\n", argv[0]);
    return 2;
  }
  try {
    const fs::path dir = argv[1];
    fs::create_directories(dir);
    std::mt19937 rng(7);
    std::vector<std::vector<std::byte>> keep;
    save(dir, "seed-all-types-a32.gguf", all_types(32, rng, keep));
    save(dir, "seed-all-types-a64.gguf", all_types(64, rng, keep));
    save(dir, "seed-all-types-a1.gguf", all_types(1, rng, keep));
    auto v2 = all_types(32, rng, keep);
    v2[4] = std::byte{2};  // GGUF v2: same layout
    save(dir, "seed-all-types-v2.gguf", v2);
    {
      writer w;
      w.set("general.architecture", "qwen3");
      w.set_strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|endoftext|>"});
      w.set("tokenizer.ggml.token_type", arr<std::int32_t>({1, 1, 1, 3}));
      w.set_strings("tokenizer.ggml.merges", {"a b"});
      save(dir, "seed-vocab-only.gguf", w.to_bytes());
    }
    {
      writer w;
      save(dir, "seed-empty.gguf", w.to_bytes());
    }
    for (int i = 2; i < argc; ++i)
      save(dir, "seed-model-" + fs::path(argv[i]).stem().string() + ".gguf", model_shaped(argv[i]));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gguf_seeds: %s\n", e.what());
    return 1;
  }
  return 0;
}
