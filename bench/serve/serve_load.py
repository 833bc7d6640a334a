#!/usr/bin/env python3
"""Load benchmark for strata-serve (issue 13's "64 streaming clients reach >= 90% of batched_bench's
aggregate" and "p99 time between tokens <= 50 ms while new prompts keep arriving").

N clients each stream /v1/completions of a fixed prompt (random token ids, so no prefix is shared)
and a fixed number of new tokens, and send the next request as soon as one ends, for a fixed time.
Reports the aggregate generated tokens/s over the measured window (after a warm-up), time to first
token and the gaps between a stream's tokens (p50 / p99 / max), and errors. Standard library only
(asyncio), so it runs where node and aiohttp are not installed (the GPU machine).

  python3 bench/serve/serve_load.py --serve BIN --model GGUF [--clients 64] [--prompt 128] [--gen 64]
      [--seconds 30] [--warmup 5] [--ctx 16384] [--json FILE] [-- more strata-serve flags]
  python3 bench/serve/serve_load.py --url http://127.0.0.1:8080 --model-name NAME ...

With --serve it starts the server on a free port (--parallel = --clients unless given after --),
waits for /health and stops it at the end. Exit status 1 when any request failed.
"""
import argparse
import asyncio
import http.client
import json
import random
import re
import subprocess
import sys
import threading
import time
import urllib.parse


def percentile(xs, q):
    if not xs:
        return float("nan")
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * (len(s) - 1) + 0.5))]


class Stats:
    def __init__(self):
        self.requests = 0
        self.completed = 0
        self.errors = []
        self.events = []  # (time, stream id): one per streamed token chunk
        self.ttft = []    # (request start, seconds)
        self.gaps = []    # (time, seconds between a stream's consecutive chunks)
        self.usage = []   # (end time, completion tokens the server counted) per completed request


async def read_chunked_lines(reader, chunked):
    """Yields the response body's lines (bytes, without line ends), decoding chunked transfer."""
    buf = b""
    while True:
        if chunked:
            size_line = await reader.readline()
            if not size_line:
                return
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size == 0:
                await reader.readline()
                break
            data = await reader.readexactly(size)
            await reader.readexactly(2)
        else:
            data = await reader.read(65536)
            if not data:
                break
        buf += data
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            yield line.rstrip(b"\r")
    if buf:
        yield buf


async def one_request(host, port, body, stats, sid):
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection(host, port)
    try:
        payload = json.dumps(body).encode()
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n" % (host.encode(), len(payload)) + payload)
        await writer.drain()
        status = await reader.readline()
        if not status.startswith(b"HTTP/1.") or b" 200 " not in status:
            rest = await reader.read(400)
            raise RuntimeError("status %r: %r" % (status.strip(), rest[:200]))
        chunked = False
        while True:
            h = await reader.readline()
            if h in (b"\r\n", b"\n", b""):
                break
            k, _, v = h.decode("latin-1").partition(":")
            if k.strip().lower() == "transfer-encoding" and "chunked" in v.lower():
                chunked = True
        last = None
        async for line in read_chunked_lines(reader, chunked):
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            ev = json.loads(data)
            if "error" in ev:
                raise RuntimeError("stream error: %s" % json.dumps(ev)[:200])
            if ev.get("usage"):
                stats.usage.append((time.monotonic(), ev["usage"].get("completion_tokens", 0)))
            choices = ev.get("choices") or []
            if not choices or not choices[0].get("text"):
                continue
            now = time.monotonic()
            stats.events.append((now, sid))
            if last is None:
                stats.ttft.append((t0, now - t0))
            else:
                stats.gaps.append((now, now - last))
            last = now
        stats.completed += 1
    finally:
        writer.close()


async def client(host, port, args, model_name, stats, sid, deadline, rng):
    while time.monotonic() < deadline:
        body = {"model": model_name, "prompt": [rng.randrange(args.token_min, args.token_max) for _ in range(args.prompt)],
                "max_tokens": args.gen, "stream": True, "temperature": 0, "stream_options": {"include_usage": True}}
        stats.requests += 1
        try:
            await one_request(host, port, body, stats, sid)
        except Exception as e:  # noqa: BLE001 - every failure is counted and reported
            stats.errors.append(str(e))
            await asyncio.sleep(0.1)


def start_server(args):
    cmd = [args.serve, "-m", args.model, "--port", "0", "-c", str(args.ctx), "--queue", str(args.clients)]
    if "--parallel" not in args.server_args:
        cmd += ["--parallel", str(args.clients)]
    cmd += args.server_args
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    found = {}
    log = []

    def pump():
        for raw in proc.stderr:
            line = raw.decode(errors="replace")
            log.append(line)
            m = re.search(r"listening on http://[^:]+:(\d+)", line)
            if m and "port" not in found:
                found["port"] = int(m.group(1))
        found["eof"] = True

    threading.Thread(target=pump, daemon=True).start()
    t_end = time.monotonic() + args.start_timeout
    while "port" not in found:
        if proc.poll() is not None or time.monotonic() > t_end:
            proc.kill()
            sys.exit("strata-serve did not start:\n" + "".join(log[-20:]))
        time.sleep(0.05)
    while True:  # loading the model: /health answers 503 until it is ready
        try:
            c = http.client.HTTPConnection("127.0.0.1", found["port"], timeout=2)
            c.request("GET", "/health")
            if c.getresponse().status == 200:
                break
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > t_end:
            proc.kill()
            sys.exit("strata-serve never became healthy:\n" + "".join(log[-20:]))
        time.sleep(0.1)
    return proc, found["port"], log


async def run(args, host, port, model_name):
    stats = Stats()
    t_start = time.monotonic()
    deadline = t_start + args.warmup + args.seconds
    rng = random.Random(args.seed)
    tasks = [asyncio.create_task(client(host, port, args, model_name, stats, i, deadline, random.Random(rng.random())))
             for i in range(args.clients)]
    await asyncio.gather(*tasks)
    return stats, t_start + args.warmup, deadline


def scrape_steps(host, port):
    """The server's step counters from /metrics (forward steps, steps the GPU recorded and the time
    that took); {} when it has none."""
    names = ("strata_forward_steps_total", "strata_steps_recorded_total", "strata_step_recording_seconds_total")
    try:
        c = http.client.HTTPConnection(host, port, timeout=10)
        c.request("GET", "/metrics")
        body = c.getresponse().read().decode()
        c.close()
    except (OSError, http.client.HTTPException):
        return {}
    out = {}
    for line in body.splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[0] in names:
            v = float(parts[1])
            out[parts[0]] = v if parts[0].endswith("seconds_total") else int(v)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--serve", help="strata-serve binary to start")
    ap.add_argument("--model", help="GGUF file for --serve")
    ap.add_argument("--url", help="a running server instead of --serve")
    ap.add_argument("--model-name", help="the model name requests send (default: the file's stem)")
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens per request")
    ap.add_argument("--gen", type=int, default=64, help="new tokens per request (max_tokens)")
    ap.add_argument("--seconds", type=float, default=30, help="measured window")
    ap.add_argument("--warmup", type=float, default=5, help="seconds of load before the window")
    ap.add_argument("--ctx", type=int, default=16384)
    ap.add_argument("--token-min", type=int, default=100)
    ap.add_argument("--token-max", type=int, default=1000, help="prompt token ids are drawn from [min, max)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--start-timeout", type=float, default=300)
    ap.add_argument("--json", help="write the results here too")
    ap.add_argument("server_args", nargs="*", help="after --: more strata-serve flags")
    args = ap.parse_args()
    if not args.url and not (args.serve and args.model):
        ap.error("give --serve BIN --model GGUF, or --url")
    if args.clients < 1 or args.prompt < 1 or args.gen < 1 or args.seconds <= 0:
        ap.error("--clients, --prompt, --gen and --seconds must be positive")

    proc = None
    log = []
    if args.url:
        u = urllib.parse.urlparse(args.url)
        host, port = u.hostname or "127.0.0.1", u.port or 80
    else:
        proc, port, log = start_server(args)
        host = "127.0.0.1"
    model_name = args.model_name or (re.sub(r"\.gguf$", "", args.model.split("/")[-1]) if args.model else "model")
    try:
        stats, w0, w1 = asyncio.run(run(args, host, port, model_name))
        steps = scrape_steps(host, port)
    finally:
        if proc:
            proc.terminate()
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()

    window = w1 - w0
    # Tokens by the server's count (usage) of the requests that ended in the window; chunks can
    # carry more than one token (text held back until it is whole UTF-8).
    tokens = sum(n for t, n in stats.usage if w0 <= t <= w1)
    chunks = sum(1 for t, _ in stats.events if w0 <= t <= w1)
    ended = [n for t, n in stats.usage if w0 <= t <= w1]
    gaps = [g for t, g in stats.gaps if w0 <= t <= w1]
    ttft = [s for t0, s in stats.ttft if t0 >= w0]
    res = {
        "clients": args.clients, "prompt": args.prompt, "gen": args.gen, "window_s": round(window, 2),
        "requests": stats.requests, "completed": stats.completed, "errors": len(stats.errors),
        "tokens_in_window": tokens, "tokens_per_s": round(tokens / window, 2), "chunks_in_window": chunks,
        "mean_tokens_per_request": round(sum(ended) / len(ended), 2) if ended else None,
        "ttft_ms": {"p50": round(1e3 * percentile(ttft, 0.5), 1), "p99": round(1e3 * percentile(ttft, 0.99), 1),
                    "n": len(ttft)},
        "inter_token_ms": {"p50": round(1e3 * percentile(gaps, 0.5), 2), "p99": round(1e3 * percentile(gaps, 0.99), 2),
                           "max": round(1e3 * max(gaps), 2) if gaps else None, "n": len(gaps)},
    }
    print("| clients | prompt | gen (mean) | window s | requests | errors | tokens/s (all streams) | TTFT p50 / p99 ms | "
          "inter-chunk p50 / p99 / max ms |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    print("| %d | %d | %d (%s) | %.1f | %d | %d | %.2f | %.1f / %.1f | %.2f / %.2f / %s |" % (
        args.clients, args.prompt, args.gen, res["mean_tokens_per_request"], window, stats.requests, len(stats.errors),
        res["tokens_per_s"],
        res["ttft_ms"]["p50"], res["ttft_ms"]["p99"], res["inter_token_ms"]["p50"], res["inter_token_ms"]["p99"],
        res["inter_token_ms"]["max"]))
    if steps:
        res["server_steps"] = steps
        print("server, whole run: %d forward steps, %d of them recorded by the GPU (%.3f s of recording)" % (
            steps.get("strata_forward_steps_total", 0), steps.get("strata_steps_recorded_total", 0),
            steps.get("strata_step_recording_seconds_total", 0.0)))
    for e in stats.errors[:5]:
        print("error:", e, file=sys.stderr)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 1 if stats.errors else 0


if __name__ == "__main__":
    sys.exit(main())
