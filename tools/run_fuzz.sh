#!/usr/bin/env bash
# Fuzzes gguf::reader with libFuzzer (+ ASan + UBSan) for a bounded time; exits non-zero on any
# finding (crash reproducers are left in build-fuzz/artifacts/). Builds with clang++ directly, no
# CMake needed. The corpus (tests/fuzz/corpus-run/, git-ignored) is seeded with small synthetic
# GGUFs from tests/fuzz/gguf_seeds.cpp, one-row "model-shaped" copies of the fixture models, and
# the first 40 KiB of each fixture model (inputs are capped at 64 KiB, the fixtures are MBs).
# usage: tools/run_fuzz.sh [seconds=60] [extra libFuzzer flags...]
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-60}
shift || true
cxx=${CXX:-clang++-14}
out=$root/build-fuzz
corpus=$root/tests/fuzz/corpus-run
mkdir -p "$out/artifacts" "$corpus"

flags=(-std=c++20 -O1 -g -I"$root/include" -I"$root/tests")
echo "building with $cxx"
"$cxx" "${flags[@]}" -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  "$root/tests/fuzz/gguf_reader_fuzz.cpp" -o "$out/gguf_reader_fuzz"
"$cxx" "${flags[@]}" "$root/tests/fuzz/gguf_seeds.cpp" -o "$out/gguf_seeds"

models=("$root"/tests/fixtures/models/*.gguf)
"$out/gguf_seeds" "$corpus" "${models[@]}"
for m in "${models[@]}"; do
  head -c 40960 "$m" > "$corpus/prefix40k-$(basename "$m")"
done
echo "corpus: $(ls "$corpus" | wc -l) inputs in $corpus"

# libFuzzer exits non-zero on a crash, leak, timeout (-timeout s per input) or RSS over the limit.
"$out/gguf_reader_fuzz" -max_len=65536 -timeout=10 -rss_limit_mb=2048 -max_total_time="$secs" \
  -artifact_prefix="$out/artifacts/" -print_final_stats=1 "$@" "$corpus"
