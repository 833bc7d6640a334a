// Test support: a golden model shipped with the tests (tests/fixtures), by name; the test fails
// naming it when the fixture is missing.
#pragma once
#include <doctest/doctest.h>

#include <string_view>

#include "support/fidelity.hpp"

namespace strata::test {

inline const golden_model& shipped_fixture(std::string_view name) {
  static const auto models = local_golden();
  for (const auto& g : models)
    if (g.name == name) return g;
  FAIL("fixture model " << name << " is not shipped");
  throw;  // FAIL throws; the compiler does not know it
}

}  // namespace strata::test
