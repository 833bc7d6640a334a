"""Writes the trained model as an F32 GGUF v3 file with llama.cpp's tensor names and metadata keys
for the "qwen3" architecture and a byte-level BPE tokenizer (tokenizer.ggml.model "gpt2", pre
"qwen2"), so that Strata and llama.cpp load it. Quantized files are made from it by the C++ side
(see README.md in this folder).

  /usr/bin/python3 tools/demo_model/export_gguf.py --out build/demo_model   # -> strata-demo-F32.gguf

File layout (GGUF v3, little-endian): magic, version, tensor count, metadata count; metadata
(key string, value type, value); tensor infos (name, n_dims, ne[] in ggml order = the reverse of
torch's shape, type, offset); padding to general.alignment (32); tensor data, each aligned.
"""
import argparse
import json
import os
import struct
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
from model import Config  # noqa: E402

# gguf value types
U32, I32, F32, BOOL, STRING, ARRAY = 4, 5, 6, 7, 8, 9
GGML_F32 = 0
ALIGNMENT = 32

# Plain ChatML; Strata's chat/chatml.hpp and llama.cpp's built-in "chatml" render the same text
# for system/user/assistant conversations (the detection keys on <|im_start|>).
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def gguf_string(s):
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def gguf_value(vtype, v):
    if vtype == STRING:
        return gguf_string(v)
    if vtype == ARRAY:
        etype, items = v
        out = struct.pack("<IQ", etype, len(items))
        if etype == STRING:
            return out + b"".join(gguf_string(x) for x in items)
        fmt = {U32: "<I", I32: "<i", F32: "<f"}[etype]
        return out + b"".join(struct.pack(fmt, x) for x in items)
    return struct.pack({U32: "<I", I32: "<i", F32: "<f", BOOL: "<?"}[vtype], v)


def metadata(cfg, tok, file_type=0):
    a = "qwen3"
    kv = [
        ("general.architecture", STRING, a),
        ("general.type", STRING, "model"),
        ("general.name", STRING, "strata-demo"),
        ("general.size_label", STRING, "6M"),
        ("general.license", STRING, "public-domain + GPL-2.0-or-later (GCIDE), see models/README.md"),
        ("general.file_type", U32, file_type),
        (f"{a}.block_count", U32, cfg["n_layer"]),
        (f"{a}.context_length", U32, cfg["n_ctx"]),
        (f"{a}.embedding_length", U32, cfg["n_embd"]),
        (f"{a}.feed_forward_length", U32, cfg["n_ff"]),
        (f"{a}.attention.head_count", U32, cfg["n_head"]),
        (f"{a}.attention.head_count_kv", U32, cfg["n_head_kv"]),
        (f"{a}.attention.key_length", U32, cfg["head_dim"]),
        (f"{a}.attention.value_length", U32, cfg["head_dim"]),
        (f"{a}.rope.freq_base", F32, cfg["rope_base"]),
        (f"{a}.attention.layer_norm_rms_epsilon", F32, cfg["rms_eps"]),
        ("tokenizer.ggml.model", STRING, "gpt2"),
        ("tokenizer.ggml.pre", STRING, "qwen2"),
        ("tokenizer.ggml.tokens", ARRAY, (STRING, tok.tokens)),
        # 1 = normal, 3 = control (matched in raw text as special tokens, never printed)
        ("tokenizer.ggml.token_type", ARRAY, (I32, [3 if t in bpe.SPECIALS else 1 for t in tok.tokens])),
        ("tokenizer.ggml.merges", ARRAY, (STRING, [f"{l} {r}" for l, r in tok.merges])),
        ("tokenizer.ggml.eos_token_id", U32, tok.special_id("<|im_end|>")),
        ("tokenizer.ggml.bos_token_id", U32, tok.special_id("<|endoftext|>")),
        ("tokenizer.ggml.padding_token_id", U32, tok.special_id("<|endoftext|>")),
        ("tokenizer.ggml.add_bos_token", BOOL, False),
        ("tokenizer.chat_template", STRING, CHAT_TEMPLATE),
    ]
    return kv


def tensors(cfg, sd):
    """(gguf name, float32 array in torch layout) in llama.cpp's order."""
    out = [("token_embd.weight", sd["tok_embd.weight"])]
    names = {"attn_norm": "attn_norm.weight", "attn_q": "wq.weight", "attn_k": "wk.weight",
             "attn_v": "wv.weight", "attn_output": "wo.weight", "attn_q_norm": "q_norm.weight",
             "attn_k_norm": "k_norm.weight", "ffn_norm": "ffn_norm.weight", "ffn_gate": "w_gate.weight",
             "ffn_up": "w_up.weight", "ffn_down": "w_down.weight"}
    for i in range(cfg["n_layer"]):
        for g, t in names.items():
            out.append((f"blk.{i}.{g}.weight", sd[f"blocks.{i}.{t}"]))
    out.append(("output_norm.weight", sd["output_norm.weight"]))
    return [(n, np.ascontiguousarray(t.detach().float().numpy(), dtype="<f4")) for n, t in out]


def write_gguf(path, kv, ts):
    head = b"GGUF" + struct.pack("<IQQ", 3, len(ts), len(kv))
    for key, vtype, v in kv:
        head += gguf_string(key) + struct.pack("<I", vtype) + gguf_value(vtype, v)
    offset = 0
    for name, a in ts:
        ne = list(reversed(a.shape))
        head += gguf_string(name) + struct.pack("<I", len(ne)) + struct.pack(f"<{len(ne)}Q", *ne)
        head += struct.pack("<IQ", GGML_F32, offset)
        offset += (a.nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
    head += b"\0" * (-len(head) % ALIGNMENT)
    with open(path + ".tmp", "wb") as f:
        f.write(head)
        for _, a in ts:
            f.write(a.tobytes())
            f.write(b"\0" * (-a.nbytes % ALIGNMENT))
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/demo_model", help="the training output folder")
    ap.add_argument("--weights", help="model.pt (default) or a checkpoint (ckpt.pt) of --out")
    args = ap.parse_args()
    st = torch.load(args.weights or os.path.join(args.out, "model.pt"))
    tok = bpe.Tokenizer(json.load(open(os.path.join(args.out, "tokenizer.json")))["merges"])
    cfg = st.get("config") or Config(n_vocab=len(tok.tokens)).to_dict()  # checkpoints: the recipe's config
    if len(tok.tokens) != cfg["n_vocab"]:
        raise SystemExit(f"tokenizer has {len(tok.tokens)} tokens, the model {cfg['n_vocab']}")
    path = os.path.join(args.out, "strata-demo-F32.gguf")
    write_gguf(path, metadata(cfg, tok), tensors(cfg, st["model"]))
    print(f"wrote {path} ({os.path.getsize(path) / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
