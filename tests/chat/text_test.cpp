// chat::detail text helpers against the Python semantics they stand in for
// (str.strip(), str.split(sep)[0]/[-1], json.dumps(ensure_ascii=False)).
#include <doctest/doctest.h>

#include <string>
#include <string_view>

#include "strata/chat/detail/text.hpp"

using namespace strata::chat::detail;
using namespace std::string_view_literals;

TEST_CASE("py_strip removes exactly Python's whitespace set") {
  CHECK(py_strip("  a b \t\n\r\v\f") == "a b");
  CHECK(py_strip("\x1c\x1d\x1e\x1fx\x1f") == "x");
  // U+0085 U+00A0 U+1680 U+2000 U+200A U+2028 U+2029 U+202F U+205F U+3000
  CHECK(py_strip("\u0085\u00a0\u1680\u2000x\u200a\u2028\u2029\u202f\u205f\u3000") == "x");
  // Not whitespace for Python: ZERO WIDTH SPACE, BOM, U+180E.
  CHECK(py_strip("\u200bx\ufeff") == "\u200bx\ufeff");
  CHECK(py_strip("\u180ex") == "\u180ex");
  CHECK(py_strip("") == "");
  CHECK(py_strip(" \u3000 ") == "");
  // Invalid UTF-8 is not whitespace and stops the scan; a truncated sequence is kept.
  CHECK(py_strip(" \xff ") == "\xff");
  CHECK(py_strip(" a\xe3\x80") == "a\xe3\x80");
  CHECK(py_strip("\0x\0"sv) == "\0x\0"sv);
}

TEST_CASE("newline strips and splits") {
  CHECK(strip("\n\nab\n", '\n') == "ab");
  CHECK(strip("\n\n", '\n') == "");
  CHECK(lstrip("\n a\n", '\n') == " a\n");
  CHECK(rstrip("\n a\n", '\n') == "\n a");
  CHECK(before_first("a</t>b</t>c", "</t>") == "a");
  CHECK(after_last("a</t>b</t>c", "</t>") == "c");
  CHECK(before_first("abc", "</t>") == "abc");
  CHECK(after_last("abc", "</t>") == "abc");
  CHECK(after_last("abc</t>", "</t>") == "");
}

TEST_CASE("json_quote matches json.dumps(ensure_ascii=False)") {
  CHECK(json_quote("") == "\"\"");
  CHECK(json_quote("a\"b\\c") == "\"a\\\"b\\\\c\"");
  CHECK(json_quote("\n\r\t\b\f") == "\"\\n\\r\\t\\b\\f\"");
  CHECK(json_quote("\x01\x1f\x7f"sv) == "\"\\u0001\\u001f\x7f\"");
  CHECK(json_quote("\0"sv) == "\"\\u0000\"");
  CHECK(json_quote("é 日本 🙂 \u2028 /") == "\"é 日本 🙂 \u2028 /\"");
}
