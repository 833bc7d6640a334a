// Sizes on the command line: binary suffixes, fractions, and every malformed spelling refused
// with the option's name.
#include <doctest/doctest.h>

#include <string>

#include "strata/core/byte_size.hpp"

using strata::format_byte_size;
using strata::parse_byte_size;

TEST_CASE("parse_byte_size: suffixes are binary and case-insensitive") {
  CHECK(parse_byte_size("4096", "--x") == 4096);
  CHECK(parse_byte_size("4096B", "--x") == 4096);
  CHECK(parse_byte_size("64k", "--x") == 64ull << 10);
  CHECK(parse_byte_size("512M", "--x") == 512ull << 20);
  CHECK(parse_byte_size("12G", "--x") == 12ull << 30);
  CHECK(parse_byte_size("12GiB", "--x") == 12ull << 30);
  CHECK(parse_byte_size("12GB", "--x") == 12ull << 30);
  CHECK(parse_byte_size("1.5G", "--x") == 3ull << 29);
  CHECK(parse_byte_size("0.5K", "--x") == 512);
  CHECK(parse_byte_size("2T", "--x") == 2ull << 40);
  CHECK(parse_byte_size("0", "--x") == 0);
}

TEST_CASE("parse_byte_size: bad sizes name the option and the text") {
  for (const char* bad : {"", "G", "12X", "-1G", "12GG", "1.5", "1e3", "12 G", "99999999999T"}) {
    CAPTURE(bad);
    try {
      parse_byte_size(bad, "--gpu-budget");
      FAIL("accepted");
    } catch (const strata::error& e) {
      const std::string m = e.what();
      CHECK(m.find("--gpu-budget") != std::string::npos);
      CHECK(m.find("'" + std::string(bad) + "'") != std::string::npos);
    }
  }
}

TEST_CASE("format_byte_size") {
  CHECK(format_byte_size(512) == "512 B");
  CHECK(format_byte_size(1536) == "1.50 KiB");
  CHECK(format_byte_size(12ull << 30) == "12.00 GiB");
}
