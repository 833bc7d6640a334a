// Starts strata-serve on a free port for one test script and stops it afterwards.
// Usage in a script: const srv = await startServer(['--parallel', '4']); ... await srv.stop();
// The binary and model come from the command line (--serve BIN --model GGUF), as CTest passes them.
import { spawn } from 'node:child_process';
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
  return {
    port, base, model: modelId(model), child,
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
