// Test support: whether this build runs under AddressSanitizer (STRATA_SANITIZE: the asan preset,
// with UBSan beside it). CI's ASan pass exists to catch host-side memory and UB errors; under it
// the lavapipe-bound tier cases run 4-8x their release time, so a few multi-variant cases run
// there only the variants that record each host path once, while the release pass runs every
// variant and every check (.ci/run lists which ASan case records which path).
#pragma once

namespace strata::test {

constexpr bool sanitized_build() {
#if defined(__SANITIZE_ADDRESS__)
  return true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
  return true;
#else
  return false;
#endif
#else
  return false;
#endif
}

}  // namespace strata::test
