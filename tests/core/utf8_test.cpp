#include <doctest/doctest.h>

#include "strata/core/utf8.hpp"

TEST_CASE("utf8: validation follows RFC 3629") {
  using strata::utf8::is_valid;
  CHECK(is_valid(""));
  CHECK(is_valid("plain ascii"));
  CHECK(is_valid("\xC3\xA9t\xC3\xA9 \xE2\x82\xAC \xF0\x9F\x98\x80"));
  CHECK_FALSE(is_valid("\xC3"));              // truncated
  CHECK_FALSE(is_valid("\xC0\xAF"));          // overlong '/'
  CHECK_FALSE(is_valid("\xE0\x80\xAF"));      // overlong
  CHECK_FALSE(is_valid("\xED\xA0\x80"));      // surrogate U+D800
  CHECK_FALSE(is_valid("\xF4\x90\x80\x80"));  // above U+10FFFF
  CHECK_FALSE(is_valid("\xFF"));
  CHECK_FALSE(is_valid("\x80"));
}

TEST_CASE("utf8: sanitize replaces each bad byte with U+FFFD and keeps the rest") {
  CHECK(strata::utf8::sanitize("a\xFF" "b") == "a\xEF\xBF\xBD" "b");
  CHECK(strata::utf8::sanitize("\xE2\x82") == "\xEF\xBF\xBD\xEF\xBF\xBD");
  CHECK(strata::utf8::sanitize("ok \xE2\x82\xAC") == "ok \xE2\x82\xAC");
}
