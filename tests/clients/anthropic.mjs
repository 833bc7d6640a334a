// strata-serve through the official `@anthropic-ai/sdk`, run once with 1.x (Authorization:
// Bearer, anthropic-version 2026-10-21) and once with 0.x (x-api-key, 2023-06-01):
// node anthropic.mjs --sdk @anthropic-ai/sdk|anthropic-sdk-0 --serve BIN --model GGUF
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const sdkName = process.argv[process.argv.indexOf('--sdk') + 1] ?? '@anthropic-ai/sdk';
const { default: Anthropic } = await import(sdkName);
const srv = await startServer(['--parallel', '2']);
const model = srv.model;
const client = new Anthropic({ baseURL: srv.base, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });
const name = `anthropic (${sdkName})`;

await run(name, [
  ['messages.create with system string and stop_sequences', async () => {
    const msg = await client.messages.create({
      model, max_tokens: 16, temperature: 0, system: 'You are terse.',
      messages: [{ role: 'user', content: 'Say hello' }], stop_sequences: ['\n\n'],
    });
    assert.equal(msg.type, 'message');
    assert.equal(msg.role, 'assistant');
    assert.ok(msg.id.startsWith('msg_'));
    assert.equal(msg.model, model);
    assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(msg.stop_reason));
    assert.equal(msg.content[0].type, 'text');
    assert.equal(typeof msg.usage.input_tokens, 'number');
    assert.ok(msg.usage.output_tokens <= 16);
  }],
  ['max_tokens stop_reason and stop_sequence match', async () => {
    const base = { model, temperature: 0, system: [{ type: 'text', text: 'Be brief.' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'Count' }] }] };
    const a = await client.messages.create({ ...base, max_tokens: 3 });
    assert.equal(a.stop_reason, 'max_tokens');
    assert.equal(a.usage.output_tokens, 3);
    const ref = await client.messages.create({ ...base, max_tokens: 12 });
    const text = ref.content[0].text;
    if (text.length >= 4) {
      const stop = text.slice(2, 4);
      const b = await client.messages.create({ ...base, max_tokens: 12, stop_sequences: [stop] });
      assert.equal(b.stop_reason, 'stop_sequence');
      assert.equal(b.stop_sequence, stop);
      assert.equal(b.content[0].text, text.slice(0, text.indexOf(stop)));
    }
  }],
  ['raw stream: exact event order', async () => {
    const stream = await client.messages.create({
      model, max_tokens: 12, temperature: 0, stream: true, messages: [{ role: 'user', content: [{ type: 'text', text: 'Say hello' }] }],
    });
    const types = []; let text = ''; let delta;
    for await (const ev of stream) {
      types.push(ev.type);
      if (ev.type === 'content_block_delta' && ev.delta.type === 'text_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') delta = ev;
    }
    assert.deepEqual(types.slice(0, 2), ['message_start', 'content_block_start']);
    assert.deepEqual(types.slice(-3), ['content_block_stop', 'message_delta', 'message_stop']);
    assert.equal(typeof delta.usage.output_tokens, 'number');
    const plain = await client.messages.create({ model, max_tokens: 12, temperature: 0, messages: [{ role: 'user', content: 'Say hello' }] });
    assert.equal(text, plain.content[0].text, 'streamed text equals the non-streamed text');
  }],
  ['messages.stream().finalMessage()', async () => {
    const final = await client.messages.stream({ model, max_tokens: 8, messages: [{ role: 'user', content: 'Say hello' }] }).finalMessage();
    assert.equal(final.content[0].type, 'text');
    assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(final.stop_reason));
    assert.equal(typeof final.usage.output_tokens, 'number');
  }],
  ['assistant prefill continues the text', async () => {
    const m = await client.messages.create({ model, max_tokens: 4, temperature: 0, messages: [{ role: 'user', content: 'Hi' }, { role: 'assistant', content: 'Hello' }] });
    assert.equal(m.content[0].type, 'text');
  }],
  ['messages.countTokens', async () => {
    const c = await client.messages.countTokens({ model, messages: [{ role: 'user', content: 'Say hello' }] });
    assert.ok(Number.isInteger(c.input_tokens) && c.input_tokens > 0);
    const m = await client.messages.create({ model, max_tokens: 1, messages: [{ role: 'user', content: 'Say hello' }] });
    assert.equal(m.usage.input_tokens + (m.usage.cache_read_input_tokens ?? 0), c.input_tokens);
  }],
  ['models.list', async () => {
    const ids = [];
    for await (const m of client.models.list()) ids.push(m.id);
    assert.deepEqual(ids, [model]);
  }],
  ['wrong API key -> AuthenticationError 401 with error.type', async () => {
    const bad = new Anthropic({ baseURL: srv.base, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.messages.create({ model, max_tokens: 8, messages: [{ role: 'user', content: 'x' }] }), (e) => {
      assert.ok(e instanceof Anthropic.AuthenticationError, String(e));
      assert.equal(e.status, 401);
      assert.equal(e.error?.error?.type, 'authentication_error');
      return true;
    });
  }],
  ['bad request -> BadRequestError (missing max_tokens, wrong type)', async () => {
    await assert.rejects(client.messages.create({ model, messages: [{ role: 'user', content: 'x' }] }), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      assert.equal(e.error?.error?.type, 'invalid_request_error');
      assert.match(e.message, /max_tokens/);
      return true;
    });
    await assert.rejects(client.messages.create({ model, max_tokens: 4, messages: [{ role: 'user', content: 42 }] }), (e) => {
      assert.ok(e instanceof Anthropic.BadRequestError, String(e));
      assert.match(e.message, /messages\[0\]\.content/);
      return true;
    });
  }],
  ['unknown model -> NotFoundError in the Anthropic shape', async () => {
    await assert.rejects(client.messages.create({ model: 'claude-nope', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }), (e) => {
      assert.ok(e instanceof Anthropic.NotFoundError, String(e));
      assert.equal(e.error?.type, 'error');
      assert.equal(e.error?.error?.type, 'not_found_error');
      return true;
    });
  }],
  ['server still healthy and stops cleanly', async () => {
    assert.equal((await fetch(`${srv.base}/health`)).status, 200);
    await srv.stop();
  }],
]);
if (!srv.exited()) srv.child.kill('SIGKILL');
