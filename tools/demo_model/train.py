"""Trains the strata-demo model (Qwen3 architecture, see model.py) on the corpus of corpus.py with
the tokenizer of bpe.py. Deterministic: one seed drives the corpus sampling, the initial weights
and the batch order; torch runs with deterministic algorithms on a fixed number of threads.

  /usr/bin/python3 tools/demo_model/train.py --out build/demo_model     # ~40 min on 2 shared cores (1.3 s/step)

Writes to --out: corpus/heldout.txt, tokenizer.json, train.log (one JSON line per logged step),
ckpt.pt (every --ckpt-every steps; a rerun resumes from it), model.pt (final weights),
metrics.json (held-out perplexity, timings, versions).
"""
import argparse
import json
import math
import os

# OpenMP threads that spin while waiting are 6-8x slower on a shared machine (measured: 25-33 s vs
# 4 s per step of 2048 tokens with 2 threads at load 15); must be set before torch loads.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import platform
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bpe  # noqa: E402
import corpus  # noqa: E402
from model import Config, Qwen3  # noqa: E402


def log(msg):
    print(time.strftime("%H:%M:%S"), msg, flush=True)


def prepare(out, args):
    """Corpus, tokenizer and token stream; cached in `out` (each is deterministic)."""
    os.makedirs(os.path.join(out, "corpus"), exist_ok=True)
    tok_path = os.path.join(out, "tokenizer.json")
    need = args.data_offset + args.train_tokens
    stream_path = os.path.join(out, "corpus", f"train_tokens_{need}.npy")
    stats_path = os.path.join(out, "corpus", "stats.json")
    if os.path.exists(stream_path):
        tok = bpe.Tokenizer(json.load(open(tok_path))["merges"])
        return tok, np.load(stream_path)[args.data_offset:], json.load(open(stats_path))
    log("building the corpus")
    docs, heldout, stats = corpus.build(args.seed)
    open(os.path.join(out, "corpus", "heldout.txt"), "w").write(heldout)
    log(f"corpus: {json.dumps(stats)}")
    if os.path.exists(tok_path):
        merges = json.load(open(tok_path))["merges"]
    else:
        log("training the tokenizer")
        merges = bpe.train(docs, args.vocab, log=log)
        json.dump({"merges": merges, "specials": bpe.SPECIALS}, open(tok_path, "w"))
    tok = bpe.Tokenizer(merges)
    log("encoding")
    eot = tok.special_id("<|endoftext|>")
    # docs are in seeded random order: a budget under one pass takes a uniform sample; a larger one
    # goes on with further passes, each over all documents in its own seeded order.
    ids, n_docs, epoch, encoded = [], 0, 0, {}
    while len(ids) < need:
        if epoch >= args.max_epochs:
            raise SystemExit(f"--data-offset + --train-tokens ask for {need} tokens, more than "
                             f"--max-epochs {args.max_epochs} passes over the corpus ({len(ids)} tokens)")
        order = range(len(docs)) if epoch == 0 else np.random.default_rng(args.seed + epoch).permutation(len(docs))
        for i in order:
            if i not in encoded:
                encoded[i] = tok.encode(docs[i]) + [eot]
            ids.extend(encoded[i])
            n_docs += 1
            if len(ids) >= need:
                break
        epoch += 1
    stream = np.array(ids[:need], dtype=np.int32)
    stats.update(train_documents_used=n_docs, train_epochs=round(n_docs / len(docs), 3),
                 train_tokens=int(len(stream)),
                 corpus_bytes=sum(map(len, docs)), heldout_bytes=len(heldout))
    json.dump(stats, open(stats_path, "w"), indent=1)
    np.save(stream_path, stream)
    return tok, stream[args.data_offset:], stats


def lr_at(step, total, peak, warmup):
    if step < warmup:
        return peak * (step + 1) / warmup
    t = (step - warmup) / max(1, total - warmup)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


@torch.no_grad()
def perplexity(model, tokens, n_ctx):
    """llama-perplexity's measure: the text is cut into n_ctx-token chunks (the tail shorter than
    a chunk is dropped; no BOS, as add_bos is false); in each, the logits of positions
    n_ctx/2 .. n_ctx-2 are scored against the next token. Returns (ppl, n_chunks, n_scored)."""
    n_chunk = len(tokens) // n_ctx
    first = n_ctx // 2
    nll, count = 0.0, 0
    for c in range(n_chunk):
        x = torch.tensor(tokens[c * n_ctx:(c + 1) * n_ctx], dtype=torch.long)[None]
        logp = torch.log_softmax(model(x)[0].double(), dim=-1)
        tgt = x[0, first + 1:]
        nll -= logp[first:n_ctx - 1].gather(1, tgt[:, None]).sum().item()
        count += n_ctx - first - 1
    return math.exp(nll / count), n_chunk, count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="build/demo_model")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--train-tokens", type=int, default=7_372_800,
                    help="token budget: 1799 steps of 16 x 256 tokens, 1.36 passes over the corpus")
    ap.add_argument("--max-epochs", type=int, default=4, help="refuse a budget of more passes over the corpus")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=30)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--ckpt-every", type=int, default=50)
    ap.add_argument("--no-bf16", action="store_true", help="fp32 matmuls (bf16 autocast is 1.6x faster on AVX512-BF16)")
    ap.add_argument("--init", help="start from these weights (a model.pt) instead of a random init")
    ap.add_argument("--data-offset", type=int, default=0, help="skip this many tokens of the sampled stream")
    ap.add_argument("--max-steps", type=int, default=0, help="stop early (timing runs)")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True)
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    out = args.out
    tok, stream, stats = prepare(out, args)
    cfg = Config(n_vocab=len(tok.tokens))

    # Windows of n_ctx + 1 tokens (stride n_ctx) in a seeded order: one pass over the token budget.
    n_win = (len(stream) - 1) // cfg.n_ctx
    order = np.random.default_rng(args.seed).permutation(n_win)
    steps = n_win // args.batch
    model = Qwen3(cfg)
    if args.init:
        model.load_state_dict(torch.load(args.init)["model"])
    decay = [p for n, p in model.named_parameters() if p.dim() == 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    start, elapsed = 0, 0.0
    ckpt = os.path.join(out, "ckpt.pt")
    if os.path.exists(ckpt):
        st = torch.load(ckpt)
        model.load_state_dict(st["model"])
        opt.load_state_dict(st["opt"])
        start, elapsed = st["step"], st["elapsed"]
        log(f"resumed at step {start}")
    log(f"model: {cfg.to_dict()} params {model.n_params()} | {steps} steps of {args.batch}x{cfg.n_ctx} tokens")
    logf = open(os.path.join(out, "train.log"), "a")
    t_last, cpu_last, last_logged = time.time(), time.process_time(), start
    for step in range(start, steps):
        idx = order[step * args.batch:(step + 1) * args.batch]
        batch = torch.from_numpy(np.stack([stream[i * cfg.n_ctx:i * cfg.n_ctx + cfg.n_ctx + 1] for i in idx])).long()
        for g in opt.param_groups:
            g["lr"] = lr_at(step, steps, args.lr, args.warmup)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=not args.no_bf16):
            logits = model(batch[:, :-1])
        loss = F.cross_entropy(logits.float().reshape(-1, cfg.n_vocab), batch[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0).item()
        opt.step()
        if step % 10 == 0 or step == steps - 1:
            now, cpu = time.time(), time.process_time()
            n = max(1, step - last_logged) if step > start else 1
            rec = {"step": step, "loss": round(loss.item(), 4), "lr": round(opt.param_groups[0]["lr"], 6),
                   "gnorm": round(gnorm, 3), "wall_s_per_step": round((now - t_last) / n, 3),
                   "cpu_s_per_step": round((cpu - cpu_last) / n, 3), "elapsed_s": round(elapsed + now - t_last, 1)}
            elapsed += now - t_last
            t_last, cpu_last, last_logged = now, cpu, step
            logf.write(json.dumps(rec) + "\n")
            logf.flush()
            log(json.dumps(rec))
        if (step + 1) % args.ckpt_every == 0 or step == steps - 1:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step + 1,
                        "elapsed": elapsed + time.time() - t_last}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
        if args.max_steps and step + 1 - start >= args.max_steps:
            log("stopping (--max-steps)")
            return

    model.eval()
    torch.save({"config": cfg.to_dict(), "model": model.state_dict()}, os.path.join(out, "model.pt"))
    held = tok.encode(open(os.path.join(out, "corpus", "heldout.txt")).read())
    ppl, n_chunk, n_scored = perplexity(model, held, cfg.n_ctx)
    metrics = {"heldout_perplexity": round(ppl, 4), "heldout_tokens": len(held), "ppl_chunks": n_chunk,
               "ppl_scored_tokens": n_scored, "n_ctx": cfg.n_ctx, "steps": steps, "batch": args.batch,
               "train_tokens": int(steps * args.batch * cfg.n_ctx), "params": model.n_params(),
               "train_wall_s": round(elapsed, 1), "seed": args.seed, "lr": args.lr,
               "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
               "init": args.init, "data_offset": args.data_offset, "threads": args.threads, "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"), "bf16_autocast": not args.no_bf16,
               "blas": os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3"), "corpus": stats}
    json.dump(metrics, open(os.path.join(out, "metrics.json"), "w"), indent=1)
    log(f"held-out perplexity {ppl:.4f} over {n_scored} tokens ({n_chunk} chunks of {cfg.n_ctx})")


if __name__ == "__main__":
    main()
