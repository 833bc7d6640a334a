// Stop conditions: stop strings across pieces with holdback, overlapping stop strings, EOG and
// max_tokens, and a randomized check that the output never depends on how text is split.
#include <doctest/doctest.h>

#include <string>
#include <vector>

#include "strata/sampling/rng.hpp"
#include "strata/sampling/stop.hpp"

using namespace strata::sampling;

namespace {
struct stream_result {
  std::vector<std::string> emits;
  std::string text;
  bool stopped = false;
  std::size_t index = stop_string_matcher::npos;
};
// Feeds pieces until a stop, then flushes if none fired.
stream_result stream(std::vector<std::string> stops, const std::vector<std::string>& pieces) {
  stop_string_matcher m(std::move(stops));
  stream_result r;
  for (const auto& piece : pieces) {
    const auto f = m.feed(piece);
    r.emits.emplace_back(f.emit);
    r.text += f.emit;
    if (f.stopped) {
      r.stopped = true;
      r.index = f.stop_index;
      return r;
    }
  }
  r.text += m.flush();
  return r;
}
using strs = std::vector<std::string>;
}  // namespace

TEST_CASE("stop: a stop string split over several pieces is never emitted") {
  const auto r = stream({"<|end|>"}, {"Hello <", "|", "en", "d|", ">tail"});
  CHECK(r.emits == strs{"Hello ", "", "", "", ""});
  CHECK(r.stopped);
  CHECK(r.index == 0);
  CHECK(r.text == "Hello ");

  const auto s = stream({"###"}, {"a#", "#", "#b"});
  CHECK(s.emits == strs{"a", "", ""});
  CHECK(s.stopped);
}

TEST_CASE("stop: held text is released once it can no longer start a stop string") {
  const auto r = stream({"abc"}, {"xa", "b", "d", "e"});
  CHECK(r.emits == strs{"x", "", "abd", "e"});
  CHECK_FALSE(r.stopped);
  CHECK(r.text == "xabde");

  // The hold shrinks to the longest viable suffix: "aab" in "aaa" keeps "aa", emits "a".
  const auto n = stream({"aab"}, {"a", "a", "a", "b"});
  CHECK(n.emits == strs{"", "", "a", ""});
  CHECK(n.stopped);
  CHECK(n.text == "a");

  // A partial match at the end of the stream is flushed as ordinary text.
  const auto f = stream({"abc"}, {"hi ab"});
  CHECK(f.emits == strs{"hi "});
  CHECK(f.text == "hi ab");
}

TEST_CASE("stop: overlapping prefixes ab and abc") {
  // "ab" completes first, whatever the list order.
  auto r = stream({"ab", "abc"}, {"x", "a", "b", "c"});
  CHECK(r.emits == strs{"x", "", ""});
  CHECK(r.index == 0);
  r = stream({"abc", "ab"}, {"x", "a", "b", "c"});
  CHECK(r.index == 1);
  CHECK(r.text == "x");
  // Both complete inside one piece: "ab" still ends first.
  r = stream({"abc", "ab"}, {"xabcd"});
  CHECK(r.index == 1);
  CHECK(r.text == "x");
  // "abc" after a false start "ab" -> "a": the first "a" is released, the second held.
  r = stream({"abc", "abd"}, {"a", "a", "b", "c"});
  CHECK(r.emits == strs{"", "a", "", ""});
  CHECK(r.index == 0);
  CHECK(r.text == "a");
}

TEST_CASE("stop: matches ending at the same byte cut at the longest one") {
  const auto r = stream({"bc", "abc"}, {"xab", "c"});
  CHECK(r.index == 1);
  CHECK(r.text == "x");
  // A stop string that started earlier but has not completed loses to one that completed.
  const auto e = stream({"abcd", "bc"}, {"abc", "d"});
  CHECK(e.index == 1);
  CHECK(e.text == "a");
}

TEST_CASE("stop: text after the stop string in the same piece is dropped and later feeds emit nothing") {
  stop_string_matcher m({"STOP"});
  auto r = m.feed("one STOP two");
  CHECK(r.emit == "one ");
  CHECK(r.stopped);
  r = m.feed("three");
  CHECK(r.emit.empty());
  CHECK(r.stopped);
  CHECK(m.flush().empty());
  m.reset();
  CHECK(m.feed("again").emit == "again");
  CHECK_THROWS_WITH_AS(stop_string_matcher({"a", ""}), doctest::Contains("stop[1]"), strata::error);
}

TEST_CASE("stop: no stop strings passes text straight through") {
  stop_string_matcher m;
  CHECK(m.feed("abc").emit == "abc");
  CHECK(m.feed("").emit.empty());
  CHECK(m.flush().empty());
}

TEST_CASE("stop: the emitted text never depends on how the stream is split") {
  // Reference on the whole text: the first byte where any stop string completes; cut at the start
  // of the longest stop string ending there.
  const auto reference = [](const std::string& text, const strs& stops, std::size_t& index) {
    std::size_t best_end = std::string::npos, best_start = 0;
    index = stop_string_matcher::npos;
    for (std::size_t i = 0; i < stops.size(); ++i) {
      const auto pos = text.find(stops[i]);
      if (pos == std::string::npos) continue;
      const auto end = pos + stops[i].size();
      if (end < best_end || (end == best_end && pos < best_start)) {
        best_end = end;
        best_start = pos;
        index = i;
      }
    }
    return index == stop_string_matcher::npos ? text : text.substr(0, best_start);
  };
  const strs stops = {"ab", "abc", "bca", "cc", "aaab"};
  rng g(17);
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int len = 1 + int(g.next_u32() % 24);
    for (int i = 0; i < len; ++i) text += char('a' + g.next_u32() % 3);
    std::vector<std::string> pieces;
    for (std::size_t i = 0; i < text.size();) {
      const std::size_t n = std::min<std::size_t>(g.next_u32() % 4, text.size() - i);  // empty pieces too
      pieces.push_back(text.substr(i, n));
      i += n;
    }
    std::size_t want_index;
    const std::string want = reference(text, stops, want_index);
    const auto got = stream(stops, pieces);
    CAPTURE(text);
    REQUIRE(got.text == want);
    REQUIRE(got.index == want_index);
    REQUIRE(got.stopped == (want_index != stop_string_matcher::npos));
  }
}

TEST_CASE("stop_conditions: EOG ids, max_tokens, stop strings and finish()") {
  SUBCASE("EOG stops without emitting its text; held text is released by finish") {
    stop_conditions s({2, 7, 2}, -1, {"abc"});
    CHECK(s.is_eog(7));
    CHECK_FALSE(s.is_eog(3));
    auto r = s.on_token(5, "xab");
    CHECK(r.emit == "x");
    CHECK(r.reason == stop_reason::none);
    r = s.on_token(7, "<eos>");
    CHECK(r.emit.empty());
    CHECK(r.reason == stop_reason::eog);
    CHECK(s.finished());
    const auto f = s.finish();
    CHECK(f.emit == "ab");
    CHECK(f.reason == stop_reason::eog);
  }
  SUBCASE("max_tokens counts generated tokens and emits the last one") {
    stop_conditions s({}, 2, {});
    CHECK(s.on_token(1, "a").reason == stop_reason::none);
    const auto r = s.on_token(1, "b");
    CHECK(r.emit == "b");
    CHECK(r.reason == stop_reason::max_tokens);
    CHECK(s.n_generated() == 2);
    CHECK(s.on_token(1, "c").emit.empty());
  }
  SUBCASE("max_tokens = 0 is finished before the first token") {
    stop_conditions s({}, 0, {});
    CHECK(s.finished());
    CHECK(s.reason() == stop_reason::max_tokens);
  }
  SUBCASE("a stop string in the token that hits max_tokens wins") {
    stop_conditions s({}, 1, {"x"});
    const auto r = s.on_token(1, "axb");
    CHECK(r.emit == "a");
    CHECK(r.reason == stop_reason::stop_string);
    CHECK(r.stop_index == 0);
  }
  SUBCASE("a stop string completed by the detokenizer's final flush") {
    stop_conditions s({0}, 3, {"abc"});
    CHECK(s.on_token(4, "1ab").emit == "1");
    CHECK(s.on_token(4, "").reason == stop_reason::none);
    CHECK(s.on_token(4, "").reason == stop_reason::max_tokens);
    const auto f = s.finish("c!");
    CHECK(f.emit.empty());
    CHECK(f.reason == stop_reason::stop_string);
  }
  SUBCASE("reset starts a new request") {
    stop_conditions s({0}, -1, {"z"});
    s.on_token(0, "");
    CHECK(s.finished());
    s.reset();
    CHECK_FALSE(s.finished());
    CHECK(s.on_token(1, "hi").emit == "hi");
  }
  CHECK_THROWS_WITH_AS(stop_conditions({}, -5, {}), doctest::Contains("max_tokens"), strata::error);
}
