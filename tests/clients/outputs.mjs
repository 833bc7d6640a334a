// Structured outputs and the rest of the OpenAI request surface through the official `openai`
// SDK: zod schemas through chat.completions.parse() and responses.parse() (the server enforces
// them with a grammar, so even the random-weight fixture model returns JSON the SDK parses and
// validates), json_object, logprobs + top_logprobs (chat, legacy completions, Responses), n = 2, seed,
// logit_bias, and /v1/embeddings in the SDK's default base64 and in float.
// node outputs.mjs --serve BIN --model GGUF
import OpenAI from 'openai';
import { zodResponseFormat, zodTextFormat } from 'openai/helpers/zod';
import { z } from 'zod';
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const srv = await startServer(['--parallel', '2', '--pooling', 'mean']);
const model = srv.model;
const client = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 120_000 });
const msgs = [{ role: 'user', content: 'Describe a city.' }];

// Every value bounded (enum, integer range, a pattern) so random weights finish the object. The
// name is a pattern, not .max(12): JSON Schema's maxLength counts code points, zod counts UTF-16
// units, so a random character outside the BMP passes the grammar and fails zod.
const City = z.object({
  name: z.string().regex(/^[a-z]{1,12}$/),
  country: z.enum(['FR', 'IT', 'NO']),
  population_millions: z.number().int().min(0).max(40),
  coastal: z.boolean(),
  districts: z.array(z.enum(['north', 'south', 'old town'])).min(1).max(3),
});

await run('outputs', [
  ['chat.completions.parse with zodResponseFormat (json_schema, strict)', async () => {
    const c = await client.chat.completions.parse({ model, max_tokens: 500, messages: msgs, response_format: zodResponseFormat(City, 'city') });
    const choice = c.choices[0];
    assert.equal(choice.finish_reason, 'stop');
    const parsed = choice.message.parsed;
    assert.ok(parsed, choice.message.content);
    City.parse(parsed);  // throws unless the grammar held every constraint
    assert.match(parsed.name, /^[a-z]{1,12}$/);
  }],
  ['responses.parse with zodTextFormat', async () => {
    const r = await client.responses.parse({ model, input: 'Describe a city.', max_output_tokens: 500, text: { format: zodTextFormat(City, 'city') } });
    assert.equal(r.status, 'completed');
    City.parse(r.output_parsed);
  }],
  ['response_format json_object: a streamed object that parses', async () => {
    // Greedy, for a deterministic test: free-form JSON strings have no bound, and this prompt is
    // one where the random-weight model closes its object instead of writing a key forever.
    const s = await client.chat.completions.create({
      model, max_tokens: 200, temperature: 0, stream: true, messages: [{ role: 'user', content: 'Give me a JSON object.' }],
      response_format: { type: 'json_object' },
    });
    let text = '', finish = null;
    for await (const chunk of s) {
      text += chunk.choices[0]?.delta?.content ?? '';
      finish = chunk.choices[0]?.finish_reason ?? finish;
    }
    assert.equal(finish, 'stop', text);
    const v = JSON.parse(text);
    assert.ok(typeof v === 'object' && v !== null && !Array.isArray(v), text);
  }],
  ['a schema the grammar cannot enforce is a 400 naming the field', async () => {
    await assert.rejects(client.chat.completions.create({
      model, messages: msgs,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { $ref: 'http://example.com/s' } } } } },
    }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'response_format.json_schema.schema');
  }],
  ['chat logprobs + top_logprobs: one entry per token, the chosen token first when greedy', async () => {
    const c = await client.chat.completions.create({ model, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, messages: msgs });
    const lp = c.choices[0].logprobs.content;
    assert.equal(lp.length, c.usage.completion_tokens);
    for (const e of lp) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 3);
      assert.equal(e.top_logprobs[0].token, e.token);
      assert.ok(Array.isArray(e.bytes));
    }
    assert.equal(lp.map((e) => Buffer.from(e.bytes).toString('latin1')).join(''), Buffer.from(c.choices[0].message.content, 'utf8').toString('latin1'));
    const s = await client.chat.completions.create({ model, max_tokens: 6, temperature: 0, logprobs: true, top_logprobs: 3, messages: msgs, stream: true });
    const streamed = [];
    for await (const chunk of s) streamed.push(...(chunk.choices[0]?.logprobs?.content ?? []));
    assert.deepEqual(streamed.map((e) => e.token), lp.map((e) => e.token));
  }],
  ['legacy completions logprobs (count) with tokens, token_logprobs, top_logprobs, text_offset', async () => {
    const c = await client.completions.create({ model, prompt: 'Once upon a time', max_tokens: 5, temperature: 0, logprobs: 2 });
    const lp = c.choices[0].logprobs;
    assert.equal(lp.tokens.length, 5);
    assert.equal(lp.token_logprobs.length, 5);
    assert.equal(Object.keys(lp.top_logprobs[0]).length <= 2, true);
    assert.equal(lp.text_offset[0], 0);
    assert.equal(lp.tokens.join(''), c.choices[0].text);
  }],
  ['n = 2: two choices (streamed and not), seeded sampling replays', async () => {
    const req = { model, max_tokens: 8, temperature: 1.0, seed: 7, n: 2, messages: msgs };
    const a = await client.chat.completions.create(req);
    const b = await client.chat.completions.create(req);
    assert.equal(a.choices.length, 2);
    assert.deepEqual(a.choices.map((c) => c.index), [0, 1]);
    assert.deepEqual(b.choices.map((c) => c.message.content), a.choices.map((c) => c.message.content));
    assert.ok(a.usage.completion_tokens >= 2 && a.usage.completion_tokens <= 16, String(a.usage.completion_tokens));
    const final = await client.chat.completions.stream(req).finalChatCompletion();
    assert.equal(final.choices.length, 2);
    assert.deepEqual(final.choices.map((c) => c.message.content), a.choices.map((c) => c.message.content));
    const cmpl = await client.completions.create({ model, prompt: 'Once', max_tokens: 4, n: 2, temperature: 1, seed: 3 });
    assert.equal(cmpl.choices.length, 2);
  }],
  ['logit_bias -100 bans the greedy token', async () => {
    const base = { model, max_tokens: 1, temperature: 0, logprobs: true, messages: msgs };
    const a = await client.chat.completions.create(base);
    const banned = a.choices[0].logprobs.content[0];
    const tok = await fetch(`${srv.base}/tokenize`, { method: 'POST', headers: { authorization: 'Bearer test-key' }, body: JSON.stringify({ content: banned.token, with_pieces: true }) }).then((r) => r.json());
    assert.equal(tok.tokens.length, 1);
    const b = await client.chat.completions.create({ ...base, logit_bias: { [tok.tokens[0].id]: -100 } });
    assert.notEqual(b.choices[0].logprobs.content[0].token, banned.token);
  }],
  ['responses logprobs (include + top_logprobs): one entry per token, streamed the same', async () => {
    const req = { model, input: 'Describe a city.', max_output_tokens: 6, temperature: 0, include: ['message.output_text.logprobs'], top_logprobs: 2 };
    const r = await client.responses.create(req);
    const part = r.output[0].content[0];
    assert.equal(part.logprobs.length, r.usage.output_tokens);
    for (const e of part.logprobs) {
      assert.ok(e.logprob <= 0);
      assert.equal(e.top_logprobs.length, 2);
      assert.equal(e.top_logprobs[0].token, e.token);
    }
    assert.equal(Buffer.concat(part.logprobs.map((e) => Buffer.from(e.bytes))).toString('utf8'), part.text);
    const stream = client.responses.stream(req);
    const streamed = [];
    let done = null, last = null;
    stream.on('event', (e) => {
      if (e.type === 'response.output_text.delta') streamed.push(...e.logprobs);
      if (e.type === 'response.output_text.done') done = e.logprobs;
      last = e;
    });
    await stream.done();  // reaching max_output_tokens ends it incomplete: the SDK assembles no final response then
    assert.ok(['response.incomplete', 'response.completed'].includes(last.type), last.type);
    assert.deepEqual(streamed.map((e) => e.token), part.logprobs.map((e) => e.token));
    assert.deepEqual(done.map((e) => e.logprob), part.logprobs.map((e) => e.logprob));
    assert.deepEqual(last.response.output[0].content[0].logprobs.map((e) => e.logprob), part.logprobs.map((e) => e.logprob));
    const plain = await client.responses.create({ model, input: 'Hi', max_output_tokens: 2, temperature: 0 });
    assert.deepEqual(plain.output[0].content[0].logprobs, []);
    await assert.rejects(client.responses.create({ ...req, top_logprobs: 21 }), (e) => e instanceof OpenAI.BadRequestError && e.param === 'top_logprobs');
  }],
  ['embeddings: the SDK default (base64) and float agree; vectors are unit length', async () => {
    const e64 = await client.embeddings.create({ model, input: ['hello world', 'strata'] });
    const ef = await client.embeddings.create({ model, input: ['hello world', 'strata'], encoding_format: 'float' });
    assert.equal(e64.data.length, 2);
    assert.deepEqual(e64.data[0].embedding, ef.data[0].embedding);
    const norm = Math.hypot(...ef.data[1].embedding);
    assert.ok(Math.abs(norm - 1) < 1e-5, `norm ${norm}`);
    assert.ok(ef.usage.prompt_tokens > 2);
    const one = await client.embeddings.create({ model, input: 'strata', encoding_format: 'float' });
    assert.deepEqual(one.data[0].embedding, ef.data[1].embedding);  // batching changes nothing
    // More inputs than the server's 2 slots: queued a slot's worth at a time, returned in order.
    const words = ['a', 'strata', 'b', 'c', 'hello world', 'd', 'e'];
    const many = await client.embeddings.create({ model, input: words, encoding_format: 'float' });
    assert.deepEqual(many.data.map((d) => d.index), [0, 1, 2, 3, 4, 5, 6]);
    assert.deepEqual(many.data[1].embedding, ef.data[1].embedding);
    assert.deepEqual(many.data[4].embedding, ef.data[0].embedding);
  }],
  ['server stops cleanly', async () => { await srv.stop(); }],
]);
if (!srv.exited()) srv.child.kill('SIGKILL');
