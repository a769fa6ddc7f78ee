// Constrained output through the official openai client: answers under a JSON schema
// (response_format json_schema) validated by ajv, a JSON-object answer, and a required
// tool call whose arguments follow the tool's parameters. OPENAI_BASE_URL and
// OPENAI_API_KEY locate a server with Qwen3's chat template.
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Ajv from 'ajv';

const client = new OpenAI({ maxRetries: 0, timeout: 60_000 });
const model = (await client.models.list()).data[0].id;
const ajv = new Ajv({ strict: true });

const schema = {
  type: 'object',
  properties: {
    ok: { type: 'boolean' },
    color: { enum: ['red', 'green', 'blue'] },
    count: { type: 'integer', minimum: 0, maximum: 99 },
    tags: { type: 'array', items: { type: 'string', maxLength: 5 }, maxItems: 3 },
  },
  required: ['ok', 'color', 'count', 'tags'],
  additionalProperties: false,
};
const validate = ajv.compile(schema);
const noThinking = { chat_template_kwargs: { enable_thinking: false } };

// 50 seeds of sampled output under the schema: every answer is JSON the schema accepts.
let valid = 0;
for (let seed = 0; seed < 50; seed++) {
  const r = await client.chat.completions.create({
    model, seed, temperature: 1, max_tokens: 200, ...noThinking,
    messages: [{ role: 'user', content: 'A record, please.' }],
    response_format: { type: 'json_schema', json_schema: { name: 'record', strict: true, schema } },
  });
  const content = r.choices[0].message.content;
  assert.equal(r.choices[0].finish_reason, 'stop', `seed ${seed}: did not finish: ${content}`);
  const value = JSON.parse(content);
  assert.ok(validate(value), `seed ${seed}: ${content}: ${ajv.errorsText(validate.errors)}`);
  valid++;
}

// json_object: a JSON object.
const obj = await client.chat.completions.create({
  model, seed: 7, temperature: 0, max_tokens: 300, ...noThinking,
  messages: [{ role: 'user', content: 'JSON please.' }], response_format: { type: 'json_object' },
});
if (obj.choices[0].finish_reason === 'stop') {
  const v = JSON.parse(obj.choices[0].message.content);
  assert.equal(typeof v, 'object');
  assert.ok(v !== null && !Array.isArray(v));
}

// tool_choice required: one parsable call of the tool, its arguments valid for it.
const parameters = {
  type: 'object',
  properties: { command: { enum: ['ls', 'pwd', 'date'] }, timeout: { type: 'integer', minimum: 1, maximum: 60 } },
  required: ['command', 'timeout'],
  additionalProperties: false,
};
const checkArgs = ajv.compile(parameters);
const call = await client.chat.completions.create({
  model, seed: 3, temperature: 1, max_tokens: 200, ...noThinking, cache_prompt: false,
  messages: [{ role: 'user', content: 'List the files.' }],
  tools: [{ type: 'function', function: { name: 'bash', description: 'Run a command.', parameters } }],
  tool_choice: 'required',
});
assert.equal(call.choices[0].finish_reason, 'tool_calls');
const calls = call.choices[0].message.tool_calls;
assert.equal(calls.length, 1);
assert.equal(calls[0].function.name, 'bash');
const args = JSON.parse(calls[0].function.arguments);
assert.ok(checkArgs(args), `${calls[0].function.arguments}: ${ajv.errorsText(checkArgs.errors)}`);

// The same call streamed: the client's own stream helper assembles the deltas (the call's
// arguments arrive in pieces as they are written) into the call the request above got (both
// evaluate their whole prompt: logits from the slot's cache may round differently).
const stream = client.chat.completions.stream({
  model, seed: 3, temperature: 1, max_tokens: 200, ...noThinking, cache_prompt: false,
  messages: [{ role: 'user', content: 'List the files.' }],
  tools: [{ type: 'function', function: { name: 'bash', description: 'Run a command.', parameters } }],
  tool_choice: 'required',
});
let argumentChunks = 0;
stream.on('chunk', (chunk) => {
  for (const tc of chunk.choices[0]?.delta?.tool_calls ?? []) if (tc.function?.arguments) argumentChunks++;
});
const streamed = await stream.finalChatCompletion();
const streamedCalls = streamed.choices[0].message.tool_calls;
assert.equal(streamed.choices[0].finish_reason, 'tool_calls');
assert.equal(streamedCalls.length, 1);
assert.equal(streamedCalls[0].function.name, 'bash');
assert.equal(streamedCalls[0].function.arguments, calls[0].function.arguments);
assert.ok(argumentChunks > 1, `the arguments came in ${argumentChunks} chunks`);

console.log(JSON.stringify({ ok: true, schema_valid: valid, call: calls[0].function, streamed_argument_chunks: argumentChunks }));
