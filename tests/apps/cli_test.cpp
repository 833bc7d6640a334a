// apps/common: the shared command line (help layout, llama.cpp aliases, shared option groups),
// the log line formats and levels, and the progress bar's plain-line mode.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "cli.hpp"
#include "log.hpp"
#include "progress.hpp"
#include "strata/core/error.hpp"

namespace {

using namespace strata::app;

// What a logger wrote, through a memory stream.
struct captured {
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* f = open_memstream(&buf, &len);
  ~captured() {
    if (f) std::fclose(f);
    std::free(buf);
  }
  std::string text() {
    std::fflush(f);
    return std::string(buf, len);
  }
};

int parse(cli& c, std::vector<std::string> args) {
  std::vector<char*> argv{const_cast<char*>("prog")};
  for (auto& a : args) argv.push_back(a.data());
  return c.parse(int(argv.size()), argv.data());
}

cli make_cli() {
  return cli({"strata-test", "-m FILE [options]", "A test program.", {{"run it", "strata-test -m x.gguf"}}});
}

}  // namespace

TEST_CASE("cli: llama.cpp-style help: usage line, groups, aliases, defaults, examples last") {
  auto c = make_cli();
  std::string model;
  backend_options bo;
  kv_options ko;
  log_options lo;
  add_model_option(c.app(), model);
  add_backend_options(c.app(), bo);
  add_kv_options(c.app(), ko);
  c.add_log_options(lo, true);
  const std::string help = c.app().help();
  CHECK(help.rfind("usage: strata-test -m FILE [options]\n\nA test program.\n", 0) == 0);
  CHECK(help.find("----- Backend -----") != std::string::npos);
  CHECK(help.find("----- KV cache -----") != std::string::npos);
  CHECK(std::regex_search(help, std::regex("\n  -ngl, --n-gpu-layers, --gpu-layers N\\s+layers on the GPU")));
  CHECK(std::regex_search(help, std::regex("\n  -ctk, --kv-type-k, --cache-type-k TYPE\\s+KV cache type for K only")));
  CHECK(help.find("(default: auto)") != std::string::npos);
  CHECK(help.find("GGUF model file (required)") != std::string::npos);
  CHECK(help.find("--log-format FORMAT") != std::string::npos);
  const auto ex = help.find("examples:\n\n  run it:\n    strata-test -m x.gguf\n");
  CHECK(ex != std::string::npos);
  CHECK(ex > help.find("----- Logging -----"));
}

TEST_CASE("cli: single-dash aliases become the long options, shared groups fill engine options") {
  auto c = make_cli();
  std::string model;
  backend_options bo;
  kv_options ko;
  add_model_option(c.app(), model);
  add_backend_options(c.app(), bo);
  add_kv_options(c.app(), ko);
  REQUIRE(parse(c, {"-m", "x.gguf", "-ngl", "7", "-ctk", "q8_0", "-ctv", "tq3", "--backend", "cpu"}) == -1);
  CHECK(model == "x.gguf");
  CHECK(bo.n_gpu_layers == 7);
  strata::rt::engine_options eo;
  apply(bo, eo);
  apply(ko, eo);
  CHECK(eo.backend == strata::rt::backend_kind::cpu);
  CHECK(eo.n_gpu_layers == 7);
  CHECK(eo.type_k == strata::kv::kv_type::q8_0);
  CHECK(eo.type_v == strata::kv::kv_type::tq3);

  auto c2 = make_cli();  // an alias whose long option the app lacks stays unknown
  std::string m2;
  add_model_option(c2.app(), m2);
  CHECK(parse(c2, {"-m", "x.gguf", "-np", "4"}) > 0);
  auto c3 = make_cli();  // a bad choice is rejected by the parser
  backend_options b3;
  add_backend_options(c3.app(), b3);
  CHECK(parse(c3, {"--backend", "metal"}) > 0);
}

TEST_CASE("log: levels from the flag, else STRATA_LOG, else info, bad STRATA_LOG is an error") {
  CHECK(parse_log_level("warning") == log_level::warn);
  CHECK(parse_log_level("3") == log_level::debug);
  CHECK_FALSE(parse_log_level("verbose"));
  ::unsetenv("STRATA_LOG");
  CHECK(resolve_log_level("") == log_level::info);
  ::setenv("STRATA_LOG", "debug", 1);
  CHECK(resolve_log_level("") == log_level::debug);
  CHECK(resolve_log_level("error") == log_level::error);
  ::setenv("STRATA_LOG", "loud", 1);
  CHECK_THROWS_WITH(resolve_log_level(""), doctest::Contains("STRATA_LOG='loud' is not a log level"));
  ::unsetenv("STRATA_LOG");
}

TEST_CASE("log: one text line (time, level, component) or one JSON object per line") {
  captured out;
  {
    logger text(log_level::info, log_format::text, out.f);
    text.info("quantize", "hello");
    text.debug("quantize", "hidden");  // below the level
    text.log(log_level::warn, "http", {}, {{"status", std::int64_t(503)}, {"route", std::string_view("/health")}});
  }
  const std::string t = out.text();
  CHECK(std::regex_search(t, std::regex(R"(^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3} INFO  \[quantize\] hello\n)")));
  CHECK(t.find("hidden") == std::string::npos);
  CHECK(t.find("WARN  [http] status=503 route=/health\n") != std::string::npos);

  captured js;
  logger json(log_level::info, log_format::json, js.f);
  json.log(log_level::info, "http", "", {{"request_id", std::string_view("req_1")}, {"latency_ms", 1.5},
                                         {"ok", true}});
  json.error("serve", "bad \"quote\"\n");
  const std::string j = js.text();
  CHECK(std::regex_search(j, std::regex(R"re(^\{"ts":"[0-9T:.-]+","level":"info","component":"http","request_id":"req_1","latency_ms":1\.500,"ok":true\}\n)re")));
  CHECK(j.find(R"("level":"error","component":"serve","msg":"bad \"quote\"\n"})") != std::string::npos);
}

TEST_CASE("progress: off a terminal, a few plain lines, nothing for a step under 300 ms") {
  captured out;
  logger log(log_level::info, log_format::text, out.f);
  {
    progress_bar quick(log, "test", "quick", 10, "tensors");
    for (int i = 1; i <= 10; ++i) quick.update(i);
    quick.finish();
  }
  CHECK(out.text().empty());
  progress_bar slow(log, "test", "slow", 100, "tensors");
  std::this_thread::sleep_for(std::chrono::milliseconds(320));
  for (int i = 1; i <= 100; ++i) slow.update(i);
  slow.finish();
  const std::string t = out.text();
  CHECK(t.find("[test] slow: 25% (25 tensors / 100 tensors)") != std::string::npos);
  CHECK(t.find("[test] slow: 75% (75 tensors / 100 tensors)") != std::string::npos);
  CHECK(std::count(t.begin(), t.end(), '\n') == 3);  // 25, 50, 75 %
}

TEST_CASE("cli: tier counts (--stream-link, --expert-cache) fill engine options, and a value that is not a whole number names the flag") {
  auto c = make_cli();
  tier_options to;
  add_tier_options(c.app(), to);
  REQUIRE(parse(c, {"--stream-link", "12", "--expert-cache", "32"}) == -1);
  strata::rt::engine_options eo;
  apply(to, eo);
  CHECK(eo.stream_link == 12u);
  CHECK(eo.expert_cache == 32u);
  to.stream_link = "8x";
  CHECK_THROWS_WITH_AS(apply(to, eo), doctest::Contains("--stream-link: '8x' is not a block count"), strata::error);
  to.stream_link = "";
  to.expert_cache = "-1";
  CHECK_THROWS_WITH_AS(apply(to, eo), doctest::Contains("--expert-cache: '-1' is not a slot count"), strata::error);
}
