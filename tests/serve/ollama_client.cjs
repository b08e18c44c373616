// ollama_client.cjs — talks to a running `kvrun serve` through the official `ollama` npm client:
// /api/chat and /api/generate streamed and whole (greedy, so both must give the same text), a
// short num_predict, format as a JSON Schema and as "json", a conversation with an assistant
// tool call (object arguments) and a tool result, generate's `context` given back to continue,
// and the errors the client raises (an option
// kvrun cannot honour, a template, another model). Prints one JSON object on stdout (see the
// keys at the end). Usage: NODE_PATH=<dir>/node_modules node ollama_client.cjs BASE_URL
const { Ollama } = require('ollama');

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 10 },
    age: { type: 'integer' },
  },
  required: ['name', 'age'],
  additionalProperties: false,
};

async function collect(stream, key) {
  let text = '';
  let parts = 0;
  let last = null;
  for await (const part of stream) {
    if (!part.done) parts += 1;
    text += key === 'message' ? part.message.content : part.response;
    last = part;
  }
  return { text, parts, last };
}

async function status(promise) {
  try {
    await promise;
    return { status: 200 };
  } catch (e) {
    return { status: e.status_code, error: e.error };
  }
}

async function main() {
  const [host] = process.argv.slice(2);
  const client = new Ollama({ host });
  const model = (await client.list()).models[0].name;
  const greedy = { temperature: 0, seed: 1, num_predict: 24 };
  const messages = [{ role: 'user', content: 'Once upon a time, there was a little dog.' }];

  const chatWhole = await client.chat({ model, messages, stream: false, options: greedy });
  const chatStream = await collect(
    await client.chat({ model, messages, stream: true, options: greedy }), 'message');
  const prompt = 'Once upon a time';
  const genWhole = await client.generate({ model, prompt, stream: false, options: greedy });
  const genStream = await collect(
    await client.generate({ model, prompt, stream: true, options: greedy }), 'response');
  const short = await client.generate({
    model, prompt, stream: false, options: { ...greedy, num_predict: 5 },
  });
  const hot = { temperature: 2, top_p: 1, top_k: 0, min_p: 0, seed: 7, num_predict: 400 };
  const schema = await client.chat({
    model, messages: [{ role: 'user', content: 'Describe a person.' }], stream: false,
    format: person, options: hot,
  });
  const json = await client.generate({
    model, prompt, stream: false, format: 'json', options: { ...hot, num_predict: 64 },
  });
  const tools = await client.chat({
    model, stream: false, options: greedy,
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      { role: 'assistant', content: '',
        tool_calls: [{ function: { name: 'get_weather', arguments: { city: 'Paris' } } }] },
      { role: 'tool', content: '{"temperature": 18}', tool_name: 'get_weather' },
    ],
    tools: [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } } } } }],
  });
  // context: the first reply's ids continue in the second call (streamed: on the final part).
  const first = await client.generate({ model, prompt, stream: false, options: greedy });
  const next = await collect(await client.generate({
    model, prompt: ' And then', context: first.context, stream: true, options: greedy,
  }), 'response');
  const badContext = await status(client.generate({
    model, prompt, stream: false, context: [-1],
  }));
  const mirostat = await status(client.generate({ model, prompt, options: { mirostat: 2 } }));
  const template = await status(client.generate({ model, prompt, template: '{{ .Prompt }}' }));
  const unknown = await status(client.chat({ model: 'nope:7b', messages }));

  const final = (r) => ({
    done: r.done, done_reason: r.done_reason, eval_count: r.eval_count,
    prompt_eval_count: r.prompt_eval_count, total_duration: r.total_duration,
    eval_duration: r.eval_duration,
  });
  console.log(JSON.stringify({
    model,
    chat_whole: chatWhole.message.content,
    chat_whole_final: final(chatWhole),
    chat_streamed: chatStream.text,
    chat_parts: chatStream.parts,
    chat_stream_final: final(chatStream.last),
    gen_whole: genWhole.response,
    gen_streamed: genStream.text,
    gen_parts: genStream.parts,
    gen_stream_final: final(genStream.last),
    short: final(short),
    schema_content: schema.message.content,
    schema_done_reason: schema.done_reason,
    json_response: json.response,
    json_done_reason: json.done_reason,
    tools_reply: { role: tools.message.role, done: tools.done },
    context: {
      first: first.context, first_prompt_eval_count: first.prompt_eval_count,
      first_eval_count: first.eval_count, next: next.last.context,
      next_prompt_eval_count: next.last.prompt_eval_count, next_text: next.text,
    },
    bad_context: badContext,
    mirostat, template, unknown,
  }));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
