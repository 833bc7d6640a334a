// Bad and hostile input against strata-serve: invalid JSON, wrong types, unknown routes and
// models, huge bodies, missing keys, garbage HTTP, slow clients, clients that disconnect
// mid-stream, a full queue. Every case must get the right status and error shape (or a closed
// connection), and the server must keep serving. node malformed.mjs --serve BIN --model GGUF
import assert from 'node:assert/strict';
import net from 'node:net';
import { startServer, run } from './lib/server.mjs';

// One slot, no queue: a second concurrent request is refused with 429.
const srv = await startServer(['--parallel', '1', '--queue', '0', '--timeout', '1', '--max-body-mb', '1', '-c', '512']);
const model = srv.model;
const auth = { authorization: 'Bearer test-key', 'content-type': 'application/json' };
const post = (path, body, headers = auth) =>
  fetch(srv.base + path, { method: 'POST', headers, body: typeof body === 'string' ? body : JSON.stringify(body) });
const post2 = (server, path, body) => fetch(server.base + path, { method: 'POST', headers: auth, body: JSON.stringify(body) });
const chat = (extra = {}) => ({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], ...extra });
const anth = (extra = {}) => ({ model, max_tokens: 4, messages: [{ role: 'user', content: 'hi' }], ...extra });

async function expectOpenAIError(res, status, param) {
  assert.equal(res.status, status);
  assert.match(res.headers.get('content-type'), /^application\/json/);
  const b = await res.json();
  assert.equal(typeof b.error?.message, 'string', JSON.stringify(b));
  assert.equal(typeof b.error?.type, 'string');
  if (param !== undefined) assert.equal(b.error.param, param, JSON.stringify(b));
  return b;
}
async function expectAnthropicError(res, status, type) {
  assert.equal(res.status, status);
  assert.match(res.headers.get('content-type'), /^application\/json/);
  const b = await res.json();
  assert.equal(b.type, 'error', JSON.stringify(b));
  assert.equal(b.error?.type, type, JSON.stringify(b));
  assert.ok(b.request_id?.startsWith('req_'));
  return b;
}

// Sends raw bytes on a fresh connection; resolves with everything received until the server
// closes it (or after `ms`).
function raw(bytes, ms = 3000) {
  return new Promise((resolve) => {
    const sock = net.connect(srv.port, '127.0.0.1');
    let got = '', closed = false;
    const t0 = Date.now();
    sock.on('data', (d) => { got += d; });
    sock.on('close', () => { closed = true; resolve({ got, closed, ms: Date.now() - t0 }); });
    sock.on('error', () => {});
    sock.write(bytes);
    setTimeout(() => { if (!closed) { sock.destroy(); resolve({ got, closed: false, ms: Date.now() - t0 }); } }, ms);
  });
}

// Streams a long generation; resolves once the first content arrives, returning an abort hook.
async function longStream() {
  const ctl = new AbortController();
  const res = await fetch(srv.base + '/v1/chat/completions', {
    method: 'POST', headers: auth, signal: ctl.signal,
    body: JSON.stringify(chat({ max_tokens: 100000, stream: true, temperature: 0 })),
  });
  assert.equal(res.status, 200);
  const reader = res.body.getReader();
  let seen = '';
  while (!seen.includes('"content":"') || !seen.includes('"delta":{"content"')) {
    const { value, done } = await reader.read();
    if (done) throw new Error('stream ended early: ' + seen);
    seen += Buffer.from(value).toString();
  }
  return { abort: () => { ctl.abort(); reader.cancel().catch(() => {}); } };
}

const metric = async (name) => {
  const m = await (await fetch(srv.base + '/metrics', { headers: auth })).text();
  return Number((new RegExp(`^${name} (\\S+)$`, 'm').exec(m) ?? [])[1]);
};
const until = async (what, fn, ms = 3000) => {
  const t0 = Date.now();
  while (!(await fn())) {
    if (Date.now() - t0 > ms) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
};

await run('malformed', [
  ['invalid JSON -> 400 in each API shape', async () => {
    await expectOpenAIError(await post('/v1/chat/completions', '{"model": '), 400);
    await expectAnthropicError(await post('/v1/messages', '{not json'), 400, 'invalid_request_error');
    await expectOpenAIError(await post('/v1/chat/completions', '[1, 2]'), 400);
    await expectOpenAIError(await post('/v1/chat/completions', ''), 400);
  }],
  ['wrong types name the field', async () => {
    await expectOpenAIError(await post('/v1/chat/completions', chat({ messages: 'hi' })), 400, 'messages');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ max_tokens: '10' })), 400, 'max_tokens');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ temperature: 'hot' })), 400, 'temperature');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ stream: 'yes' })), 400, 'stream');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ stop: 5 })), 400, 'stop');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ logit_bias: { abc: 1 } })), 400, 'logit_bias');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ logit_bias: { 999999: 1 } })), 400, 'logit_bias');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ messages: [{ role: 'wizard', content: 'x' }] })), 400, 'messages[0].role');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ messages: [{ role: 'user', content: [{ type: 'image_url' }] }] })), 400, 'messages[0].content[0].type');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ n: 17 })), 400, 'n');
    await expectOpenAIError(await post('/v1/chat/completions', chat({ n: 3 })), 400, 'n');  // more than 1 slot + 0 queue
    await expectOpenAIError(await post('/v1/completions', { model, prompt: ['a', 'b'] }), 400, 'prompt');
    await expectOpenAIError(await post('/v1/completions', { model, prompt: [1, -5] }), 400, 'prompt');
    await expectOpenAIError(await post('/v1/responses', { model, input: 7 }), 400, 'input');
    await expectAnthropicError(await post('/v1/messages', anth({ max_tokens: -1 })), 400, 'invalid_request_error');
    await expectAnthropicError(await post('/v1/messages', anth({ system: 5 })), 400, 'invalid_request_error');
    await expectAnthropicError(await post('/v1/messages', anth({ stop_sequences: [''] })), 400, 'invalid_request_error');
    await expectOpenAIError(await post('/tokenize', { content: 5 }), 400, 'content');
    await expectOpenAIError(await post('/detokenize', { tokens: [1, 'x'] }), 400, 'tokens[1]');
  }],
  ['prompt longer than the context -> 400', async () => {
    const b = await expectOpenAIError(await post('/v1/completions', { model, prompt: 'word '.repeat(2000) }), 400);
    assert.match(b.error.message, /context/);
  }],
  ['unknown route, model and method -> 404/405', async () => {
    await expectOpenAIError(await fetch(srv.base + '/v1/nope', { headers: auth }), 404);
    await expectOpenAIError(await post('/v1/chat/completions', chat({ model: 'other' })), 404, 'model');
    await expectAnthropicError(await post('/v1/messages', anth({ model: 'other' })), 404, 'not_found_error');
    await expectOpenAIError(await fetch(srv.base + '/v1/chat/completions', { headers: auth }), 405);
  }],
  ['auth: missing or wrong key -> 401; Bearer and x-api-key both work', async () => {
    await expectOpenAIError(await fetch(srv.base + '/v1/models'), 401);
    await expectAnthropicError(await post('/v1/messages', anth(), { 'x-api-key': 'bad' }), 401, 'authentication_error');
    assert.equal((await post('/v1/messages', anth(), { 'x-api-key': 'test-key' })).status, 200);
    assert.equal((await post('/v1/chat/completions', chat(), { 'x-api-key': 'test-key' })).status, 200);
    assert.equal((await post('/v1/messages', anth(), { authorization: 'Bearer test-key' })).status, 200);
    assert.equal((await fetch(srv.base + '/health')).status, 200, '/health needs no key');
  }],
  ['huge body -> 413 in each API shape', async () => {
    const big = JSON.stringify(chat({ messages: [{ role: 'user', content: 'x'.repeat(2 << 20) }] }));
    await expectOpenAIError(await post('/v1/chat/completions', big), 413);
    await expectAnthropicError(await post('/v1/messages', big), 413, 'request_too_large');
  }],
  ['garbage HTTP -> 400 and close', async () => {
    const r = await raw('HELLO WORLD\r\n\r\n');
    assert.match(r.got, /^HTTP\/1\.1 400/);
    assert.ok(r.closed);
  }],
  ['over-long header -> the 400 arrives although the client is still sending', async () => {
    // The client writes a 1 MiB header line in pieces; the server answers 400 after its header
    // limit and must read the rest before closing, or the client gets a reset instead of the 400.
    const r = await new Promise((resolve) => {
      const sock = net.connect(srv.port, '127.0.0.1');
      let got = '', err = null;
      sock.on('data', (d) => { got += d; });
      sock.on('error', (e) => { err = e; });
      sock.on('close', () => resolve({ got, err }));
      sock.write('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Big: ');
      let sent = 0;
      const piece = 'a'.repeat(16384);
      const more = () => {
        if (sent >= (1 << 20) || sock.destroyed) { sock.end(); return; }
        sent += piece.length;
        sock.write(piece, () => setImmediate(more));
      };
      more();
      setTimeout(() => sock.destroy(), 5000);
    });
    assert.match(r.got, /^HTTP\/1\.1 400/, `got ${JSON.stringify(r.got.slice(0, 80))}, error ${r.err?.code}`);
  }],
  ['keep-alive: two requests on one connection', async () => {
    const req = `GET /health HTTP/1.1\r\nHost: x\r\n\r\n`;
    const r = await raw(req + req, 500);
    assert.equal(r.got.match(/HTTP\/1\.1 200/g)?.length, 2, r.got);
  }],
  ['slow client is dropped after --timeout while others are served', async () => {
    const slow = raw('POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{"model"', 5000);
    assert.equal((await post('/v1/chat/completions', chat())).status, 200);
    const r = await slow;
    assert.ok(r.closed, 'server closed the stalled connection');
    assert.ok(r.ms >= 900 && r.ms < 4000, `closed after ${r.ms} ms`);
  }],
  ['queue full -> 429 with retry-after, both shapes', async () => {
    const s = await longStream();
    const a = await post('/v1/chat/completions', chat());
    assert.equal(a.headers.get('retry-after'), '1');
    await expectOpenAIError(a, 429);
    await expectAnthropicError(await post('/v1/messages', anth()), 429, 'rate_limit_error');
    s.abort();
    await until('the slot to be freed', async () => (await metric('strata_requests_running')) === 0);
  }],
  ['disconnect mid-stream frees the slot within a step', async () => {
    const before = await metric('strata_generation_tokens_total');
    const s = await longStream();
    s.abort();
    await until('requests_running = 0', async () => (await metric('strata_requests_running')) === 0, 2000);
    const after = await metric('strata_generation_tokens_total');
    await new Promise((r) => setTimeout(r, 200));
    assert.equal(await metric('strata_generation_tokens_total'), after, 'no tokens generated after the cancel');
    assert.ok(after - before < 5000);
    const res = await post('/v1/chat/completions', chat());
    assert.equal(res.status, 200, 'the freed slot serves the next request');
  }],
  ['server healthy and stops cleanly', async () => {
    assert.equal((await fetch(srv.base + '/health')).status, 200);
    await srv.stop();
  }],
  ['SSE keepalives while a stream waits (queue or long prefill), then it completes', async () => {
    // A second server: one slot, pings every 50 ms. Request A holds the slot; B's streams wait.
    const ps = await startServer(['--parallel', '1', '--queue', '4', '--sse-ping', '0.05']);
    try {
      const ctl = new AbortController();
      const a = await fetch(ps.base + '/v1/chat/completions', {
        method: 'POST', headers: auth, signal: ctl.signal, body: JSON.stringify(chat({ max_tokens: 100000, stream: true })),
      });
      const ra = a.body.getReader();
      await ra.read();
      const readAll = async (res) => {
        const r = res.body.getReader();
        let text = '';
        for (;;) { const { value, done } = await r.read(); if (done) return text; text += Buffer.from(value).toString(); }
      };
      const b = readAll(await post2(ps, '/v1/chat/completions', chat({ stream: true })));
      const c = readAll(await post2(ps, '/v1/messages', anth({ stream: true })));
      await new Promise((r) => setTimeout(r, 400));
      ctl.abort();
      ra.cancel().catch(() => {});
      const [tb, tc] = await Promise.all([b, c]);
      assert.ok((tb.match(/^: keepalive$/gm) ?? []).length >= 2, 'OpenAI stream got comment keepalives:\n' + tb);
      assert.ok(tb.trimEnd().endsWith('data: [DONE]'), tb);
      assert.ok((tc.match(/^event: ping$/gm) ?? []).length >= 3, 'Anthropic stream got ping events:\n' + tc);
      assert.ok(tc.trimEnd().endsWith('data: {"type":"message_stop"}'), tc);
      await ps.stop();
    } finally {
      if (!ps.exited()) ps.child.kill('SIGKILL');
    }
  }],
]);
if (!srv.exited()) srv.child.kill('SIGKILL');
