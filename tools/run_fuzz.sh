#!/usr/bin/env bash
# Runs the libFuzzer targets (+ ASan + UBSan) for a bounded time each; exits non-zero on any
# finding (crash reproducers are left in build-fuzz/artifacts/). Builds with clang++ directly, no
# CMake needed.
#  - gguf_reader: gguf::reader. Its corpus (tests/fuzz/corpus-run/, git-ignored) is seeded with
#    small synthetic GGUFs from tests/fuzz/gguf_seeds.cpp, one-row "model-shaped" copies of the
#    fixture models, and the first 40 KiB of each fixture model (inputs are capped at 64 KiB).
#  - request_parser: strata-serve's OpenAI and Anthropic request parsers
#    (tests/fuzz/request_parser_fuzz.cpp), seeded with the SDK conformance traffic
#    (tests/fuzz/seeds/requests/, recorded by tests/clients with STRATA_RECORD_REQUESTS).
# (The model-level fuzzer, tests/fuzz/model_fuzz.cpp, needs the compiled runtime: CMake builds it.)
# usage: tools/run_fuzz.sh [--build-only | --no-build] [seconds per target=60] [target...]
#   --build-only: build the targets' binaries and stop (no corpus, no run);
#   --no-build:   run binaries an earlier --build-only left in build-fuzz/.
# (.ci/run builds every target while the model-level fuzzer runs, then runs the targets side by
# side, one core each.)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=1 run=1
case ${1:-} in
  --build-only) run=0; shift ;;
  --no-build) build=0; shift ;;
esac
secs=${1:-60}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(gguf_reader request_parser)
cxx=${CXX:-clang++-14}
out=$root/build-fuzz
corpus=$root/tests/fuzz/corpus-run
mkdir -p "$out/artifacts" "$corpus"

flags=(-std=c++20 -O1 -g -I"$root/include" -I"$root/tests" -I"$root/runtime")
san=(-fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined)
# libFuzzer exits non-zero on a crash, leak, timeout (-timeout s per input) or RSS over the limit.
run() {  # name corpus
  "$out/$1_fuzz" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -max_total_time="$secs" \
    -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$2"
}

build_target() {
  case $1 in
    gguf_reader)
      echo "building gguf_reader_fuzz with $cxx"
      "$cxx" "${flags[@]}" "${san[@]}" "$root/tests/fuzz/gguf_reader_fuzz.cpp" -o "$out/gguf_reader_fuzz"
      "$cxx" "${flags[@]}" "$root/tests/fuzz/gguf_seeds.cpp" -o "$out/gguf_seeds"
      ;;
    request_parser)
      echo "building request_parser_fuzz with $cxx"
      serve="$root/runtime/serve"
      # The parsers' sources (no engine, no network): keep in step with runtime/serve/.
      parser_sources=(openai_chat openai_completions openai_responses openai_shared anthropic_api
                      request request_fields json_input tools)
      srcs=()
      for f in "${parser_sources[@]}"; do srcs+=("$serve/$f.cpp"); done
      "$cxx" "${flags[@]}" "${san[@]}" "$root/tests/fuzz/request_parser_fuzz.cpp" "${srcs[@]}" \
        -lsimdjson -lboost_json -o "$out/request_parser_fuzz"
      ;;
  esac
}

run_target() {
  case $1 in
    gguf_reader)
      models=("$root"/tests/fixtures/models/*.gguf)
      "$out/gguf_seeds" "$corpus" "${models[@]}"
      for m in "${models[@]}"; do
        head -c 40960 "$m" > "$corpus/prefix40k-$(basename "$m")"
      done
      echo "corpus: $(ls "$corpus" | wc -l) inputs in $corpus"
      run gguf_reader "$corpus"
      ;;
    request_parser)
      rcorpus="$root/tests/fuzz/corpus-requests"
      mkdir -p "$rcorpus"
      cp "$root"/tests/fuzz/seeds/requests/* "$rcorpus/"
      echo "corpus: $(ls "$rcorpus" | wc -l) inputs in $rcorpus"
      run request_parser "$rcorpus"
      ;;
  esac
}

for t in "${targets[@]}"; do
  case $t in
    gguf_reader|request_parser) ;;
    *) echo "unknown fuzz target '$t' (gguf_reader, request_parser)" >&2; exit 2 ;;
  esac
  if [ "$build" = 1 ]; then build_target "$t"; fi
  if [ "$run" = 1 ]; then run_target "$t"; fi
done
