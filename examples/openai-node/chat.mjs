// Chat with `moerun serve` through the official OpenAI client: one streamed chat completion,
// printed as it arrives. MOERUN_URL overrides the server (default http://127.0.0.1:8080/v1);
// the API key only matters when the server was started with --api-key.
import OpenAI from "openai";

const client = new OpenAI({
  baseURL: process.env.MOERUN_URL ?? "http://127.0.0.1:8080/v1",
  apiKey: process.env.MOERUN_API_KEY ?? "none",
});

const models = await client.models.list();
const model = models.data[0].id;

const stream = await client.chat.completions.create({
  model,
  messages: [{ role: "user", content: "Say hello in five words." }],
  max_tokens: 16,
  temperature: 0,
  stream: true,
  stream_options: { include_usage: true },
});

let usage;
for await (const chunk of stream) {
  process.stdout.write(chunk.choices[0]?.delta?.content ?? "");
  usage = chunk.usage ?? usage;
}
console.log(`\n[${model}: ${usage?.prompt_tokens} prompt tokens, ${usage?.completion_tokens} generated]`);
