// Test support: the engine's placement inputs for a fixture model (what model::load sees), for
// the suites that plan tier layouts over the golden models.
#pragma once
#include "strata/arch/all.hpp"
#include "strata/gguf/reader.hpp"
#include "strata/runtime/placement.hpp"
#include "support/fidelity.hpp"

namespace strata::test {

// fn(reader, hparams) on the fixture's file.
template <class Fn>
auto with_fixture_file(const golden_model& g, Fn&& fn) {
  const gguf::file f(g.path);
  const auto hp = arch::visit(f.gguf().get_string("general.architecture"),
                              [&](auto a) { return decltype(a)::load_hparams(f.gguf()); });
  return fn(f.gguf(), hp);
}

// `gpu`: as rt::placement_for (the Vulkan backend's budgets; else the GPU budget is 0).
inline rt::placement_inputs fixture_placement(const golden_model& g, const rt::engine_options& opt, bool gpu) {
  return with_fixture_file(g, [&](const gguf::reader& r, const arch::hparams& hp) {
    return rt::placement_for(g.path, r, hp, opt, gpu);
  });
}

// The prompt step model::load would take (rt::prompt_step_tokens).
inline std::uint32_t fixture_prompt_step(const golden_model& g, const rt::engine_options& opt, bool gpu) {
  return with_fixture_file(g, [&](const gguf::reader& r, const arch::hparams& hp) {
    return rt::prompt_step_tokens(g.path, r, hp, opt, gpu);
  });
}

}  // namespace strata::test
