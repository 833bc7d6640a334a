// Tool calling through the official SDKs: OpenAI chat (forced and named calls, streamed deltas
// assembled by chat.completions.stream(), parallel calls, the call -> result -> answer round
// trip, tools with a response_format: a call or the JSON answer), the Responses API
// (function_call items, streamed, and function_call_output fed back),
// and Anthropic messages with @anthropic-ai/sdk 1.x (tool_use blocks, input_json_delta assembled
// by messages.stream(), tool_result turns, count_tokens with tools, output_config.format). The fixture model has random
// weights: every call is well formed only because the grammar forces it, and the schemas bound
// every value (enums, integer ranges) so a call ends within max_tokens.
// node tools.mjs --serve BIN --model GGUF
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { zodOutputFormat } from '@anthropic-ai/sdk/helpers/zod';
import { z } from 'zod';
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const srv = await startServer(['--parallel', '2']);
const model = srv.model;
const openai = new OpenAI({ baseURL: `${srv.base}/v1`, apiKey: 'test-key', maxRetries: 0, timeout: 120_000 });
const anthropic = new Anthropic({ baseURL: srv.base, apiKey: 'test-key', maxRetries: 0, timeout: 120_000 });

const weatherParams = {
  type: 'object',
  properties: { city: { type: 'string', enum: ['Paris', 'Rome', 'Oslo'] }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const timeParams = { type: 'object', properties: { zone: { type: 'string', enum: ['UTC', 'CET'] } }, required: ['zone'], additionalProperties: false };
const chatTools = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather forecast', parameters: weatherParams } },
  { type: 'function', function: { name: 'get_time', description: 'Current time', parameters: timeParams } },
];
const ask = [{ role: 'user', content: 'What is the weather in Paris for 2 days?' }];

// A call's arguments parse and satisfy its schema.
function checkArgs(name, args) {
  const a = typeof args === 'string' ? JSON.parse(args) : args;
  if (name === 'get_weather') {
    assert.ok(['Paris', 'Rome', 'Oslo'].includes(a.city), JSON.stringify(a));
    assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 7, JSON.stringify(a));
    assert.deepEqual(Object.keys(a).sort(), ['city', 'days']);
  } else {
    assert.equal(name, 'get_time');
    assert.ok(['UTC', 'CET'].includes(a.zone), JSON.stringify(a));
  }
  return a;
}

await run('tools', [
  ['chat: tool_choice required gives well-formed calls, finish_reason tool_calls', async () => {
    const cc = await openai.chat.completions.create({ model, max_tokens: 400, messages: ask, tools: chatTools, tool_choice: 'required', seed: 1 });
    const c = cc.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.content, null);
    assert.ok(c.message.tool_calls.length >= 1);
    for (const tc of c.message.tool_calls) {
      assert.ok(tc.id.startsWith('call_'));
      assert.equal(tc.type, 'function');
      checkArgs(tc.function.name, tc.function.arguments);
    }
  }],
  ['chat: a named function, one call (parallel_tool_calls false), streamed and assembled by the SDK', async () => {
    const stream = openai.chat.completions.stream({
      model, max_tokens: 400, messages: ask, tools: chatTools, parallel_tool_calls: false,
      tool_choice: { type: 'function', function: { name: 'get_time' } },
    });
    let deltas = 0;
    stream.on('tool_calls.function.arguments.delta', () => { deltas++; });
    const final = await stream.finalChatCompletion();
    const c = final.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'get_time');
    checkArgs('get_time', c.message.tool_calls[0].function.arguments);
    assert.ok(deltas > 1, `arguments came in ${deltas} pieces`);
  }],
  ['chat: call -> tool result -> answer (the SDK feeds the assistant tool_calls and a tool message back)', async () => {
    const first = await openai.chat.completions.create({
      model, max_tokens: 400, messages: ask, tools: chatTools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
    });
    const msg = first.choices[0].message;
    const call = msg.tool_calls[0];
    const args = checkArgs(call.function.name, call.function.arguments);
    const history = [...ask, msg, { role: 'tool', tool_call_id: call.id, content: JSON.stringify({ city: args.city, forecast: 'sunny' }) }];
    const answer = await openai.chat.completions.create({ model, max_tokens: 12, temperature: 0, messages: history, tools: chatTools });
    const a = answer.choices[0];
    assert.ok(['stop', 'length'].includes(a.finish_reason), a.finish_reason);
    assert.equal(typeof a.message.content, 'string');
    assert.equal(a.message.tool_calls, undefined);
    // The result is in the prompt: the second prompt is longer than the first by at least it.
    assert.ok(answer.usage.prompt_tokens > first.usage.prompt_tokens + 5);
  }],
  ['chat: tool_choice none answers in text; auto with a greedy random model answers in text', async () => {
    for (const tool_choice of ['none', 'auto']) {
      const cc = await openai.chat.completions.create({ model, max_tokens: 10, temperature: 0, messages: ask, tools: chatTools, tool_choice });
      assert.equal(typeof cc.choices[0].message.content, 'string', tool_choice);
      assert.ok(['stop', 'length'].includes(cc.choices[0].finish_reason), tool_choice);
    }
  }],
  ['responses: function_call items (streamed), function_call_output fed back, text answer', async () => {
    const tools = [{ type: 'function', name: 'get_weather', description: 'Weather forecast', parameters: weatherParams, strict: true }];
    // One call: sampled parallel calls (temperature 0.8, no seed) may run past max_output_tokens.
    const stream = openai.responses.stream({ model, input: 'Weather in Oslo?', tools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 400 });
    const events = [];
    stream.on('event', (e) => events.push(e.type));
    const r = await stream.finalResponse();
    assert.equal(r.status, 'completed');
    const calls = r.output.filter((o) => o.type === 'function_call');
    assert.ok(calls.length >= 1);
    assert.ok(events.includes('response.function_call_arguments.delta'));
    assert.ok(events.includes('response.function_call_arguments.done'));
    const args = checkArgs(calls[0].name, calls[0].arguments);
    const next = await openai.responses.create({
      model, tools, max_output_tokens: 10, temperature: 0,
      input: [{ role: 'user', content: 'Weather in Oslo?' }, ...calls,
              ...calls.map((c) => ({ type: 'function_call_output', call_id: c.call_id, output: `${args.city}: rain` }))],
    });
    assert.equal(next.output[0].type, 'message');
    assert.equal(typeof next.output_text, 'string');
  }],
  ['anthropic: tool_choice tool, tool_use streamed with input_json_delta, assembled by messages.stream()', async () => {
    const tools = [{ name: 'get_weather', description: 'Weather forecast', input_schema: weatherParams }];
    const stream = anthropic.messages.stream({
      model, max_tokens: 400, tools, tool_choice: { type: 'tool', name: 'get_weather', disable_parallel_tool_use: true }, messages: ask,
    });
    let partial = '';
    stream.on('inputJson', (delta) => { partial += delta; });
    const msg = await stream.finalMessage();
    assert.equal(msg.stop_reason, 'tool_use');
    const uses = msg.content.filter((b) => b.type === 'tool_use');
    assert.ok(uses.length >= 1);
    assert.ok(uses[0].id.startsWith('toolu_'));
    checkArgs(uses[0].name, uses[0].input);
    assert.ok(partial.length > 0);
  }],
  ['anthropic: tool_use -> tool_result -> answer; count_tokens counts the tools', async () => {
    const tools = [{ name: 'get_weather', description: 'Weather forecast', input_schema: weatherParams }];
    const first = await anthropic.messages.create({ model, max_tokens: 400, tools, tool_choice: { type: 'any', disable_parallel_tool_use: true }, messages: ask });
    assert.equal(first.stop_reason, 'tool_use');
    const use = first.content.find((b) => b.type === 'tool_use');
    checkArgs(use.name, use.input);
    const messages = [...ask, { role: 'assistant', content: first.content },
                      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: 'sunny, 21 C' }] }];
    const answer = await anthropic.messages.create({ model, max_tokens: 10, temperature: 0, tools, messages });
    assert.ok(['end_turn', 'max_tokens'].includes(answer.stop_reason), answer.stop_reason);
    assert.equal(answer.content[0].type, 'text');
    const withTools = await anthropic.messages.countTokens({ model, tools, messages: ask });
    const without = await anthropic.messages.countTokens({ model, messages: ask });
    assert.ok(withTools.input_tokens > without.input_tokens + 20, `${withTools.input_tokens} vs ${without.input_tokens}`);
  }],
  ['chat: tools with a response_format (tool_choice auto): a call or the JSON answer, never free text', async () => {
    // logit_bias on the first token of each branch ('<' of <tool_call>, '{' of the answer; the
    // fixture's small vocabulary spells <tool_call> in pieces) picks it, so both are seen with
    // random weights; the grammar does the rest.
    const first = async (content) => (await fetch(`${srv.base}/tokenize`, { method: 'POST', headers: { authorization: 'Bearer test-key' },
      body: JSON.stringify({ content }) }).then((r) => r.json())).tokens[0];
    const lt = await first('<tool_call>'), brace = await first('{');
    const answer = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'], additionalProperties: false };
    const req = { model, max_tokens: 300, messages: ask, tools: chatTools, parallel_tool_calls: false, seed: 5,
                  response_format: { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema: answer } } };
    const call = await openai.chat.completions.create({ ...req, logit_bias: { [lt]: 100 } });
    assert.equal(call.choices[0].finish_reason, 'tool_calls');
    assert.equal(call.choices[0].message.tool_calls.length, 1);
    checkArgs(call.choices[0].message.tool_calls[0].function.name, call.choices[0].message.tool_calls[0].function.arguments);
    const json = await openai.chat.completions.create({ ...req, logit_bias: { [brace]: 100 } });
    assert.equal(json.choices[0].finish_reason, 'stop');
    assert.equal(typeof JSON.parse(json.choices[0].message.content).ok, 'boolean');
    // Unbiased: whichever the model picks is well formed.
    const any = await openai.chat.completions.create(req);
    const c = any.choices[0];
    if (c.finish_reason === 'tool_calls') checkArgs(c.message.tool_calls[0].function.name, c.message.tool_calls[0].function.arguments);
    else assert.equal(typeof JSON.parse(c.message.content).ok, 'boolean');
  }],
  ['anthropic: structured output (output_config.format) through messages.parse with zodOutputFormat, alone and beside tools', async () => {
    const Answer = z.object({ ok: z.boolean(), city: z.enum(['Paris', 'Rome']) });
    const m = await anthropic.messages.parse({ model, max_tokens: 300, messages: ask, output_config: { format: zodOutputFormat(Answer) } });
    assert.equal(m.stop_reason, 'end_turn');
    Answer.parse(m.parsed_output);
    // With tools (tool_choice auto): a tool_use or the JSON answer, nothing else.
    const tools = [{ name: 'get_weather', description: 'Weather forecast', input_schema: weatherParams }];
    const t = await anthropic.messages.create({ model, max_tokens: 300, messages: ask, tools, tool_choice: { type: 'auto', disable_parallel_tool_use: true },
                                                output_config: { format: zodOutputFormat(Answer) } });
    const use = t.content.find((b) => b.type === 'tool_use');
    if (use) {
      assert.equal(t.stop_reason, 'tool_use');
      checkArgs(use.name, use.input);
    } else {
      assert.equal(t.stop_reason, 'end_turn');
      Answer.parse(JSON.parse(t.content.filter((b) => b.type === 'text').map((b) => b.text).join('')));
    }
  }],
  ['bad tool requests name the field', async () => {
    await assert.rejects(openai.chat.completions.create({ model, messages: ask, tools: chatTools, tool_choice: { type: 'function', function: { name: 'nope' } } }),
      (e) => e instanceof OpenAI.BadRequestError && e.param === 'tool_choice');
    await assert.rejects(anthropic.messages.create({ model, max_tokens: 8, messages: ask, tools: [{ type: 'bash_20250124', name: 'bash' }] }),
      (e) => e instanceof Anthropic.BadRequestError && /server tools/.test(e.message));
  }],
  ['server stops cleanly', async () => { await srv.stop(); }],
]);
if (!srv.exited()) srv.child.kill('SIGKILL');
