#!/usr/bin/env bash
# There (the H100 device machine, bare Ubuntu with the NVIDIA driver, CUDA in /usr/local/cuda):
# runs the side-by-side of issues 12-14 from the bundle bench/device/bundle.sh made. Each part
# fits one device call (10 minutes at most); calls must follow each other while the machine is
# warm (it keeps /tmp between calls only then). Results go to $OUT (default /tmp/out).
#   bench/device/device.sh setup     loader, llama.cpp CUDA build started in the background
#                                    (setsid: it outlives the call), models generated
#   bench/device/device.sh lcpp      setup without the models (tiers makes its own)
#   bench/device/device.sh strata    Strata's rows: tg, depth, KV types, pp, batched, profile
#   bench/device/device.sh serve     strata-serve --parallel 64 under serve_load.py's 64 clients,
#                                    beside batched_bench -npl 64 (issue 13's serving target)
#   bench/device/device.sh copies    prompt steps with the f16 weight copies (the default) beside
#                                    --f16-weights off: pp512 / pp4096 of the 8B files, the 30B's pp512
#   bench/device/device.sh tails     decode with the STRATA_VK_TAIL fusions off/on, same run
#                                    (session 7: the tails lose 9-19%; they stay off)
#   bench/device/device.sh llama     waits for the llama.cpp build, then llama-bench and
#                                    llama-batched-bench on the same files
#   bench/device/device.sh tiers     issue 14 at --gpu-budget 12G on qwen3-30b-a3b (uniform and
#                                    skewed routers): Strata --fit, --fit --no-expert-cache
#   bench/device/device.sh tiers-llama  llama.cpp's best fitting 12 GiB configuration (-ncmoe 19)
#                                    on the same files (VRAM of both in $OUT/vram.csv)
#   bench/device/device.sh scout     issue 14 on Llama 4 Scout Q4_K_M (65.35 GB) at 24G and 12G:
#                                    Strata --fit and --fit --no-expert-cache; SCOUT_ROUTER=uniform|
#                                    skewed picks the file (one at a time: the disk holds one)
#   bench/device/device.sh scout-file   the Scout file only (beside the llama.cpp build)
#   bench/device/device.sh scout-llama  llama.cpp -ncmoe 34 (24G) and 44 (12G) on the same file
#   bench/device/device.sh dense70   issue 14 on Llama 3.1 70B Q4_K_M (42.5 GB) at 24G and 12G:
#                                    Strata --fit (link beside the CPU) and --fit --stream-link 0
#   bench/device/device.sh dense70-file   the 70B file only (beside the llama.cpp build)
#   bench/device/device.sh dense70-llama  llama.cpp -ngl 47, 45 (24G) and 19 (12G) on the same file
#   bench/device/device.sh lcpp-wait waits for the llama.cpp build, then drops its object files
#   bench/device/device.sh tests     vulkan_tests and runtime_tests' Vulkan cases on the H100
#   bench/device/device.sh clocks    log the GPU's clocks and power to $OUT/smi.csv meanwhile
# Parts may be combined: `device.sh clocks setup strata`.
set -uo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
B=/tmp/strata-bin/bin
M=/tmp/models
LC=/tmp/lc
export LD_LIBRARY_PATH=/tmp/strata-bin/lib:${LD_LIBRARY_PATH:-}
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
export STRATA_CACHE_DIR=/tmp/strata-cache

log() { echo "== [$(date +%T)] $*" | tee -a "$OUT/device.log"; }
run() { log "$*"; "$@" 2>&1 | tee -a "$OUT/device.log"; }

loader() {
  # A warm machine keeps /tmp: unpack again when this call carries another bundle, or a later
  # call of the session would run the binaries of an earlier one.
  local sum
  sum=$(md5sum .devbin/strata-bin.tar.xz | cut -d' ' -f1)
  [ "$(cat /tmp/.loader-done 2>/dev/null)" = "$sum" ] && return
  for f in .gl/*.deb; do dpkg -x "$f" /; done
  ldconfig
  rm -rf /tmp/strata-bin && mkdir -p /tmp/strata-bin && tar -C /tmp/strata-bin -xJf .devbin/strata-bin.tar.xz
  echo "$sum" > /tmp/.loader-done
}

# SM clock, memory clock, power and load every 250 ms into $OUT/smi.csv, in the background for
# the rest of the call. An H200 left idle for a few seconds (a large model's upload) drops to
# 345-810 MHz and needs a moment to come back: read a row's numbers beside the clocks it ran at.
# The logger runs until the call ends: a script that calls clocks must wait on its own jobs' pids
# (a bare `wait` waits for the logger too, i.e. until the call's time limit).
clocks() {
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,utilization.gpu --format=csv -lms 250 \
    >> "$OUT/smi.csv" 2>&1 &
}

models() {
  mkdir -p "$M"
  local spec
  for spec in qwen3-8b:Q4_K_M llama-3.1-8b:Q4_K_M qwen3-8b:Q8_0 qwen3-30b-a3b:Q4_K_M; do
    local f=$M/${spec%%:*}-${spec##*:}.gguf
    [ -s "$f" ] || run "$B/strata-mkmodel" --preset "${spec%%:*}" --type "${spec##*:}" -o "$f"
  done
}

setup() {
  lcpp
  models
}

# The loader and, when the bundle has llama.cpp's source, its CUDA build started in the background.
lcpp() {
  loader
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.max.sm --format=csv | tee -a "$OUT/device.log"
  if [ -f .devbin/llama.cpp.tar.xz ] && [ ! -d "$LC" ]; then
    mkdir -p "$LC" && tar -C "$LC" -xJf .devbin/llama.cpp.tar.xz
    # All cores but two: those two are left to Strata's model generation beside it.
    # Ninja where the host has it (the H200 hosts of session 8 did not: Makefiles there).
    local gen=""
    command -v ninja > /dev/null && gen="-G Ninja"
    setsid bash -c "cd $LC && cmake -S . -B build $gen -DCMAKE_BUILD_TYPE=Release -DGGML_CUDA=ON \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc -DCMAKE_CUDA_ARCHITECTURES=90 -DLLAMA_BUILD_APP=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_CURL=OFF \
      -DLLAMA_OPENSSL=OFF > /tmp/lc-cfg.log 2>&1 && cmake --build build -j$(( $(nproc) - 2 )) --target llama-bench \
      llama-batched-bench > /tmp/lc-build.log 2>&1; echo \$? > /tmp/lc-build.rc" < /dev/null > /dev/null 2>&1 &
    log "llama.cpp CUDA build started in the background (/tmp/lc-build.log)"
  fi
}

# Waits up to $1 seconds for the background llama.cpp build (lcpp); false, with its log's tail,
# where it failed or is still running.
lcpp_built() {
  local i
  for i in $(seq 1 $(( $1 / 5 ))); do [ -f /tmp/lc-build.rc ] && break; sleep 5; done
  [ "$(cat /tmp/lc-build.rc 2>/dev/null)" = 0 ] && return 0
  log "llama.cpp build not done/failed"
  tail -20 /tmp/lc-build.log
  return 1
}

strata() {
  loader
  local q8=$M/qwen3-8b-Q4_K_M.gguf
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 512,4096 -n 128 -r 3 --probe
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 0 -n 64 -d 4096 -r 3
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 0 -n 64 -d 4096 -r 3 --kv-type tq3
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 0 -n 64 -d 4096 -r 3 --kv-type q8_0
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 0 -n 32 -d 32768 -r 1
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 0 -n 32 -d 32768 -r 1 --kv-type tq3
  run "$B/strata-bench" -m "$M/llama-3.1-8b-Q4_K_M.gguf" --backend vulkan --argmax -p 512,4096 -n 128 -r 3
  run "$B/strata-bench" -m "$M/qwen3-8b-Q8_0.gguf" --backend vulkan --argmax -p 512 -n 128 -r 3
  run "$B/strata-bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" --backend vulkan --argmax -p 512 -n 128 -r 3
  run "$B/batched_bench" -m "$q8" --backend vulkan -npp 128 -ntg 64 -npl 1,8,16,32,64
  run "$B/batched_bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" --backend vulkan -npp 128 -ntg 64 -npl 1,8,16,32,64
  run "$B/strata-bench" -m "$q8" --backend vulkan --argmax -p 0 -n 32 -r 1 --profile
  run "$B/strata-bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" --backend vulkan --argmax -p 0 -n 32 -r 1 --profile
}

# The f16 weight copies' rows (session 66: pp512 +11%): each prompt row with the copies (the
# default, auto) and without, alternated, on the same files.
copies() {
  loader
  local m v
  for m in qwen3-8b-Q4_K_M llama-3.1-8b-Q4_K_M; do
    for v in auto off auto off; do
      run "$B/strata-bench" -m "$M/$m.gguf" --backend vulkan --argmax -p 512,4096 -n 0 -r 3 --f16-weights "$v"
    done
  done
  for v in auto off; do
    run "$B/strata-bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" --backend vulkan --argmax -p 512 -n 0 -r 3 --f16-weights "$v"
  done
}

tails() {
  loader
  local m
  for m in qwen3-8b-Q4_K_M qwen3-30b-a3b-Q4_K_M; do
    for t in 0 1 4 8; do
      log "STRATA_VK_TAIL=$t"
      STRATA_VK_TAIL=$t run "$B/strata-bench" -m "$M/$m.gguf" --backend vulkan --argmax -p 0 -n 128 -r 3
    done
  done
  STRATA_VK_TAIL=1 run "$B/strata-bench" -m "$M/qwen3-8b-Q4_K_M.gguf" --backend vulkan --argmax -p 0 -n 64 -d 4096 -r 3
}

llama() {
  lcpp_built 300 || return 1
  local L=$LC/build/bin q8=$M/qwen3-8b-Q4_K_M.gguf
  run "$L/llama-bench" -m "$q8" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3
  run "$L/llama-bench" -m "$q8" -ngl 99 -fa 1 -p 0 -n 64 -d 4096 -r 3
  run "$L/llama-bench" -m "$q8" -ngl 99 -fa 1 -p 0 -n 64 -d 4096 -r 3 -ctk q4_0 -ctv q4_0
  run "$L/llama-bench" -m "$M/llama-3.1-8b-Q4_K_M.gguf" -ngl 99 -fa 1 -p 512,4096 -n 128 -r 3
  run "$L/llama-bench" -m "$M/qwen3-8b-Q8_0.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 3
  run "$L/llama-bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" -ngl 99 -fa 1 -p 512 -n 128 -r 3
  run "$L/llama-batched-bench" -m "$q8" -ngl 99 -fa 1 -c 16384 -npp 128 -ntg 64 -npl 1,8,16,32,64
  run "$L/llama-batched-bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" -ngl 99 -fa 1 -c 16384 -npp 128 -ntg 64 -npl 1,8,16,32,64
}

# Issue 13's serving target: strata-serve --parallel 64 under 64 streaming clients (prompt 128, 64
# new tokens, new requests arriving as old ones end) beside batched_bench's aggregate for the same
# shape; needs strata-serve in the bundle (BUNDLE_BINS, README) and python3 on the host.
serve() {
  loader
  local q8=$M/qwen3-8b-Q4_K_M.gguf
  run python3 bench/serve/serve_load.py --serve "$B/strata-serve" --model "$q8" --clients 64 --prompt 128 \
    --gen 64 --seconds 20 --warmup 8 --json "$OUT/serve_load.json" -- --backend vulkan
  run "$B/batched_bench" -m "$q8" --backend vulkan -npp 128 -ntg 64 -npl 64 -r 2
}

# GPU memory in use every 200 ms into $OUT/vram.csv (the log's timestamps say which run a peak
# belongs to); in the background for the rest of the call.
vram() {
  nvidia-smi -i 0 --query-gpu=timestamp,memory.used --format=csv,noheader -lms 200 >> "$OUT/vram.csv" 2>&1 &
}

# qwen3-30b-a3b with mkmodel's random router (near-uniform: the cache's worst case) and with the
# published routing skew (--router skewed).
tier_models() {
  mkdir -p "$M"
  local u=$M/qwen3-30b-a3b-Q4_K_M.gguf s=$M/qwen3-30b-a3b-Q4_K_M-skewed.gguf
  [ -s "$u" ] || run "$B/strata-mkmodel" --preset qwen3-30b-a3b --type Q4_K_M -o "$u"
  [ -s "$s" ] || run "$B/strata-mkmodel" --preset qwen3-30b-a3b --type Q4_K_M --router skewed -o "$s"
}

tiers() {
  loader
  vram
  tier_models
  # The links probed once (cached in $STRATA_CACHE_DIR): the benches' predicted column then uses
  # this host's numbers, not the assumed desktop links.
  run "$B/strata-run" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" --plan --probe --gpu-budget 12G --fit
  local f
  for f in qwen3-30b-a3b-Q4_K_M qwen3-30b-a3b-Q4_K_M-skewed; do
    run "$B/strata-bench" -m "$M/$f.gguf" --backend vulkan --argmax --gpu-budget 12G --fit -t 16 -p 512 -n 64 -r 3
  done
  run "$B/strata-bench" -m "$M/qwen3-30b-a3b-Q4_K_M.gguf" --backend vulkan --argmax --gpu-budget 12G --fit \
    --no-expert-cache -t 16 -p 512 -n 64 -r 3
}

tiers-llama() {
  vram
  lcpp_built 300 || return 1
  local f
  # -ncmoe 19: the fewest CPU-expert blocks that fit 12 GiB (11,657 MiB, sessions 19-23).
  for f in qwen3-30b-a3b-Q4_K_M qwen3-30b-a3b-Q4_K_M-skewed; do
    run "$LC/build/bin/llama-bench" -m "$M/$f.gguf" -ngl 99 -fa 1 -ncmoe 19 -t 16 -p 512 -n 64 -r 3
  done
}

# Llama 4 Scout: one router's file at a time (65.35 GB; the other's is deleted first), generated
# here. On a host with several GPUs both engines use GPU 0 only.
scout_model() {
  local r=${SCOUT_ROUTER:-uniform} o
  SCOUT=$M/llama4-scout-Q4_K_M-$r.gguf
  mkdir -p "$M"
  for o in "$M"/llama4-scout-*.gguf; do [ "$o" = "$SCOUT" ] || rm -f "$o"; done
  rm -f "$M"/llama-3.1-70b-*.gguf  # the disk holds one big model
  rm -f "$SCOUT.part"  # a generation cut short by a call's time limit
  [ -s "$SCOUT" ] || { run "$B/strata-mkmodel" --preset llama4-scout-17b-16e --type Q4_K_M --router "$r" -o "$SCOUT.part" &&
                       mv "$SCOUT.part" "$SCOUT"; }
  df -h "$M" | tee -a "$OUT/device.log"
}

# strata-bench on MODEL for each budget and layout: LAYOUTS is comma-separated, each the flags
# after optional VAR=VALUE switches (e.g. "STRATA_VK_CACHE_CPU_MISSES=1 --fit").
bench_layouts() {
  local model=$1 layouts_csv=$2 budgets=$3 tests=$4 threads=$5 b c w
  IFS=, read -r -a layouts <<< "$layouts_csv"
  local envs flags
  for b in $budgets; do
    for c in "${layouts[@]}"; do
      envs=() flags=()
      for w in $c; do
        if [[ $w =~ ^[A-Z_][A-Z0-9_]*= ]]; then envs+=("$w"); else flags+=("$w"); fi
      done
      # shellcheck disable=SC2086  # the tests' flags split on purpose
      run env "${envs[@]}" "$B/strata-bench" -m "$model" --backend vulkan --argmax --gpu-budget $b "${flags[@]}" -t "$threads" $tests
    done
  done
}

scout() {
  loader
  vram
  scout_model
  run "$B/strata-run" -m "$SCOUT" --plan --probe --gpu-budget 24G --fit
  # SCOUT_LAYOUTS (by default "--fit" and "--fit --no-expert-cache"), SCOUT_BUDGETS and SCOUT_TESTS narrow the runs.
  bench_layouts "$SCOUT" "${SCOUT_LAYOUTS:---fit,--fit --no-expert-cache}" "${SCOUT_BUDGETS:-24G 12G}" \
    "${SCOUT_TESTS:--p 512 -n 16 -r 2}" "${SCOUT_T:-16}"
}

# The Scout file alone (e.g. written beside the llama.cpp build: `SCOUT_ROUTER=skewed device.sh lcpp scout-file lcpp-wait`).
scout-file() {
  loader
  scout_model
}

scout-llama() {
  vram
  lcpp_built 300 || return 1
  scout_model
  local n t=${SCOUT_T:-16}
  # -ncmoe 34 / 44: the fewest CPU-expert blocks that fit 24 / 12 GiB (23,233 / 11,609 MiB, session 23).
  for n in ${SCOUT_NCMOE:-34 44}; do
    CUDA_VISIBLE_DEVICES=0 run "$LC/build/bin/llama-bench" -m "$SCOUT" -ngl 99 -fa 1 -ncmoe $n -t "$t" -p 512 -n "${SCOUT_LLAMA_N:-16}" -r 2
  done
}

# Llama 3.1 70B (issue 14's dense target; 42.5 GB, ~40 s to write): a Scout file is deleted
# first (the disk holds one of them beside llama.cpp's build without its objects).
dense70_model() {
  D70=$M/llama-3.1-70b-Q4_K_M.gguf
  mkdir -p "$M"
  rm -f "$M"/llama4-scout-*.gguf "$D70.part"
  [ -s "$D70" ] || { run "$B/strata-mkmodel" --preset llama-3.1-70b --type Q4_K_M -o "$D70.part" && mv "$D70.part" "$D70"; }
  df -h "$M" | tee -a "$OUT/device.log"
}

# The 70B file alone (e.g. written beside the llama.cpp build: `device.sh lcpp dense70-file lcpp-wait`).
dense70-file() {
  loader
  dense70_model
}

# Strata --fit (the link beside the CPU in decode, as the cost model picks) and --fit --stream-link 0
# (the CPU alone) at 24G and 12G; D70_LAYOUTS, D70_BUDGETS, D70_TESTS narrow the runs.
dense70() {
  loader
  vram
  dense70_model
  run "$B/strata-run" -m "$D70" --plan --probe --gpu-budget 24G --fit
  bench_layouts "$D70" "${D70_LAYOUTS:---fit,--fit --stream-link 0}" "${D70_BUDGETS:-24G 12G}" \
    "${D70_TESTS:--p 512 -n 16 -r 2}" "${D70_T:-16}"
}

# llama.cpp's -ngl 45 and 47 (24 GiB: 23,009 MiB at 45 in session 18, ~490 MiB a block) and 19
# (12 GiB: 11,960 MiB) on the same file.
dense70-llama() {
  vram
  lcpp_built 300 || return 1
  dense70_model
  local n
  for n in ${D70_NGL:-47 45 19}; do
    CUDA_VISIBLE_DEVICES=0 run "$LC/build/bin/llama-bench" -m "$D70" -ngl "$n" -fa 1 -t "${D70_T:-16}" -p 512 -n 16 -r 2
  done
}

# Waits for the background llama.cpp build, then deletes its object files: beside the Scout
# file a 64 GiB disk has no room for them.
lcpp-wait() {
  lcpp_built 550 || return 1
  log "llama.cpp built"
  find "$LC/build" -name '*.o' -delete
  du -sh "$LC" | tee -a "$OUT/device.log"
}

tests() {
  loader
  run "$B/vulkan_tests"
  (cd tests && run "$B/runtime_tests" -tc='*Vulkan*')
}

[ $# -ge 1 ] || { sed -n 2,32p "$0"; exit 2; }
for part in "$@"; do
  case "$part" in
    setup|lcpp|strata|copies|tails|llama|serve|tiers|tiers-llama|scout|scout-file|scout-llama|dense70|dense70-file|dense70-llama|lcpp-wait|tests|clocks) "$part" ;;
    *) echo "device.sh: unknown part '$part' (setup, lcpp, strata, copies, tails, llama, serve, tiers, tiers-llama, scout, scout-file, scout-llama, dense70, dense70-file, dense70-llama, lcpp-wait, tests, clocks)" >&2; exit 2 ;;
  esac
done
