// Model-level fuzz target: a fixture model of one architecture, its metadata values and tensor
// table mutated (huge, zero, odd and off-by-one dimensions, absurd expert counts, wrong types,
// swapped or missing tensors), then what `strata-run --info` does, a load and a 4-token forward
// pass. Every input must end in success or a strata::error; a crash, a sanitizer report or any
// other exception is a finding. The input bytes are a mutation program (program::from_bytes), so
// the same function serves as a libFuzzer entry (tests/fuzz/CMakeLists.txt, clang) and, in every
// other build, under a driver that draws random programs for a bounded time (run in CI under
// ASan+UBSan): model_fuzz [--seconds S] [--runs N] [--seed X] [--replay FILE] FIXTURE_DIR
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <random>
#include <string>
#include <unistd.h>
#include <vector>

#include "strata/runtime/engine.hpp"
#include "strata/runtime/model_info.hpp"
#include "strata/tokenizer/tokenizer.hpp"
#include "support/gguf_edit.hpp"

using namespace strata;

namespace {

// One model per architecture; the bytes choose which.
const char* const fixtures[] = {"llama-Q4_K_M.gguf", "qwen3-Q4_K_M.gguf", "qwen3moe-Q4_K_M.gguf", "llama4-Q4_K_M.gguf"};

// Reads the program's bytes; past the end everything reads as 0.
struct byte_reader {
  std::span<const std::uint8_t> b;
  std::size_t at = 0;
  bool done() const { return at >= b.size(); }
  std::uint8_t u8() { return at < b.size() ? b[at++] : 0; }
  std::uint32_t u32() { return u8() | std::uint32_t(u8()) << 8 | std::uint32_t(u8()) << 16 | std::uint32_t(u8()) << 24; }
};

// Values that break size arithmetic and fixed buffers.
std::uint64_t interesting(std::uint64_t orig, byte_reader& in) {
  static constexpr std::uint64_t table[] = {0,     1,     2,      3,      7,          255,        256,        257,
                                            511,   512,   513,    1023,   1024,       1025,       4095,       4096,
                                            65535, 65536, 1u << 20, 1u << 24, 0x7FFFFFFF, 0x80000000, 0xFFFFFFFF, 1ull << 32};
  const std::uint8_t k = in.u8();
  switch (k % 8) {
    case 0: return orig + 1;
    case 1: return orig ? orig - 1 : 0;
    case 2: return orig * 2;
    case 3: return orig / 2;
    case 4: return orig | 1;  // odd
    case 5: return in.u32();
    default: return table[in.u8() % std::size(table)];
  }
}

float interesting_float(float orig, byte_reader& in) {
  static constexpr float table[] = {0.0f, -0.0f, -1.0f, 1e-30f, 1e30f, 1.0f, 0.5f, 65504.0f};
  switch (in.u8() % 5) {
    case 0: return std::numeric_limits<float>::quiet_NaN();
    case 1: return std::numeric_limits<float>::infinity();
    case 2: return -orig;
    case 3: return orig * 1e6f;
    default: return table[in.u8() % std::size(table)];
  }
}

// Keys an architecture reads, so absent ones (e.g. expert_count on a dense model) get set too.
const char* const arch_keys[] = {"context_length", "embedding_length", "block_count", "feed_forward_length",
                                 "attention.head_count", "attention.head_count_kv", "attention.key_length",
                                 "attention.value_length", "rope.dimension_count", "expert_count",
                                 "expert_used_count", "expert_feed_forward_length", "interleave_moe_layer_step",
                                 "attention.sliding_window", "attention.sliding_window_pattern"};
const char* const float_keys[] = {"attention.layer_norm_rms_epsilon", "rope.freq_base", "rope.freq_base_swa",
                                  "rope.scaling.factor"};

const gguf::type_id types[] = {gguf::type_id::f32, gguf::type_id::f16, gguf::type_id::q8_0, gguf::type_id::q4_0,
                               gguf::type_id::q4_k, gguf::type_id::q6_k, gguf::type_id::bf16};

void mutate(test::gguf_edit& e, byte_reader& in) {
  const std::string arch = e.arch();
  const std::uint8_t op = in.u8();
  switch (op % 7) {
    case 0:
    case 1: {  // an integer hyper-parameter
      const std::string key = arch + "." + arch_keys[in.u8() % std::size(arch_keys)];
      const auto* v = e.original().find(key);
      const std::uint64_t orig = v && v->type() == gguf::value_type::u32 ? v->as<std::uint32_t>() : 8;
      const std::uint64_t x = interesting(orig, in);
      if (in.u8() % 8 == 0) e.set(key, x);  // as u64: 64-bit values must be range-checked too
      else e.set(key, std::uint32_t(x));
      break;
    }
    case 2: {  // a float hyper-parameter
      const std::string key = arch + "." + float_keys[in.u8() % std::size(float_keys)];
      e.set(key, interesting_float(1e-5f, in));
      break;
    }
    case 3: {  // a metadata key removed (tokenizer keys included)
      if (e.meta.empty()) break;
      e.meta.erase(e.meta.begin() + in.u8() % e.meta.size());
      break;
    }
    case 4: {  // one dimension of one tensor
      auto& t = e.tensors[in.u32() % e.tensors.size()];
      const std::size_t d = in.u8() % 4;
      if (d >= t.ne.size()) t.ne.resize(d + 1, 1);
      t.ne[d] = interesting(t.ne[d], in);
      break;
    }
    case 5: {  // a tensor's type, or two tensors' shapes swapped
      auto& t = e.tensors[in.u32() % e.tensors.size()];
      if (in.u8() % 2) t.type = types[in.u8() % std::size(types)];
      else std::swap(t.ne, e.tensors[in.u32() % e.tensors.size()].ne);
      break;
    }
    default: {  // a tensor dropped
      e.tensors.erase(e.tensors.begin() + in.u32() % e.tensors.size());
      break;
    }
  }
}

// Runs one program; returns the stage that refused it: "unwritable" (the writer refused the
// table or it is too big to write), "info", "load", "forward", or "ok" when all of it ran.
std::string run_case(std::span<const std::uint8_t> bytes, const std::string& fixture_dir, const std::string& tmp) {
  byte_reader in{bytes};
  test::gguf_edit e(fixture_dir + "/" + fixtures[in.u8() % std::size(fixtures)]);
  const int n_mut = 1 + in.u8() % 4;
  for (int i = 0; i < n_mut && !e.tensors.empty(); ++i) mutate(e, in);
  // Tensor data is copied: keep crafted files small (the reader fuzzer covers claims past EOF).
  std::uint64_t total = 0;
  for (const auto& t : e.tensors) {
    std::uint64_t n = 1;
    for (const auto x : t.ne) n = x && n > (1ull << 40) / x ? (1ull << 40) : n * x;
    total += n;
  }
  if (total > (64ull << 20)) return "unwritable";
  try {
    e.write(tmp);
  } catch (const error&) {
    return "unwritable";  // the writer refuses the table (e.g. rows that are not whole blocks)
  }
  std::string stage = "info";
  try {
    const gguf::file f(tmp);
    const auto s = rt::summarize(f.gguf());
    volatile std::size_t sink = rt::render_text(s).size() + rt::render_json(s, f.gguf()).size();
    (void)sink;
    stage = "load";
    rt::engine_options eo;
    eo.threads = 1;
    eo.n_ctx = 64;
    eo.n_batch = 4;
    auto m = rt::model::load(tmp, eo);
    const auto tok = tokenizer::tokenizer::from_gguf(m->gguf());
    stage = "forward";
    std::vector<std::int32_t> ids = tok.encode("Hi there, you", true, true);
    ids.resize(4, 0);
    rt::session ss(*m);
    const auto logits = ss.prefill(ids);
    volatile float x = logits[0];
    (void)x;
    stage = "ok";
  } catch (const error&) {
  }
  return stage;
}

std::string fixture_dir_default() { return STRATA_TEST_FIXTURES "/models"; }

std::string tmp_path() {
  return (std::filesystem::temp_directory_path() / ("strata-model-fuzz-" + std::to_string(::getpid()) + ".gguf")).string();
}

}  // namespace

#ifdef STRATA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string tmp = tmp_path();
  run_case({data, size}, fixture_dir_default(), tmp);
  return 0;
}
#else
int main(int argc, char** argv) {
  double seconds = 0;
  std::uint64_t runs = 0, seed = std::random_device{}();
  std::string replay, dir = fixture_dir_default();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const auto next = [&]() -> std::string {
      if (i + 1 >= argc) throw std::runtime_error(a + " needs a value");
      return argv[++i];
    };
    if (a == "--seconds") seconds = std::stod(next());
    else if (a == "--runs") runs = std::stoull(next());
    else if (a == "--seed") seed = std::stoull(next());
    else if (a == "--replay") replay = next();
    else dir = a;
  }
  if (seconds <= 0 && runs == 0) runs = 50;
  const std::string tmp = tmp_path(), last = tmp + ".case";
  if (!replay.empty()) {
    std::ifstream f(replay, std::ios::binary);
    const std::vector<std::uint8_t> prog((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    std::cout << "replay " << replay << ": " << run_case(prog, dir, tmp) << "\n";
    std::filesystem::remove(tmp);
    return 0;
  }
  std::mt19937_64 rng(seed);
  std::map<std::string, std::uint64_t> stages;
  const auto t0 = std::chrono::steady_clock::now();
  std::uint64_t n = 0;
  std::cout << "model_fuzz: seed " << seed << "; each case is saved to " << last
            << " before it runs (a crash leaves it there: --replay it)" << std::endl;
  for (; (runs == 0 || n < runs) &&
         (seconds <= 0 || std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < seconds);
       ++n) {
    std::vector<std::uint8_t> prog(4 + rng() % 60);
    for (auto& b : prog) b = std::uint8_t(rng());
    {
      std::ofstream f(last, std::ios::binary | std::ios::trunc);
      f.write(reinterpret_cast<const char*>(prog.data()), std::streamsize(prog.size()));
    }
    ++stages[run_case(prog, dir, tmp)];
  }
  std::filesystem::remove(tmp);
  std::filesystem::remove(last);
  std::cout << "model_fuzz: " << n << " cases in "
            << std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() << " s; ended at:";
  for (const auto& [k, v] : stages) std::cout << " " << k << " " << v;
  std::cout << "\n";
  return 0;
}
#endif
