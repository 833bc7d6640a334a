// Crafted models: a fixture of each architecture with one hyper-parameter or tensor shape made
// hostile must be refused at load with an error naming the key (or tensor) and the limit, never
// overflow a buffer (the ASan CI step runs these too). tests/fuzz/model_fuzz.cpp explores the same
// space at random.
#include <doctest/doctest.h>

#include <filesystem>
#include <limits>
#include <unistd.h>

#include "strata/runtime/engine.hpp"
#include "support/gguf_edit.hpp"

using namespace strata;

namespace {

const char* crafted_fixture(const char* name) {
  static std::string path;
  path = std::string(STRATA_TEST_FIXTURES) + "/models/" + name;
  return path.c_str();
}

// Writes the edited model and returns the error message of loading it ("" when it loaded and
// ran a 4-token forward pass).
std::string load_error(const test::gguf_edit& e) {
  const auto path = std::filesystem::temp_directory_path() / ("strata-crafted-" + std::to_string(::getpid()) + ".gguf");
  e.write(path);
  std::string msg;
  try {
    rt::engine_options eo;
    eo.threads = 1;
    eo.n_ctx = 64;
    eo.n_batch = 4;
    auto m = rt::model::load(path, eo);
    rt::session s(*m);
    const std::vector<std::int32_t> toks{1, 2, 3, 4};
    s.prefill(toks);
  } catch (const error& ex) {
    msg = ex.what();
  }
  std::filesystem::remove(path);
  return msg;
}

}  // namespace

TEST_CASE("crafted hyper-parameters are refused at load, naming the key and the limit") {
  struct model_case {
    const char* file;
    const char* arch;
    bool moe;
  };
  for (const model_case mc : {model_case{"llama-Q4_K_M.gguf", "llama", false}, {"qwen3-Q4_K_M.gguf", "qwen3", false},
                              {"qwen3moe-Q4_K_M.gguf", "qwen3moe", true}, {"llama4-Q4_K_M.gguf", "llama4", true}}) {
    const std::string file = mc.file;
    CAPTURE(file);
    const std::string a = mc.arch;
    {
      test::gguf_edit e(crafted_fixture(mc.file));
      CHECK(load_error(e).empty());  // the unedited copy loads and runs
    }
    const auto refused = [&](const std::string& key, auto value, const std::string& want) {
      test::gguf_edit e(crafted_fixture(mc.file));
      e.set(a + "." + key, value);
      const std::string msg = load_error(e);
      CAPTURE(key);
      CHECK_MESSAGE((!msg.empty() && msg.find(want) != std::string::npos), msg);
    };
    // head_dim beyond the CPU's head scratch and RoPE angle buffers (both sized by the limit).
    refused("attention.key_length", std::uint32_t(4096), "key_length");
    refused("attention.key_length", std::uint32_t(3), "key_length");
    refused("rope.dimension_count", std::uint32_t(1 << 20), "rope.dimension_count");
    refused("context_length", std::uint32_t(0), "context_length' = 0 is outside 1..");
    refused("attention.head_count", std::uint32_t(1u << 30), "head_count");
    refused("attention.head_count_kv", std::uint32_t(7), "head_count");
    refused("block_count", std::uint32_t(100000), "block_count' = 100000 is outside 1..4096");
    refused("attention.layer_norm_rms_epsilon", -1.0f, "layer_norm_rms_epsilon");
    refused("rope.freq_base", std::numeric_limits<float>::quiet_NaN(), "rope.freq_base");
    // (Checked against token_embd.weight's shape before the limits: the tensor is named.)
    refused("embedding_length", std::uint32_t(1u << 31), "token_embd.weight");
    if (mc.moe) {
      refused("expert_count", std::uint32_t(100000), "expert_count' = 100000 is outside 1..1024");
      refused("expert_used_count", std::uint32_t(10000), "expert_used_count");
      refused("expert_count", std::uint32_t(0), "expert");
    }
    // A tensor whose shape disagrees with the hyper-parameters.
    {
      test::gguf_edit e(crafted_fixture(mc.file));
      auto* t = e.find("blk.0.attn_output.weight");
      REQUIRE(t);
      std::swap(t->ne[0], t->ne[1]);
      if (t->ne[0] != t->ne[1]) CHECK(load_error(e).find("blk.0.attn_output.weight") != std::string::npos);
    }
    {
      test::gguf_edit e(crafted_fixture(mc.file));
      e.find("token_embd.weight")->ne[0] += 256;
      CHECK(load_error(e).find("token_embd.weight") != std::string::npos);
    }
  }
}
