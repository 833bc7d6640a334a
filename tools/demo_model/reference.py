"""Independent float64 reference for the demo model's logits: reads a GGUF (F32, Q8_0, Q4_K, Q6_K
tensors), dequantizes with numpy (ggml's dequantize_row_* formulas), runs model.py's Qwen3 in
float64 and compares with logits computed elsewhere (llama.cpp, Strata). Used to derive the
tolerances of tests/fixtures/demo (README there) the way ../shared/fixtures derives tolerance_nmse.

  /usr/bin/python3 tools/demo_model/reference.py MODEL.gguf IDS_FILE [LOGITS.f32 ...]
    -> prints, for each LOGITS file, NMSE against the float64 reference and top-1 agreement
"""
import struct
import sys
import os

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from model import Config, Qwen3  # noqa: E402

SCALAR = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


class Reader:
    def __init__(self, path):
        self.b = open(path, "rb").read()
        self.p = 0
        if self.b[:4] != b"GGUF":
            raise SystemExit(f"{path}: not a GGUF file")
        self.p = 4
        _, n_t, n_kv = self.u("<IQQ")
        self.kv = {}
        for _ in range(n_kv):
            k = self.s()
            (t,) = self.u("<I")
            self.kv[k] = self.value(t)
        self.tensors = []
        for _ in range(n_t):
            name = self.s()
            (nd,) = self.u("<I")
            ne = self.u(f"<{nd}Q")
            t, off = self.u("<IQ")
            self.tensors.append((name, ne, t, off))
        align = self.kv.get("general.alignment", 32)
        self.data = self.p + (-self.p % align)

    def u(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)
        self.p += struct.calcsize(fmt)
        return v

    def s(self):
        (n,) = self.u("<Q")
        v = self.b[self.p:self.p + n].decode("utf-8")
        self.p += n
        return v

    def value(self, t):
        if t == 8:
            return self.s()
        if t == 9:
            et, n = self.u("<IQ")
            return [self.value(et) for _ in range(n)]
        return self.u(SCALAR[t])[0]


def f16(b):
    return np.frombuffer(b, dtype="<f2").astype(np.float64)


def dequant(t, raw, n):
    if t == 0:  # F32
        return np.frombuffer(raw, dtype="<f4", count=n).astype(np.float64)
    if t == 8:  # Q8_0: 32 x int8 * fp16 d
        blk = np.frombuffer(raw, dtype=np.uint8, count=n // 32 * 34).reshape(-1, 34)
        d = f16(blk[:, :2].tobytes())[:, None]
        return (d * blk[:, 2:].view(np.int8)).reshape(-1)
    if t == 12:  # Q4_K: d, dmin, 12 bytes of 6-bit scales/mins, 128 bytes of nibbles
        blk = np.frombuffer(raw, dtype=np.uint8, count=n // 256 * 144).reshape(-1, 144)
        d, dmin = f16(blk[:, 0:2].tobytes()), f16(blk[:, 2:4].tobytes())
        sc, qs = blk[:, 4:16].astype(np.int64), blk[:, 16:]
        out = np.empty((blk.shape[0], 256))
        for j in range(8):
            if j < 4:
                s, m = sc[:, j] & 63, sc[:, j + 4] & 63
            else:
                s = (sc[:, j + 4] & 0xF) | ((sc[:, j - 4] >> 6) << 4)
                m = (sc[:, j + 4] >> 4) | ((sc[:, j] >> 6) << 4)
            q = qs[:, (j // 2) * 32:(j // 2) * 32 + 32]
            q = (q & 0xF) if j % 2 == 0 else (q >> 4)
            out[:, j * 32:(j + 1) * 32] = (d * s)[:, None] * q - (dmin * m)[:, None]
        return out.reshape(-1)
    if t == 14:  # Q6_K: ql[128], qh[64], int8 scales[16], d
        blk = np.frombuffer(raw, dtype=np.uint8, count=n // 256 * 210).reshape(-1, 210)
        ql, qh = blk[:, :128].astype(np.int64), blk[:, 128:192].astype(np.int64)
        sc = blk[:, 192:208].view(np.int8).astype(np.float64)
        d = f16(blk[:, 208:210].tobytes())[:, None]
        out = np.empty((blk.shape[0], 256))
        for h in range(2):
            L, H, S = ql[:, h * 64:h * 64 + 64], qh[:, h * 32:h * 32 + 32], sc[:, h * 8:h * 8 + 8]
            q1 = (L[:, :32] & 0xF) | (((H >> 0) & 3) << 4)
            q2 = (L[:, 32:] & 0xF) | (((H >> 2) & 3) << 4)
            q3 = (L[:, :32] >> 4) | (((H >> 4) & 3) << 4)
            q4 = (L[:, 32:] >> 4) | (((H >> 6) & 3) << 4)
            for k, q in enumerate((q1, q2, q3, q4)):
                s = np.repeat(S[:, 2 * k:2 * k + 2], 16, axis=1)  # is = l / 16, + 2k
                out[:, h * 128 + k * 32:h * 128 + k * 32 + 32] = d * s * (q - 32)
        return out.reshape(-1)
    raise SystemExit(f"reference.py: tensor type {t} not supported")


def load(path):
    r = Reader(path)
    a = r.kv["general.architecture"]
    kv = r.kv
    cfg = Config(n_vocab=len(kv["tokenizer.ggml.tokens"]), n_ctx=kv[f"{a}.context_length"],
                 n_embd=kv[f"{a}.embedding_length"], n_layer=kv[f"{a}.block_count"],
                 n_head=kv[f"{a}.attention.head_count"], n_head_kv=kv[f"{a}.attention.head_count_kv"],
                 head_dim=kv[f"{a}.attention.key_length"], n_ff=kv[f"{a}.feed_forward_length"],
                 rope_base=kv[f"{a}.rope.freq_base"], rms_eps=kv[f"{a}.attention.layer_norm_rms_epsilon"])
    names = {"attn_norm": "attn_norm.weight", "attn_q": "wq.weight", "attn_k": "wk.weight",
             "attn_v": "wv.weight", "attn_output": "wo.weight", "attn_q_norm": "q_norm.weight",
             "attn_k_norm": "k_norm.weight", "ffn_norm": "ffn_norm.weight", "ffn_gate": "w_gate.weight",
             "ffn_up": "w_up.weight", "ffn_down": "w_down.weight"}
    sd = {}
    for name, ne, t, off in r.tensors:
        n = int(np.prod(ne))
        w = dequant(t, r.b[r.data + off:], n).reshape(tuple(reversed(ne)))
        if name == "token_embd.weight":
            key = "tok_embd.weight"
        elif name == "output_norm.weight":
            key = "output_norm.weight"
        else:
            _, i, g, _ = name.split(".")
            key = f"blocks.{i}.{names[g]}"
        sd[key] = torch.from_numpy(np.ascontiguousarray(w))
    m = Qwen3(cfg).double()
    m.load_state_dict(sd)
    half = cfg.head_dim // 2  # RoPE tables kept in float64 (model.py rounds them to float32)
    ang = torch.arange(cfg.n_ctx, dtype=torch.float64)[:, None] * \
        cfg.rope_base ** (-torch.arange(half, dtype=torch.float64) * 2.0 / cfg.head_dim)[None, :]
    m.cos, m.sin = torch.cos(ang), torch.sin(ang)
    return m.eval(), cfg


def nmse(a, ref):
    return float(((a - ref) ** 2).sum() / (ref ** 2).sum())


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    m, cfg = load(sys.argv[1])
    ids = [int(x) for x in open(sys.argv[2]).read().strip().split(",")]
    with torch.no_grad():
        ref = m(torch.tensor([ids]))[0].numpy()
    for path in sys.argv[3:]:
        got = np.fromfile(path, dtype="<f4").astype(np.float64).reshape(len(ids), cfg.n_vocab)
        top1 = int((got.argmax(1) == ref.argmax(1)).sum())
        print(f"{path}: nmse vs float64 reference {nmse(got, ref):.3e}, top1 {top1}/{len(ids)}")


if __name__ == "__main__":
    main()
