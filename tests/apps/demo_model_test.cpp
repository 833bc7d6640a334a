// The bundled demo model (models/strata-demo.gguf, Q8_0, trained by tools/demo_model/): it is
// found the way strata-run/strata-serve find it, its greedy answer to a fixed chat prompt is the
// committed golden text, and its logits on that prompt match the ones llama.cpp computed for the
// same file and for the Q4_K_M file requantized from it here (tests/fixtures/demo/README.md: how
// the references were made and why each tolerance is what it is).
#include <doctest/doctest.h>

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "strata/chat/template.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/runtime/default_model.hpp"
#include "strata/runtime/engine.hpp"
#include "strata/tokenizer/tokenizer.hpp"
#include "requantize.hpp"
#include "support/fidelity.hpp"

namespace {

namespace fs = std::filesystem;

fs::path models_dir() { return strata::test::fixture_dir() / ".." / ".." / "models"; }
fs::path demo_dir() { return strata::test::fixture_dir() / "demo"; }

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  REQUIRE_MESSAGE(f.good(), "cannot open " << p.string());
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

std::vector<std::int32_t> read_ids(const fs::path& p) {
  std::vector<std::int32_t> ids;
  std::istringstream s(read_text(p));
  std::string item;
  while (std::getline(s, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

// The prompt every check here uses, as the chat endpoints render it.
const std::vector<strata::chat::message> prompt_messages = {{"user", "Recite Genesis 1:1.", std::nullopt}};

std::unique_ptr<strata::rt::model> load(const fs::path& p, std::uint32_t n_outputs) {
  strata::rt::engine_options opt;
  opt.threads = 2;
  opt.n_ctx = 256;
  opt.n_batch = 64;
  opt.max_outputs = n_outputs;
  return strata::rt::model::load(p, opt);
}

// NMSE limits against llama.cpp's logits, derived in tests/fixtures/demo/README.md the way
// ../shared/fixtures derives tolerance_nmse: max(3 x llama.cpp's own batch-vs-decode NMSE,
// 4 x llama.cpp-vs-float64-reference NMSE, 1e-5), for the first demo model; kept for the retrained
// one, for which the rule gives looser limits (the README there has both).
struct logits_case {
  const char* type;       // "Q8_0": the committed file; else requantized from it to this type
  const char* reference;  // llama.cpp logits under tests/fixtures/demo/
  double tolerance_nmse;
};
constexpr logits_case logits_cases[] = {
    {"Q8_0", "strata-demo.llamacpp.f32", 2.6e-5},
    {"Q4_K_M", "strata-demo-Q4_K_M.llamacpp.f32", 9.3e-5},
};

// The demo model in `type`: the committed file, or a requantized copy in the temp directory.
fs::path model_in(const std::string& type) {
  const fs::path q8 = models_dir() / "strata-demo.gguf";
  if (type == "Q8_0") return q8;
  const fs::path out = fs::temp_directory_path() / ("strata-demo-" + type + "-" + std::to_string(::getpid()) + ".gguf");
  const strata::gguf::file in(q8);
  strata::mkmodel::requantize(in.gguf(), strata::quant::find_ftype(type)->id).writer.write(out);
  return out;
}

}  // namespace

TEST_CASE("demo model: found where the apps look for it") {
  const auto c = strata::rt::default_model_candidates("/opt/strata/bin/strata-serve");
  REQUIRE(!c.empty());
  CHECK(c.front() == fs::path("/opt/strata/share/strata/models/strata-demo.gguf"));
  // A binary in the build tree finds the checkout's models/ (build/release/apps/strata-serve).
  const fs::path src = fs::weakly_canonical(models_dir() / "..");
  const auto found = strata::rt::find_default_model(src / "build" / "release" / "apps" / "strata-serve");
  CHECK(fs::equivalent(found, models_dir() / "strata-demo.gguf"));
}

TEST_CASE("demo model: tokenizer gives llama.cpp's ids for the chat prompt") {
  const strata::gguf::file f(models_dir() / "strata-demo.gguf");
  const auto tok = strata::tokenizer::tokenizer::from_gguf(f.gguf());
  const auto kind = strata::chat::detect(f.gguf());
  CHECK(kind == strata::chat::template_kind::chatml);
  const std::string text = strata::chat::render(kind, prompt_messages, {.add_generation_prompt = true});
  CHECK(tok.encode(text, true, true) == read_ids(demo_dir() / "prompt_ids.txt"));
}

TEST_CASE("demo model: greedy answer to the fixed prompt is the golden text") {
  const fs::path path = models_dir() / "strata-demo.gguf";
  const strata::gguf::file f(path);
  const auto tok = strata::tokenizer::tokenizer::from_gguf(f.gguf());
  auto m = load(path, 1);
  strata::rt::session s(*m);
  std::span<const float> logits = s.prefill(read_ids(demo_dir() / "prompt_ids.txt"));
  std::vector<std::int32_t> ids;
  for (int i = 0; i < 64; ++i) {
    const auto it = std::max_element(logits.begin(), logits.end());
    const auto t = std::int32_t(it - logits.begin());
    if (tok.is_eog(t)) break;
    ids.push_back(t);
    logits = s.decode(t);
  }
  const std::string answer = tok.decode(ids);
  MESSAGE("answer: " << answer);
  CHECK(answer == read_text(demo_dir() / "golden_answer.txt"));
}

TEST_CASE("demo model: logits match llama.cpp (Q8_0 and Q4_K_M)") {
  const auto ids = read_ids(demo_dir() / "prompt_ids.txt");
  for (const auto& c : logits_cases) {
    const std::string type = c.type;
    CAPTURE(type);
    const fs::path path = model_in(type);
    auto m = load(path, std::uint32_t(ids.size()));
    const std::size_t V = m->hparams().n_vocab;
    strata::rt::session s(*m);
    std::vector<float> all;
    s.prefill(ids, &all);
    const auto ref = strata::test::read_f32(demo_dir() / c.reference);
    REQUIRE(ref.size() == ids.size() * V);
    const auto st = strata::test::compare_logits(all, ref, V);
    MESSAGE(type << ": nmse " << st.nmse << " (tolerance " << c.tolerance_nmse << "), max_abs " << st.max_abs
                    << ", top1 " << st.top1_agree << "/" << st.rows);
    // No top-1 check: two prompt positions are near ties (top-2 gaps of 0.004..0.017) that
    // the quantized activations may order either way, as they may in llama.cpp's own builds.
    CHECK(st.nmse <= c.tolerance_nmse);
    if (path != models_dir() / "strata-demo.gguf") fs::remove(path);
  }
}
