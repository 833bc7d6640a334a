"""Qwen3 dense decoder in PyTorch, written to compute exactly what llama.cpp's and Strata's
"qwen3" graph computes (llama.cpp src/models/qwen3.cpp; include/strata/arch/qwen3.hpp):
RMSNorm (weighted), Q/K per-head weighted RMSNorm before NEOX RoPE, grouped-query causal
attention scaled by 1/sqrt(head_dim), SwiGLU FFN, tied output embedding (no output.weight).
"""
import math
from dataclasses import dataclass, asdict

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class Config:
    n_vocab: int = 4096
    n_ctx: int = 256          # training sequence length; also qwen3.context_length
    n_embd: int = 256
    n_layer: int = 6
    n_head: int = 4
    n_head_kv: int = 2
    head_dim: int = 64
    n_ff: int = 512
    rope_base: float = 10000.0
    rms_eps: float = 1e-6

    def to_dict(self):
        return asdict(self)


class RMSNorm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(n))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(cfg, n_pos):
    # NEOX: dimension i pairs with i + head_dim/2; angle = pos * base^(-2i/head_dim).
    half = cfg.head_dim // 2
    inv = cfg.rope_base ** (-torch.arange(0, half, dtype=torch.float64) * 2.0 / cfg.head_dim)
    ang = torch.arange(n_pos, dtype=torch.float64)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def apply_rope(x, cos, sin):
    # x: [B, H, T, D]; cos/sin: [T, D/2]
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        c = cfg
        self.cfg = c
        self.attn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.wq = nn.Linear(c.n_embd, c.n_head * c.head_dim, bias=False)
        self.wk = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wv = nn.Linear(c.n_embd, c.n_head_kv * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_head * c.head_dim, c.n_embd, bias=False)
        self.q_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.k_norm = RMSNorm(c.head_dim, c.rms_eps)
        self.ffn_norm = RMSNorm(c.n_embd, c.rms_eps)
        self.w_gate = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.w_up = nn.Linear(c.n_embd, c.n_ff, bias=False)
        self.w_down = nn.Linear(c.n_ff, c.n_embd, bias=False)

    def forward(self, x, cos, sin, mask):
        c = self.cfg
        B, T, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_norm(self.wq(h).view(B, T, c.n_head, c.head_dim)).transpose(1, 2)
        k = self.k_norm(self.wk(h).view(B, T, c.n_head_kv, c.head_dim)).transpose(1, 2)
        v = self.wv(h).view(B, T, c.n_head_kv, c.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        rep = c.n_head // c.n_head_kv
        k = k.repeat_interleave(rep, dim=1)
        v = v.repeat_interleave(rep, dim=1)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(c.head_dim)) + mask
        y = torch.softmax(att, dim=-1) @ v
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, c.n_head * c.head_dim))
        h = self.ffn_norm(x)
        return x + self.w_down(F.silu(self.w_gate(h)) * self.w_up(h))


class Qwen3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.tok_embd = nn.Embedding(cfg.n_vocab, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.output_norm = RMSNorm(cfg.n_embd, cfg.rms_eps)
        cos, sin = rope_tables(cfg, cfg.n_ctx)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self._init()

    def _init(self):
        # GPT-2 style: N(0, 0.02), projections into the residual stream scaled by 1/sqrt(2 L).
        for name, p in self.named_parameters():
            if p.dim() == 2:
                std = 0.02 / math.sqrt(2 * self.cfg.n_layer) if name.endswith(("wo.weight", "w_down.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)

    def n_params(self):
        return sum(p.numel() for p in self.parameters())

    def forward(self, idx):
        B, T = idx.shape
        mask = torch.full((T, T), float("-inf")).triu(1)
        x = self.tok_embd(idx)
        cos, sin = self.cos[:T], self.sin[:T]
        for b in self.blocks:
            x = b(x, cos, sin, mask)
        return self.output_norm(x) @ self.tok_embd.weight.t()   # tied output
