// Drives a running `moerun serve` with the official @anthropic-ai/sdk client, as Claude Code
// and other Messages API clients do. ANTHROPIC_BASE_URL and ANTHROPIC_API_KEY locate it.
// Exits non-zero on the first failed check; prints a JSON summary on success.
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';

const client = new Anthropic({ maxRetries: 0, timeout: 60_000 });

const ask = {
  model: 'tiny',
  max_tokens: 16,
  temperature: 0,
  system: [{ type: 'text', text: 'You are terse.' }],
  messages: [{ role: 'user', content: 'Say hello.' }],
};
const plain = await client.messages.create(ask);
assert.equal(plain.type, 'message');
assert.equal(plain.role, 'assistant');
assert.ok(['end_turn', 'max_tokens'].includes(plain.stop_reason), plain.stop_reason);
const text = plain.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
assert.ok(plain.usage.output_tokens > 0);

// The streamed message (greedy, so the same text), through the SDK's event accumulator.
const stream = client.messages.stream(ask);
let deltas = '';
stream.on('text', (t) => { deltas += t; });
const final = await stream.finalMessage();
const streamed = final.content.filter((b) => b.type === 'text').map((b) => b.text).join('');
assert.equal(streamed, text, 'streamed text differs from the non-streamed text');
assert.equal(deltas, text);
assert.equal(final.stop_reason, plain.stop_reason);

// count_tokens counts the whole prompt: what the first request evaluated plus what it found cached.
const count = await client.messages.countTokens({ model: 'tiny', system: ask.system, messages: ask.messages });
assert.equal(count.input_tokens, plain.usage.input_tokens + (plain.usage.cache_read_input_tokens ?? 0));

// A tool conversation: the tools, a tool_use turn and its tool_result are accepted.
const tools = [{ name: 'bash', description: 'Run a shell command.', input_schema: { type: 'object', properties: { command: { type: 'string' } }, required: ['command'] } }];
const withTools = await client.messages.create({
  ...ask,
  tools,
  messages: [
    { role: 'user', content: 'List the files.' },
    { role: 'assistant', content: [{ type: 'text', text: 'Listing.' }, { type: 'tool_use', id: 'toolu_1', name: 'bash', input: { command: 'ls' } }] },
    { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'a.go\nb.go' }] },
  ],
});
assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(withTools.stop_reason), withTools.stop_reason);

// Errors arrive as the SDK's typed errors, from Anthropic-shaped bodies.
await assert.rejects(client.messages.create({ ...ask, messages: [{ role: 'system', content: 'x' }] }),
  (e) => e instanceof Anthropic.BadRequestError && e.error?.error?.type === 'invalid_request_error');
await assert.rejects(new Anthropic({ apiKey: 'wrong', maxRetries: 0 }).messages.create(ask),
  (e) => e instanceof Anthropic.AuthenticationError);

console.log(JSON.stringify({ text, stop_reason: plain.stop_reason, usage: plain.usage, count: count.input_tokens, tools_stop: withTools.stop_reason }));
