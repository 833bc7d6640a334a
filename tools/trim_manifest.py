#!/usr/bin/env python3
"""Copy the small fixture models into tests/fixtures/models/ and write their trimmed manifest.

The full llama.cpp fixture set (../shared/fixtures, see its README.md) is too large to ship in
the repository; the tests need only four small Q4_K_M models, one per architecture, so that
they pass on a fresh clone. This script copies them (checking each sha256 against the shared
manifest) and writes tests/fixtures/models/manifest.json: the shared manifest's entries for
those models, reduced to the fields below, plus the top-level `architectures` and `prompts`.

`file` keeps the shared manifest's value ("models/<name>.gguf"): it is relative to the
fixture root, which is tests/fixtures for this manifest and ../shared/fixtures for the full one.
Paths inside `runs` (logits files) exist only in the shared set.

Usage (from the repository root; python3 stdlib only):
    python3 tools/trim_manifest.py [--shared ../shared/fixtures] [--out tests/fixtures/models]
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

# One K-quant model per architecture, plus the only shipped F32 model (llama): F32 files of the
# other architectures are not in the shared set.
MODELS = ["llama-Q4_K_M", "qwen3-Q4_K_M", "qwen3moe-Q4_K_M", "llama4-Q4_K_M", "llama-F32"]
MODEL_FIELDS = ["file", "arch", "variant", "size_bytes", "sha256", "tensor_type_counts", "tensors",
                "tolerance_nmse", "runs"]
TOP_LEVEL = ["architectures", "prompts"]


def sha256_of(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default=os.path.join(root, "..", "shared", "fixtures"))
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures", "models"))
    args = ap.parse_args()

    with open(os.path.join(args.shared, "manifest.json"), encoding="utf-8") as f:
        full = json.load(f)

    os.makedirs(args.out, exist_ok=True)
    out = {
        "generated_by": "tools/trim_manifest.py from the shared fixture manifest; do not edit",
        "llama_cpp_commit": full["llama_cpp_commit"],
        "paths": "`file` and the `runs` logits paths are relative to the fixture root (tests/fixtures)",
    }
    for key in TOP_LEVEL:
        out[key] = full[key]
    out["models"] = {}
    for name in MODELS:
        entry = full["models"][name]
        if not entry.get("stored", False):
            sys.exit(f"{name}: not stored in the shared fixture set")
        out["models"][name] = {k: entry[k] for k in MODEL_FIELDS if k in entry}

        src = os.path.join(args.shared, entry["file"])
        dst = os.path.join(args.out, os.path.basename(entry["file"]))
        if not os.path.exists(dst) or sha256_of(dst) != entry["sha256"]:
            shutil.copyfile(src, dst)  # copyfile: the copy is writable, unlike the read-only source
        # llama.cpp's logits for every prompt (and greedy continuation where recorded), for the
        # fidelity suite on a fresh clone.
        os.makedirs(os.path.join(os.path.dirname(args.out), "logits"), exist_ok=True)
        for run in entry["runs"].values():
            for key in ("logits_file", "gen_logits_file"):
                if key in run:
                    lsrc = os.path.join(args.shared, run[key])
                    ldst = os.path.join(os.path.dirname(args.out), run[key])
                    if not os.path.exists(ldst) or os.path.getsize(ldst) != os.path.getsize(lsrc):
                        shutil.copyfile(lsrc, ldst)
        got = sha256_of(dst)
        if got != entry["sha256"] or os.path.getsize(dst) != entry["size_bytes"]:
            sys.exit(f"{dst}: sha256 {got} does not match the manifest's {entry['sha256']}")

    with open(os.path.join(args.out, "manifest.json"), "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {len(MODELS)} models and manifest.json to {args.out}")


if __name__ == "__main__":
    main()
