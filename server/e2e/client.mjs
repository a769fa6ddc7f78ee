// Drives a running `moerun serve` with the official openai client, as an application would.
// OPENAI_BASE_URL (…/v1) and OPENAI_API_KEY locate it. Exits non-zero on the first failed
// check; prints a JSON summary on success.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const client = new OpenAI({ maxRetries: 0, timeout: 60_000 });

const models = await client.models.list();
assert.equal(models.data.length, 1);
const model = models.data[0].id;

// Streamed and non-streamed chat with the same seed give the same text and token counts.
const chat = {
  model,
  messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'Say hello.' }],
  max_tokens: 24, seed: 1234, temperature: 1.0, top_p: 0.9,
};
const plain = await client.chat.completions.create(chat);
assert.equal(plain.object, 'chat.completion');
assert.equal(plain.choices[0].message.role, 'assistant');
const text = plain.choices[0].message.content;
assert.ok(text.length > 0, 'the chat completion is empty');

let streamed = '';
let finish = null;
let usage = null;
for await (const chunk of await client.chat.completions.create({ ...chat, stream: true, stream_options: { include_usage: true } })) {
  assert.equal(chunk.object, 'chat.completion.chunk');
  if (chunk.usage) usage = chunk.usage;
  if (chunk.choices.length === 0) continue;
  streamed += chunk.choices[0].delta.content ?? '';
  finish = chunk.choices[0].finish_reason ?? finish;
}
assert.equal(streamed, text, 'streamed chat text differs from the non-streamed text');
assert.equal(finish, plain.choices[0].finish_reason);
// The same counts; the second request found its prompt in the slot's cache (all but the
// last token, whose logits it needs).
for (const k of ['prompt_tokens', 'completion_tokens', 'total_tokens']) assert.equal(usage[k], plain.usage[k], k);
assert.equal(plain.usage.prompt_tokens_details.cached_tokens, 0);
assert.equal(usage.prompt_tokens_details.cached_tokens, usage.prompt_tokens - 1);

// Completions, streamed and not, with a stop sequence and logprobs.
const completion = { model, prompt: 'the cat', max_tokens: 16, seed: 99, logprobs: 2 };
const comp = await client.completions.create(completion);
assert.equal(comp.object, 'text_completion');
assert.equal(comp.choices[0].logprobs.tokens.length, comp.usage.completion_tokens);
let compStreamed = '';
for await (const chunk of await client.completions.create({ ...completion, stream: true })) {
  compStreamed += chunk.choices[0]?.text ?? '';
}
assert.equal(compStreamed, comp.choices[0].text, 'streamed completion differs from the non-streamed one');

// The Responses API, whole and streamed through the client's accumulator (greedy, so the
// same text), with instructions, a function tool and a function call and its output in
// the input; /v1/responses/input_tokens counts the prompt.
const respReq = {
  model, instructions: 'You are terse.', max_output_tokens: 12, temperature: 0,
  tools: [{ type: 'function', name: 'bash', description: 'Run a command.', parameters: { type: 'object', properties: { command: { type: 'string' } } } }],
  input: [
    { role: 'user', content: 'List the files.' },
    { type: 'function_call', call_id: 'call_1', name: 'bash', arguments: '{"command":"ls"}' },
    { type: 'function_call_output', call_id: 'call_1', output: 'a.go' },
  ],
};
const resp = await client.responses.create(respReq);
assert.equal(resp.object, 'response');
assert.ok(['completed', 'incomplete'].includes(resp.status), resp.status);
assert.equal(resp.usage.output_tokens, 12);
const respStream = client.responses.stream(respReq);
let respDeltas = '';
respStream.on('response.output_text.delta', (e) => { respDeltas += e.delta; });
let respLast = null; // the last event's response (the client keeps only a completed one)
respStream.on('response.completed', (e) => { respLast = e.response; });
respStream.on('response.incomplete', (e) => { respLast = e.response; });
const respFinal = await respStream.finalResponse();
const textOf = (r) => r.output.filter((i) => i.type === 'message').flatMap((i) => i.content)
  .filter((c) => c.type === 'output_text').map((c) => c.text).join('');
assert.equal(textOf(respFinal), resp.output_text, 'streamed response text differs from the non-streamed one');
assert.equal(respDeltas, resp.output_text);
assert.equal(respLast.status, resp.status);
assert.equal(respLast.usage.output_tokens, resp.usage.output_tokens);
const counted = await client.post('/responses/input_tokens', { body: respReq });
assert.equal(counted.input_tokens, resp.usage.input_tokens);

// Errors arrive as the client's typed errors with the server's message.
const tooLong = 'hello '.repeat(5000);
await assert.rejects(client.completions.create({ model, prompt: tooLong, max_tokens: 4 }), (err) => {
  assert.ok(err instanceof OpenAI.BadRequestError, `want BadRequestError, got ${err}`);
  assert.equal(err.status, 400);
  assert.match(err.message, /context size/);
  return true;
});
await assert.rejects(new OpenAI({ apiKey: 'wrong', maxRetries: 0 }).models.list(), (err) => {
  assert.ok(err instanceof OpenAI.AuthenticationError, `want AuthenticationError, got ${err}`);
  return true;
});
await assert.rejects(client.chat.completions.create({ ...chat, temperature: -1 }), (err) => {
  assert.equal(err.status, 400);
  assert.equal(err.param, 'temperature');
  return true;
});

console.log(JSON.stringify({ ok: true, model, chat: text, completion: comp.choices[0].text, response: resp.output_text, response_status: resp.status }));
