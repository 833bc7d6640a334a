// strata-serve through the official `openai` SDK: models, chat (plain and streamed, raw chunks
// and the finalChatCompletion helper), legacy completions, Responses streaming, auth and
// bad-request errors. node openai.mjs --serve BIN --model GGUF
import OpenAI from 'openai';
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const srv = await startServer(['--parallel', '2']);
const model = srv.model;
const client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 60_000 });
const msgs = [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello' }];

await run('openai', [
  ['models.list', async () => {
    const models = await client.models.list();
    assert.equal(models.data.length, 1);
    assert.equal(models.data[0].id, model);
    assert.equal(models.data[0].object, 'model');
    const one = await client.models.retrieve(model);
    assert.equal(one.id, model);
  }],
  ['chat.completions.create', async () => {
    const cc = await client.chat.completions.create({ model, max_tokens: 16, temperature: 0, seed: 42, messages: msgs });
    assert.equal(cc.object, 'chat.completion');
    assert.ok(cc.id.startsWith('chatcmpl-'));
    assert.equal(cc.choices[0].message.role, 'assistant');
    assert.equal(typeof cc.choices[0].message.content, 'string');
    assert.ok(['stop', 'length'].includes(cc.choices[0].finish_reason));
    assert.equal(cc.usage.total_tokens, cc.usage.prompt_tokens + cc.usage.completion_tokens);
    assert.ok(cc.usage.completion_tokens <= 16);
  }],
  ['max_completion_tokens: 1 gives finish_reason length', async () => {
    const cc = await client.chat.completions.create({ model, max_completion_tokens: 1, temperature: 0, messages: msgs });
    assert.equal(cc.usage.completion_tokens, 1);
    assert.equal(cc.choices[0].finish_reason, 'length');
  }],
  ['stop string ends the text before it', async () => {
    const ref = await client.chat.completions.create({ model, max_tokens: 12, temperature: 0, messages: msgs });
    const text = ref.choices[0].message.content;
    if (text.length < 4) return;  // nothing to cut
    const stop = text.slice(2, 4);
    const cc = await client.chat.completions.create({ model, max_tokens: 12, temperature: 0, messages: msgs, stop: [stop] });
    assert.equal(cc.choices[0].finish_reason, 'stop');
    assert.equal(cc.choices[0].message.content, text.slice(0, text.indexOf(stop)));
  }],
  ['chat stream with include_usage (raw chunks)', async () => {
    const stream = await client.chat.completions.create({
      model, max_tokens: 16, temperature: 0, stream: true, stream_options: { include_usage: true }, messages: msgs,
    });
    let text = '', finish = null, usage = null, sawRole = false, ids = new Set();
    for await (const chunk of stream) {
      assert.equal(chunk.object, 'chat.completion.chunk');
      ids.add(chunk.id);
      if (chunk.usage) usage = chunk.usage;
      for (const ch of chunk.choices) {
        if (ch.delta.role === 'assistant') sawRole = true;
        if (ch.delta.content) text += ch.delta.content;
        if (ch.finish_reason) finish = ch.finish_reason;
      }
    }
    assert.ok(sawRole, 'first chunk carries the role');
    assert.ok(finish, 'a chunk carries finish_reason');
    assert.ok(usage && usage.completion_tokens > 0, 'usage chunk');
    assert.equal(ids.size, 1, 'one id for every chunk');
    const plain = await client.chat.completions.create({ model, max_tokens: 16, temperature: 0, messages: msgs });
    assert.equal(text, plain.choices[0].message.content, 'streamed text equals the non-streamed text');
  }],
  ['chat.completions.stream().finalChatCompletion()', async () => {
    const final = await client.chat.completions.stream({ model, max_tokens: 8, temperature: 0, messages: msgs }).finalChatCompletion();
    assert.equal(final.choices[0].message.role, 'assistant');
    assert.equal(typeof final.choices[0].message.content, 'string');
  }],
  ['completions.create (plain and streamed)', async () => {
    const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0 });
    assert.equal(c.object, 'text_completion');
    assert.equal(c.usage.completion_tokens, 8);
    assert.equal(c.choices[0].finish_reason, 'length');
    const s = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 8, temperature: 0, stream: true });
    let text = '';
    for await (const ch of s) text += ch.choices[0]?.text ?? '';
    assert.equal(text, c.choices[0].text);
  }],
  ['responses.create stream', async () => {
    const rs = await client.responses.create({ model, input: 'Say hello', stream: true, max_output_tokens: 8, temperature: 0 });
    const types = []; let text = '';
    for await (const ev of rs) { types.push(ev.type); if (ev.type === 'response.output_text.delta') text += ev.delta; }
    assert.deepEqual(types.slice(0, 4), ['response.created', 'response.in_progress', 'response.output_item.added', 'response.content_part.added']);
    assert.ok(['response.completed', 'response.incomplete'].includes(types.at(-1)), types.at(-1));
    assert.deepEqual(types.slice(-4, -1), ['response.output_text.done', 'response.content_part.done', 'response.output_item.done']);
    const plain = await client.responses.create({ model, input: 'Say hello', max_output_tokens: 8, temperature: 0 });
    assert.equal(plain.output_text, text);
  }],
  ['responses.stream().finalResponse()', async () => {
    const r = await client.responses.stream({ model, input: [{ role: 'user', content: 'Hi' }], max_output_tokens: 4 }).finalResponse();
    assert.equal(r.object, 'response');
    assert.equal(r.output[0].type, 'message');
    assert.equal(typeof r.output[0].content[0].text, 'string');
  }],
  ['wrong API key -> AuthenticationError 401', async () => {
    const bad = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.chat.completions.create({ model, messages: msgs }), (e) => {
      assert.ok(e instanceof OpenAI.AuthenticationError, String(e));
      assert.equal(e.status, 401);
      return true;
    });
  }],
  ['bad request -> BadRequestError naming the field', async () => {
    await assert.rejects(client.chat.completions.create({ model, messages: msgs, n: 17 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, 'n');
      return true;
    });
    await assert.rejects(client.chat.completions.create({ model, messages: msgs, top_p: 3 }), (e) => {
      assert.ok(e instanceof OpenAI.BadRequestError, String(e));
      assert.equal(e.param, 'top_p');
      return true;
    });
  }],
  ['unknown model -> NotFoundError', async () => {
    await assert.rejects(client.chat.completions.create({ model: 'gpt-nope', messages: msgs }), (e) => {
      assert.ok(e instanceof OpenAI.NotFoundError, String(e));
      return true;
    });
  }],
  ['server still healthy and stops cleanly', async () => {
    assert.equal((await fetch(`${srv.base}/health`)).status, 200);
    await srv.stop();
  }],
]);
if (!srv.exited()) srv.child.kill('SIGKILL');
