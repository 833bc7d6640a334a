// /v1/embeddings request forms, bad inputs named, and the body's float and base64 encodings
// (base64 decoded back to the same floats, as the openai SDK does).
#include <doctest/doctest.h>

#include <boost/json.hpp>
#include <cstring>

#include "serve/embeddings.hpp"

using namespace strata::serve;
namespace bjson = boost::json;

namespace {
json_in::object parse_body(const std::string& s) {
  static thread_local simdjson::dom::parser p;
  return json_in::parse_object(p, s);
}
std::string bad_param(const std::string& s) {
  try {
    parse_embeddings(parse_body(s), 4);
  } catch (const api_error& e) {
    CHECK(e.status == 400);
    return e.param;
  }
  FAIL("no error thrown");
  return {};
}
std::vector<float> decode_base64(const std::string& s) {
  std::string bytes;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : s) {
    if (c == '=') break;
    const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    acc = acc << 6 | std::uint32_t(std::strchr(alphabet, c) - alphabet);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      bytes += char((acc >> bits) & 0xFF);
    }
  }
  REQUIRE(bytes.size() % 4 == 0);
  std::vector<float> v(bytes.size() / 4);
  std::memcpy(v.data(), bytes.data(), bytes.size());  // little-endian test hosts
  return v;
}
}  // namespace

TEST_CASE("embeddings: input forms") {
  auto a = parse_embeddings(parse_body(R"({"model":"m","input":"hello"})"), 4);
  REQUIRE(a.size() == 1);
  CHECK(a.texts[0] == "hello");
  CHECK(!a.base64);
  auto b = parse_embeddings(parse_body(R"({"model":"m","input":["a","b"],"encoding_format":"base64","dimensions":4})"), 4);
  CHECK(b.size() == 2);
  CHECK(b.base64);
  auto c = parse_embeddings(parse_body(R"({"model":"m","input":[1,2,3]})"), 4);
  REQUIRE(c.size() == 1);
  CHECK(c.token_inputs[0] == std::vector<std::int32_t>{1, 2, 3});
  auto d = parse_embeddings(parse_body(R"({"model":"m","input":[[1],[2,3]]})"), 4);
  CHECK(d.size() == 2);
  CHECK(d.token_inputs[1] == std::vector<std::int32_t>{2, 3});
}

TEST_CASE("embeddings: bad requests are named") {
  CHECK(bad_param(R"({"input":"x"})") == "model");
  CHECK(bad_param(R"({"model":"m"})") == "input");
  CHECK(bad_param(R"({"model":"m","input":""})") == "input");
  CHECK(bad_param(R"({"model":"m","input":[]})") == "input");
  CHECK(bad_param(R"({"model":"m","input":["a",""]})") == "input[1]");
  CHECK(bad_param(R"({"model":"m","input":["a",7]})") == "input[1]");
  CHECK(bad_param(R"({"model":"m","input":[[1,-1]]})") == "input[0][1]");
  CHECK(bad_param(R"({"model":"m","input":"a","encoding_format":"hex"})") == "encoding_format");
  CHECK(bad_param(R"({"model":"m","input":"a","dimensions":2})") == "dimensions");
}

TEST_CASE("embeddings: float and base64 bodies carry the same vectors") {
  const std::vector<std::vector<float>> v = {{0.5f, -1.25f, 3.0e-8f}, {1.0f, 0.0f, -0.0f}};
  for (const bool b64 : {false, true}) {
    const auto o = bjson::parse(embeddings_body("m", v, b64, 7)).as_object();
    CHECK(o.at("object") == "list");
    CHECK(o.at("model") == "m");
    CHECK(o.at("usage").at("prompt_tokens") == 7);
    const auto& data = o.at("data").as_array();
    REQUIRE(data.size() == 2);
    for (std::size_t i = 0; i < 2; ++i) {
      CHECK(data[i].at("object") == "embedding");
      CHECK(data[i].at("index") == i);
      std::vector<float> got;
      if (b64) got = decode_base64(std::string(data[i].at("embedding").as_string()));
      else
        for (const auto& x : data[i].at("embedding").as_array()) got.push_back(float(x.as_double()));
      CHECK(got == v[i]);
    }
  }
  CHECK(base64_floats(std::vector<float>{1.0f}) == "AACAPw==");  // 0x3f800000 little-endian
}
