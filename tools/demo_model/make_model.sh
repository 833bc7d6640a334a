#!/usr/bin/env bash
# The whole demo-model recipe: corpus -> tokenizer -> training -> F32 GGUF -> Q8_0 and Q4_K_M.
#   tools/demo_model/make_model.sh [OUT]          # OUT defaults to build/demo_model
#   tools/demo_model/make_model.sh OUT --install  # also copy the Q8_0 model and the held-out split into models/
# Needs the Debian packages of deps.txt (tools/demo_model/install-deps.sh) and a C++20 compiler.
# Training is resumable: rerunning picks up OUT/ckpt.pt.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-build/demo_model}
mkdir -p "$out"
nice -n 10 /usr/bin/python3 tools/demo_model/train.py --out "$out" 2>&1 | tee -a "$out/train.out"
/usr/bin/python3 tools/demo_model/export_gguf.py --out "$out"
c++ -std=c++20 -O2 -ffp-contract=off -Iinclude -Iapps/mkmodel tools/demo_model/quantize.cpp \
  apps/mkmodel/requantize.cpp -o "$out/quantize"
"$out/quantize" "$out/strata-demo-F32.gguf" "$out/strata-demo.gguf" Q8_0
"$out/quantize" "$out/strata-demo.gguf" "$out/strata-demo-Q4_K_M.gguf" Q4_K_M  # as the tests derive it
cp "$out/corpus/heldout.txt" "$out/heldout.txt"
if [ "${2:-}" = "--install" ]; then
  cp "$out/strata-demo.gguf" models/
  cp "$out/corpus/heldout.txt" models/strata-demo-heldout.txt
fi
echo "held-out perplexity (recipe, F32): $(python3 -c "import json;print(json.load(open('$out/metrics.json'))['heldout_perplexity'])")"
