// Soak test for strata-serve: holds N streaming clients (default 64) for a fixed time against one
// server it starts (or --url), with mixed request sizes, both APIs, clients that disconnect
// mid-stream and bad inputs, and reports throughput, p50/p99 time to first token and
// inter-token latency, errors, and the server's RSS over time. Exits non-zero on any error or
// when RSS after warm-up grows more than --rss-tolerance (default 10%).
// node bench/soak/soak.mjs --serve BIN --model GGUF [--minutes M] [--clients N] [--parallel P]
//   [--seed S] [--json FILE]
// Traffic goes to 127.0.0.1 only; every loop is bounded by the deadline.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';

const argv = process.argv.slice(2);
const opt = (name, dflt) => {
  const i = argv.indexOf(name);
  return i >= 0 && i + 1 < argv.length ? argv[i + 1] : dflt;
};
const minutes = Number(opt('--minutes', '1'));
const clients = Number(opt('--clients', '64'));
const parallel = opt('--parallel', '8');
const tolerance = Number(opt('--rss-tolerance', '0.10'));
const jsonOut = opt('--json', '');
let seed = Number(opt('--seed', '1'));
const rand = () => {  // xorshift32: the same traffic for the same seed
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
};
const pick = (xs) => xs[Math.floor(rand() * xs.length)];

// ---- the server ---------------------------------------------------------------------------
const serveBin = opt('--serve', ''), modelPath = opt('--model', '');
if (!serveBin || !modelPath) {
  console.error('usage: node bench/soak/soak.mjs --serve BIN --model GGUF [--minutes M] [--clients N]');
  process.exit(2);
}
const model = path.basename(modelPath).replace(/\.gguf$/, '');
const child = spawn(serveBin, ['-m', modelPath, '--port', '0', '--parallel', parallel, '--queue', String(clients),
  '-c', opt('--ctx', '8192'), ...(opt('--threads', '') ? ['-t', opt('--threads', '')] : [])],
  { stdio: ['ignore', 'ignore', 'pipe'] });
let log = '';
const port = await new Promise((resolve, reject) => {
  const t = setTimeout(() => reject(new Error('strata-serve did not start:\n' + log)), 60000);
  child.stderr.on('data', (d) => {
    log += d;
    const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
    if (m) { clearTimeout(t); resolve(Number(m[1])); }
  });
  child.on('exit', (c) => reject(new Error(`strata-serve exited with ${c}:\n${log}`)));
});
const base = `http://127.0.0.1:${port}`;
for (let i = 0; ; ++i) {
  try { if ((await fetch(base + '/health')).status === 200) break; } catch { /* loading */ }
  if (i > 600) throw new Error('strata-serve never became healthy');
  await new Promise((r) => setTimeout(r, 100));
}
const rssKiB = () => {
  const m = /VmRSS:\s+(\d+) kB/.exec(fs.readFileSync(`/proc/${child.pid}/status`, 'utf8'));
  return m ? Number(m[1]) : 0;
};

// ---- traffic --------------------------------------------------------------------------------
const words = 'the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxing matches'.split(' ');
const text = (n) => Array.from({ length: n }, () => pick(words)).join(' ');
const stats = { requests: 0, completed: 0, disconnects: 0, badInputs: 0, tokens: 0, errors: [], ttft: [], itl: [] };
const headers = { 'content-type': 'application/json' };

// A streamed generation, OpenAI or Anthropic; `abortAfter` chunks: a client that leaves.
async function streamOne(deadline) {
  const anthropic = rand() < 0.4;
  const promptWords = pick([4, 16, 64, 160]);  // up to ~400 tokens: CPU prefill attention is quadratic
  const maxTokens = pick([8, 32, 64, 128]);
  const abortAfter = rand() < 0.1 ? 1 + Math.floor(rand() * 5) : 0;
  const body = { model, max_tokens: maxTokens, stream: true, temperature: pick([0, 0.8]),
    messages: [{ role: 'user', content: text(promptWords) }] };
  const ctl = new AbortController();
  const t0 = performance.now();
  let last = 0, chunks = 0, text_ = '';
  const res = await fetch(base + (anthropic ? '/v1/messages' : '/v1/chat/completions'),
    { method: 'POST', headers, body: JSON.stringify(body), signal: ctl.signal });
  if (res.status !== 200) throw new Error(`status ${res.status}: ${(await res.text()).slice(0, 200)}`);
  const reader = res.body.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const s = Buffer.from(value).toString();
    text_ += s;
    // A chunk carrying generated text: OpenAI "content", Anthropic "text_delta".
    const n = (s.match(/"content":"|"text_delta"/g) ?? []).length;
    if (n > 0) {
      const now = performance.now();
      if (last === 0) stats.ttft.push(now - t0); else stats.itl.push((now - last) / n);
      last = now;
      stats.tokens += n;
      if (abortAfter && ++chunks >= abortAfter) {
        ctl.abort();
        reader.cancel().catch(() => {});
        stats.disconnects++;
        return;
      }
    }
    if (performance.now() > deadline + 120000) throw new Error('stream still running 2 minutes after the deadline');
  }
  const end = anthropic ? /event: message_stop/ : /data: \[DONE\]/;
  const err = streamError(text_);
  if (!end.test(text_) || err) throw new Error('stream ended badly: ' + (err ?? text_.slice(-280)));
  stats.completed++;
}

// The in-band error of a finished SSE stream, if any: an Anthropic `event: error`, or an OpenAI
// data object whose top level is {"error": ...}. Looking for the text "error" is not enough: a
// model may generate the token `error`, which streams as {"content":"error"}.
function streamError(sseText) {
  for (const ev of sseText.split('\n\n')) {
    if (/^event: error$/m.test(ev)) return ev.slice(0, 280);
    const data = /^data: (.*)$/m.exec(ev)?.[1];
    if (!data || data === '[DONE]') continue;
    let obj;
    try { obj = JSON.parse(data); } catch { return 'unparsable event: ' + data.slice(0, 250); }
    if (obj && typeof obj === 'object' && ('error' in obj || obj.type === 'error')) return ev.slice(0, 280);
  }
  return null;
}

// A bad request: must get its 4xx JSON error, and the server keeps serving.
async function badOne() {
  const cases = [
    ['/v1/chat/completions', '{"model": ', 400],
    ['/v1/chat/completions', JSON.stringify({ model, messages: 'hi' }), 400],
    ['/v1/chat/completions', JSON.stringify({ model, messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }), 400],
    ['/v1/messages', JSON.stringify({ model, max_tokens: -1, messages: [{ role: 'user', content: 'x' }] }), 400],
    ['/v1/chat/completions', JSON.stringify({ model: 'nope', messages: [{ role: 'user', content: 'x' }] }), 404],
    ['/v1/completions', JSON.stringify({ model, prompt: [1, -5] }), 400],
  ];
  const [route, body, want] = pick(cases);
  const res = await fetch(base + route, { method: 'POST', headers, body });
  const b = await res.text();
  if (res.status !== want || !/error/.test(b)) throw new Error(`bad input got ${res.status} (wanted ${want}): ${b.slice(0, 200)}`);
  stats.badInputs++;
}

async function client(deadline) {
  while (performance.now() < deadline) {
    stats.requests++;
    try {
      if (rand() < 0.08) await badOne(); else await streamOne(deadline);
    } catch (e) {
      if (e.name !== 'AbortError') stats.errors.push(String(e.message ?? e).slice(0, 300));
    }
  }
}

const t0 = performance.now();
const deadline = t0 + minutes * 60000;
const rss = [];  // [seconds, KiB]
const sampler = setInterval(() => rss.push([Math.round((performance.now() - t0) / 1000), rssKiB()]), 5000);
rss.push([0, rssKiB()]);
await Promise.all(Array.from({ length: clients }, () => client(deadline)));
clearInterval(sampler);
rss.push([Math.round((performance.now() - t0) / 1000), rssKiB()]);
const elapsed = (performance.now() - t0) / 1000;
const exited = new Promise((r) => child.on('exit', (code) => r(code)));
child.kill('SIGTERM');
const exitCode = await exited;

// ---- report -----------------------------------------------------------------------------------
const pct = (xs, p) => {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(p * s.length))];
};
// Warm-up: the first fifth of the run (caches, allocator pools, the prefix cache fill up).
const warm = rss.filter(([t]) => t >= minutes * 60 * 0.2);
const rssRef = warm.length ? warm[0][1] : rss[0][1];
const rssMax = Math.max(...warm.map(([, k]) => k));
const growth = (rssMax - rssRef) / rssRef;
const report = {
  date: new Date().toISOString(), minutes, clients, parallel: Number(parallel), seconds: Math.round(elapsed),
  requests: stats.requests, completed_streams: stats.completed, disconnects: stats.disconnects,
  bad_inputs_answered: stats.badInputs, errors: stats.errors.length, first_errors: stats.errors.slice(0, 5),
  tokens_per_s: Math.round(stats.tokens / elapsed * 10) / 10,
  ttft_ms: { p50: Math.round(pct(stats.ttft, 0.5)), p99: Math.round(pct(stats.ttft, 0.99)) },
  itl_ms: { p50: Math.round(pct(stats.itl, 0.5)), p99: Math.round(pct(stats.itl, 0.99)) },
  rss_mib: rss.map(([t, k]) => [t, Math.round(k / 102.4) / 10]),
  rss_growth_after_warmup: Math.round(growth * 1000) / 10 + '%',
  server_exit: exitCode,
};
const { rss_mib: rssSeries, ...summary } = report;
console.log(JSON.stringify(summary));
console.log('rss_mib [s, MiB]: ' + rssSeries.map(([t, m]) => `${t}:${m}`).join(' '));
if (jsonOut) fs.writeFileSync(jsonOut, JSON.stringify(report, null, 1) + '\n');
const ok = stats.errors.length === 0 && growth <= tolerance && exitCode === 0 && stats.completed > 0;
console.log(ok ? 'soak: PASS' : 'soak: FAIL');
process.exit(ok ? 0 : 1);
