// An agent framework drives a tool loop against strata-serve: the OpenAI Agents SDK
// (@openai/agents) runs an agent whose first turn must call a tool (toolChoice 'required'); the
// SDK executes the tool, sends its output back and, since it resets tool_choice after a call,
// the model answers on the next turn, with the agent's structured output type (so the answer
// ends: a random-weight model writing free text would run to max_tokens, which the SDK treats
// as a failed turn). Run over the Responses API (streamed and not) and over Chat Completions.
// The fixture model has random weights: the call and the answer are well formed because the
// server's grammar forces them.
// node agent.mjs --serve BIN --model GGUF
import { Agent, Runner, OpenAIProvider, tool } from '@openai/agents';
import { z } from 'zod';
import assert from 'node:assert/strict';
import { startServer, run } from './lib/server.mjs';

const srv = await startServer(['--parallel', '2']);
const calls = [];
const getWeather = tool({
  name: 'get_weather',
  description: 'Weather forecast for a city',
  parameters: z.object({ city: z.enum(['Paris', 'Rome', 'Oslo']), days: z.number().int().min(1).max(7) }),
  execute: async ({ city, days }) => {
    calls.push({ city, days });
    return `${city}: sunny for ${days} days`;
  },
});
const agent = new Agent({
  name: 'forecaster',
  instructions: 'Answer weather questions with the tool.',
  model: srv.model,
  tools: [getWeather],
  outputType: z.object({ outlook: z.enum(['sunny', 'rainy', 'unknown']), days: z.number().int().min(0).max(7) }),
  modelSettings: { toolChoice: 'required', temperature: 0, maxTokens: 300 },
});
const runner = (useResponses) => new Runner({
  modelProvider: new OpenAIProvider({ baseURL: `${srv.base}/v1`, apiKey: 'test-key', useResponses }),
  tracingDisabled: true,
});
const types = (result) => result.newItems.map((i) => i.type);

// Tool call, its output, then the final message, in that order.
function checkLoop(result, before) {
  const t = types(result);
  const call = t.indexOf('tool_call_item'), output = t.indexOf('tool_call_output_item'), message = t.lastIndexOf('message_output_item');
  assert.ok(call >= 0 && output > call && message > output, t.join(','));
  assert.ok(calls.length > before, 'the tool ran');
  const last = calls.at(-1);
  assert.ok(['Paris', 'Rome', 'Oslo'].includes(last.city) && last.days >= 1 && last.days <= 7, JSON.stringify(last));
  assert.ok(['sunny', 'rainy', 'unknown'].includes(result.finalOutput.outlook), JSON.stringify(result.finalOutput));
}

await run('agent', [
  ['@openai/agents over the Responses API: call -> tool output -> answer', async () => {
    const before = calls.length;
    checkLoop(await runner(true).run(agent, 'Weather in Paris for two days?', { maxTurns: 4 }), before);
  }],
  ['@openai/agents over the Responses API, streamed', async () => {
    const before = calls.length;
    const stream = await runner(true).run(agent, 'Weather in Rome?', { maxTurns: 4, stream: true });
    let events = 0;
    for await (const e of stream) if (e.type === 'raw_model_stream_event') ++events;
    await stream.completed;
    assert.ok(events > 0);
    checkLoop(stream, before);
  }],
  ['@openai/agents over Chat Completions', async () => {
    const before = calls.length;
    checkLoop(await runner(false).run(agent, 'Weather in Oslo?', { maxTurns: 4 }), before);
  }],
  ['server stops cleanly', async () => { await srv.stop(); }],
]);
if (!srv.exited()) srv.child.kill('SIGKILL');
