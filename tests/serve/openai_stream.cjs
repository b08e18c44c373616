// openai_stream.cjs — talks to a running `kvrun serve` through the official `openai` npm client:
// one streamed chat completion and the same request without streaming (greedy, so both must give
// the same text). Prints one JSON object on stdout: {streamed, whole, chunks, finish_stream,
// finish_whole, usage}. Usage: NODE_PATH=<dir>/node_modules node openai_stream.cjs BASE_URL KEY
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;

async function main() {
  const [baseURL, apiKey] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60000 });
  const request = {
    model: 'kvrun',
    messages: [{ role: 'user', content: 'Once upon a time, there was a little dog named Max.' }],
    max_tokens: 40,
    temperature: 0,
  };
  const stream = await client.chat.completions.create({
    ...request,
    stream: true,
    stream_options: { include_usage: true },
  });
  let streamed = '';
  let chunks = 0;
  let finishStream = null;
  let usage = null;
  for await (const chunk of stream) {
    chunks += 1;
    if (chunk.usage) usage = chunk.usage;
    const choice = chunk.choices[0];
    if (!choice) continue;
    streamed += choice.delta.content || '';
    if (choice.finish_reason) finishStream = choice.finish_reason;
  }
  const whole = await client.chat.completions.create(request);
  console.log(JSON.stringify({
    streamed,
    whole: whole.choices[0].message.content,
    chunks,
    finish_stream: finishStream,
    finish_whole: whole.choices[0].finish_reason,
    usage,
  }));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
