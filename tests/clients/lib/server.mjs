// Starts strata-serve on a free port for one test script and stops it afterwards.
// Usage in a script: const srv = await startServer(['--parallel', '4']); ... await srv.stop();
// The binary and model come from the command line (--serve BIN --model GGUF), as CTest passes them.
import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import http from 'node:http';
import path from 'node:path';

export function args() {
  const a = process.argv.slice(2);
  const get = (name) => {
    const i = a.indexOf(name);
    if (i < 0 || i + 1 >= a.length) throw new Error(`missing ${name} (usage: node SCRIPT --serve BIN --model GGUF)`);
    return a[i + 1];
  };
  return { serve: get('--serve'), model: get('--model') };
}

export const modelId = (modelPath) => path.basename(modelPath).replace(/\.gguf$/, '');

export async function startServer(extra = [], { apiKey = 'test-key' } = {}) {
  const { serve, model } = args();
  const argv = ['-m', model, '--port', '0', '-t', '1', ...(apiKey ? ['--api-key', apiKey] : []), ...extra];
  const child = spawn(serve, argv, { stdio: ['ignore', 'inherit', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`strata-serve did not start:\n${log}`)), 30000);
    child.stderr.on('data', (d) => {
      log += d;
      process.stderr.write(d);
      const m = /listening on http:\/\/[^:]+:(\d+)/.exec(log);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    child.on('exit', (code) => reject(new Error(`strata-serve exited with ${code}:\n${log}`)));
  });
  const base = `http://127.0.0.1:${port}`;
  for (let i = 0; ; ++i) {  // /health answers 503 until the model is loaded
    try {
      const r = await fetch(`${base}/health`);
      if (r.status === 200) break;
    } catch { /* not accepting yet */ }
    if (i > 300) throw new Error('strata-serve never became healthy');
    await new Promise((r) => setTimeout(r, 100));
  }
  if (process.env.STRATA_RECORD_REQUESTS) {
    const p = await recordingProxy(port, process.env.STRATA_RECORD_REQUESTS);
    return { port: p, base: `http://127.0.0.1:${p}`, model: modelId(model), child, ...control(child) };
  }
  return { port, base, model: modelId(model), child, ...control(child) };
}

// The request-parser fuzzer's seeds (tests/fuzz/seeds/requests/) are this traffic: with
// STRATA_RECORD_REQUESTS=DIR, the SDK scripts talk to a proxy that saves every generation body
// as one file (first byte: the route, as request_parser_fuzz.cpp reads it) and forwards it.
const routes = { '/v1/chat/completions': 0, '/v1/completions': 1, '/v1/responses': 2, '/v1/messages': 3,
  '/v1/messages/count_tokens': 4 };
function recordingProxy(target, dir) {
  fs.mkdirSync(dir, { recursive: true });
  const proxy = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const route = routes[req.url.split('?')[0]];
      if (route !== undefined) {
        const file = Buffer.concat([Buffer.from([route]), body]);
        const name = crypto.createHash('sha1').update(file).digest('hex').slice(0, 16);
        fs.writeFileSync(path.join(dir, `${route}-${name}`), file);
      }
      const fwd = http.request({ port: target, host: '127.0.0.1', path: req.url, method: req.method, headers: req.headers },
        (up) => { res.writeHead(up.statusCode, up.headers); up.pipe(res); });
      fwd.on('error', () => res.destroy());
      res.on('close', () => fwd.destroy());
      fwd.end(body);
    });
  });
  return new Promise((r) => proxy.listen(0, '127.0.0.1', () => { proxy.unref(); r(proxy.address().port); }));
}

function control(child) {
  return {
    exited: () => child.exitCode !== null,
    async stop() {
      if (child.exitCode !== null) throw new Error(`strata-serve died early (exit ${child.exitCode})`);
      const done = new Promise((r) => child.on('exit', r));
      child.kill('SIGTERM');
      const code = await done;
      if (code !== 0) throw new Error(`strata-serve exited with ${code} after SIGTERM`);
    },
  };
}

// Runs named async checks in order, printing each; exits non-zero on the first failure.
export async function run(name, checks) {
  let srv;
  try {
    for (const [label, fn] of checks) {
      const t0 = Date.now();
      await fn();
      console.log(`ok   ${name}: ${label} (${Date.now() - t0} ms)`);
    }
    console.log(`PASS ${name}`);
  } catch (e) {
    console.error(`FAIL ${name}:`, e?.stack ?? e);
    process.exitCode = 1;
  }
  return srv;
}
