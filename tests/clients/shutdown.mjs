// Graceful shutdown of strata-serve: after SIGTERM, /health and new requests answer 503 with
// retry-after, a generation that ends within --shutdown-timeout completes normally, the ones
// still running then end with the API's in-band error and a complete chunked body (the SDK-level
// fetch sees no "terminated"), and the process exits 0. A second signal exits at once.
// node shutdown.mjs --serve BIN --model GGUF
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const auth = { authorization: 'Bearer test-key', 'content-type': 'application/json' };
const post = (srv, path, body) => fetch(srv.base + path, { method: 'POST', headers: auth, body: JSON.stringify(body) });
const msgs = [{ role: 'user', content: 'Tell me a long story' }];

// Starts a stream and resolves once its first bytes arrived; `rest` reads it to the end.
async function openStream(srv, path, body) {
  const res = await post(srv, path, { model: srv.model, messages: msgs, stream: true, temperature: 0, ...body });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let text = '';
  const first = await reader.read();
  text += Buffer.from(first.value).toString();
  const rest = (async () => {
    for (;;) {
      const { value, done } = await reader.read();  // throws ("terminated") if the body is cut
      if (done) return text;
      text += Buffer.from(value).toString();
    }
  })();
  return { rest };
}

const exitOf = (srv) => new Promise((r) => srv.child.on('exit', (code, sig) => r({ code, sig, at: Date.now() })));

await run('shutdown', [
  ['SIGTERM drains: 503 for new work, short streams finish, long ones end in-band, exit 0', async () => {
    // The 4 slots share the context: at 4096 the two long streams filled it (and ended normally)
    // within the 1.5 s on an idle machine; 32768 holds ~16k tokens each, several seconds' work.
    // 3 s, not 1.5: the short stream's 24 tokens took longer than 1.5 s in the ASan build on a
    // loaded 2-core machine.
    const srv = await startServer(['--parallel', '4', '--shutdown-timeout', '3', '-c', '32768']);
    try {
      const longOpenAI = await openStream(srv, '/v1/chat/completions', { max_tokens: 100000 });
      const longAnthropic = await openStream(srv, '/v1/messages', { max_tokens: 100000 });
      const short = await openStream(srv, '/v1/chat/completions', { max_tokens: 24 });
      const exited = exitOf(srv);
      const t0 = Date.now();
      srv.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 150));
      const h = await fetch(srv.base + '/health');
      assert.equal(h.status, 503);
      assert.equal(h.headers.get('retry-after'), '1');
      assert.equal((await h.json()).status, 'shutting_down');
      const late = await post(srv, '/v1/chat/completions', { model: srv.model, messages: msgs, max_tokens: 4 });
      assert.equal(late.status, 503);
      assert.equal(late.headers.get('retry-after'), '1');
      assert.match((await late.json()).error.message, /shutting down/);

      const s = await short.rest;
      assert.ok(s.trimEnd().endsWith('data: [DONE]'), s);
      assert.match(s, /"finish_reason":"length"/);
      assert.doesNotMatch(s, /shutting down/);
      const o = await longOpenAI.rest;
      assert.match(o, /data: \{"error":\{"message":"the server is shutting down","type":"unavailable_error"/);
      const a = await longAnthropic.rest;
      assert.match(a, /event: error\ndata: \{"type":"error","error":\{"type":"\w+","message":"the server is shutting down"\}\}/);
      const { code, at } = await exited;
      assert.equal(code, 0, 'exit status after SIGTERM');
      assert.ok(at - t0 >= 2900, `the long streams ran for the drain timeout (exited after ${at - t0} ms)`);
      assert.ok(at - t0 < 10000, `exited ${at - t0} ms after SIGTERM`);
    } finally {
      if (!srv.exited()) srv.child.kill('SIGKILL');
    }
  }],
  ['a second signal exits at once', async () => {
    const srv = await startServer(['--parallel', '2', '--shutdown-timeout', '60']);
    try {
      const long = await openStream(srv, '/v1/chat/completions', { max_tokens: 100000 });
      long.rest.catch(() => {});  // this one is cut: that is the point
      const exited = exitOf(srv);
      srv.child.kill('SIGTERM');
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(srv.exited(), false, 'still draining after the first signal');
      const t0 = Date.now();
      srv.child.kill('SIGTERM');
      const { code, at } = await exited;
      assert.ok(at - t0 < 2000, `exited ${at - t0} ms after the second signal`);
      assert.notEqual(code, 0);
    } finally {
      if (!srv.exited()) srv.child.kill('SIGKILL');
    }
  }],
]);
