#!/usr/bin/env python3
"""Grammar-constrained decoding cost per token in strata-serve's own path (scheduler -> sampler ->
grammar matcher), read from its /metrics counters (strata_constraint_seconds_total /
strata_constrained_tokens_total), next to the time per generated token of the same requests.

  python3 bench/serve/grammar_overhead.py --serve build/release/apps/strata-serve -m MODEL.gguf [-t 2] [-r 3]

Each request kind runs --repeats times on one server: the first run of a grammar meets a cold
automaton (masks computed as states are reached), later runs reuse its cached masks. Greedy
decoding, one slot. Standard library only.
"""
import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request

CITY = {"type": "object", "properties": {
    "name": {"type": "string", "maxLength": 16},
    "country": {"type": "string", "enum": ["FR", "IT", "NO"]},
    "population_millions": {"type": "integer", "minimum": 0, "maximum": 40},
    "coastal": {"type": "boolean"},
    "districts": {"type": "array", "items": {"type": "string", "maxLength": 12}, "minItems": 1, "maxItems": 3}},
    "required": ["name", "country", "population_millions", "coastal", "districts"], "additionalProperties": False}
WEATHER = {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 20}, "days": {"type": "integer", "minimum": 1, "maximum": 7},
    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}, "required": ["city", "days", "unit"]}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather forecast", "parameters": WEATHER}},
         {"type": "function", "function": {"name": "get_time", "description": "Time in a zone",
                                           "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 32}},
                                                          "required": ["zone"]}}}]
MSGS = [{"role": "user", "content": "What is the weather in Paris for the next three days?"}]
KINDS = {
    "free text (no grammar)": {},
    "json_object": {"response_format": {"type": "json_object"}},
    "json_schema (5 fields)": {"response_format": {"type": "json_schema", "json_schema": {"name": "city", "strict": True, "schema": CITY}}},
    "tool_choice required (2 tools)": {"tools": TOOLS, "tool_choice": "required"},
    "tool_choice auto (lazy, dormant)": {"tools": TOOLS, "tool_choice": "auto"},
}


def post(base, path, body):
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=3600) as r:
        return json.load(r)


def metrics(base):
    with urllib.request.urlopen(base + "/metrics", timeout=60) as r:
        text = r.read().decode()
    out = {}
    for name in ("strata_constraint_seconds_total", "strata_constrained_tokens_total", "strata_busy_seconds_total",
                 "strata_generation_tokens_total", "strata_forward_steps_total"):
        m = re.search(r"^" + name + r" ([0-9.e+-]+)$", text, re.M)
        out[name] = float(m.group(1)) if m else 0.0
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--serve", required=True)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", default="2")
    ap.add_argument("-r", "--repeats", type=int, default=3)
    ap.add_argument("-n", "--max-tokens", type=int, default=96)
    ap.add_argument("--port", default="18777")
    a = ap.parse_args()
    srv = subprocess.Popen([a.serve, "-m", a.model, "--port", a.port, "-t", a.threads, "--parallel", "1", "-c", "2048"],
                           stderr=subprocess.PIPE, text=True)
    base = "http://127.0.0.1:" + a.port
    try:
        for _ in range(600):
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except Exception:
                time.sleep(0.5)
        model = post(base, "/v1/models", {}) if False else json.load(urllib.request.urlopen(base + "/v1/models"))["data"][0]["id"]
        post(base, "/v1/chat/completions", {"model": model, "messages": MSGS, "max_tokens": 4, "temperature": 0})  # warm-up
        print(f"model {a.model}, {a.threads} threads, greedy, max_tokens {a.max_tokens}")
        print("| request | run | tokens | grammar tokens | busy ms/step (prefill included) | grammar ms/token | grammar / step |")
        print("| --- | --- | --- | --- | --- | --- | --- |")
        for kind, extra in KINDS.items():
            for run in range(a.repeats):
                m0 = metrics(base)
                t0 = time.perf_counter()
                r = post(base, "/v1/chat/completions", {"model": model, "messages": MSGS, "max_tokens": a.max_tokens,
                                                         "temperature": 0, **extra})
                wall = time.perf_counter() - t0
                m1 = metrics(base)
                d = {k: m1[k] - m0[k] for k in m0}
                toks = r["usage"]["completion_tokens"]
                steps = max(d["strata_forward_steps_total"], 1)
                step_ms = d["strata_busy_seconds_total"] / steps * 1e3
                gt = d["strata_constrained_tokens_total"]
                g_ms = d["strata_constraint_seconds_total"] / gt * 1e3 if gt else 0.0
                share = f"{100 * g_ms / step_ms:.1f}%" if gt else "-"
                print(f"| {kind} | {'cold' if run == 0 else 'warm'} | {toks} | {int(gt)} | {step_ms:.1f} | {g_ms:.3f} | {share} |")
                sys.stdout.flush()
    finally:
        srv.terminate()
        srv.wait(timeout=30)


if __name__ == "__main__":
    main()
