// 32 concurrent streaming clients (OpenAI chat and Anthropic messages, different prompts, one
// shared system prompt) against a server batching 16 sequences: every response must be complete
// and equal, token for token, to the same request run alone on a one-slot server (greedy).
// Afterwards the server must be healthy, idle, and report prefix-cache hits.
// node concurrency.mjs --serve BIN --model GGUF
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const N = 32;
const system = 'You are a helpful assistant. Answer in one short paragraph, plainly.';
const topics = ['rivers', 'owls', 'tea', 'granite', 'jazz', 'comets', 'bread', 'maps', 'glass', 'wolves', 'tides',
  'paper', 'bees', 'salt', 'kites', 'moss'];
const requests = Array.from({ length: N }, (_, i) => ({
  api: i % 2 ? 'anthropic' : 'openai',
  user: `Tell me something about ${topics[i % topics.length]} (question ${i}).`,
  max_tokens: 16 + (i % 5) * 4,
}));

function clients(srv) {
  return {
    openai: new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 120_000 }),
    anthropic: new Anthropic({ baseURL: srv.base, apiKey: 'test-key', maxRetries: 0, timeout: 120_000 }),
  };
}

async function stream(c, model, r) {
  let text = '', finish = null, tokens = null;
  if (r.api === 'openai') {
    const s = await c.openai.chat.completions.create({
      model, max_tokens: r.max_tokens, temperature: 0, stream: true, stream_options: { include_usage: true },
      messages: [{ role: 'system', content: system }, { role: 'user', content: r.user }],
    });
    for await (const ch of s) {
      for (const choice of ch.choices) { text += choice.delta.content ?? ''; finish = choice.finish_reason ?? finish; }
      if (ch.usage) tokens = ch.usage.completion_tokens;
    }
  } else {
    const s = await c.anthropic.messages.create({
      model, max_tokens: r.max_tokens, temperature: 0, stream: true, system, messages: [{ role: 'user', content: r.user }],
    });
    for await (const ev of s) {
      if (ev.type === 'content_block_delta') text += ev.delta.text;
      if (ev.type === 'message_delta') { finish = ev.delta.stop_reason; tokens = ev.usage.output_tokens; }
    }
  }
  assert.ok(finish, `request ${r.user}: the stream ended without a finish reason`);
  return { text, finish, tokens };
}

const metric = (text, name) => Number((new RegExp(`^${name} (\\S+)$`, 'm').exec(text) ?? [])[1]);

const solo = await startServer(['--parallel', '1']);
const batched = await startServer(['--parallel', '16', '--queue', '64']);
let alone = [];
await run('concurrency', [
  ['each request alone on a one-slot server', async () => {
    const c = clients(solo);
    for (const r of requests) alone.push(await stream(c, solo.model, r));
    await solo.stop();
  }],
  [`${N} concurrent streams on a 16-slot server equal the solo runs`, async () => {
    const c = clients(batched);
    const got = await Promise.all(requests.map((r) => stream(c, batched.model, r)));
    for (let i = 0; i < N; ++i) {
      assert.deepEqual(got[i], alone[i], `request ${i} (${requests[i].api}) differs from its solo run`);
      assert.ok(got[i].tokens > 0);
    }
  }],
  ['server healthy, idle, prefix cache used', async () => {
    assert.equal((await fetch(`${batched.base}/health`)).status, 200);
    const m = await (await fetch(`${batched.base}/metrics`, { headers: { authorization: 'Bearer test-key' } })).text();
    assert.equal(metric(m, 'strata_requests_running'), 0);
    assert.equal(metric(m, 'strata_requests_waiting'), 0);
    assert.ok(metric(m, 'strata_prefix_cache_hits_total') > 0, 'the shared system prompt was reused');
    assert.ok(metric(m, 'strata_generation_tokens_total') > 0);
    console.log(`     batched server: ${metric(m, 'strata_forward_steps_total')} forward steps for ` +
      `${metric(m, 'strata_generation_tokens_total')} generated tokens, ` +
      `${metric(m, 'strata_prompt_cache_hit_tokens_total')} prompt tokens from the prefix cache`);
    await batched.stop();
  }],
]);
for (const s of [solo, batched]) if (!s.exited()) s.child.kill('SIGKILL');
