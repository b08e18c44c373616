// openai_tools.cjs — talks to a running `kvrun serve` through the official `openai` npm client
// with tools: a conversation holding an assistant tool call and its tool result, streamed and
// whole (greedy, so both must give the same text), then tool_choice "required" (refused: 400).
// Prints one JSON object on stdout: {streamed, whole, finish_stream, finish_whole, bad_status}.
// Usage: NODE_PATH=<dir>/node_modules node openai_tools.cjs BASE_URL
const mod = require('openai');
const OpenAI = mod.OpenAI || mod.default || mod;

async function main() {
  const [baseURL] = process.argv.slice(2);
  const client = new OpenAI({ baseURL, apiKey: 'none', maxRetries: 0, timeout: 60000 });
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Current weather',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
    },
  }];
  const request = {
    model: 'kvrun',
    messages: [
      { role: 'user', content: 'Weather in Paris?' },
      {
        role: 'assistant',
        content: null,
        tool_calls: [{
          id: 'call_1', type: 'function',
          function: { name: 'get_weather', arguments: JSON.stringify({ city: 'Paris' }) },
        }],
      },
      { role: 'tool', tool_call_id: 'call_1', content: '{"temperature": 18}' },
    ],
    tools,
    tool_choice: 'auto',
    max_tokens: 16,
    temperature: 0,
  };
  const stream = await client.chat.completions.create({ ...request, stream: true });
  let streamed = '';
  let finishStream = null;
  for await (const chunk of stream) {
    const choice = chunk.choices[0];
    if (!choice) continue;
    streamed += choice.delta.content || '';
    if (choice.finish_reason) finishStream = choice.finish_reason;
  }
  const whole = await client.chat.completions.create(request);
  let badStatus = 0;
  try {
    await client.chat.completions.create({ ...request, tool_choice: 'required' });
  } catch (e) {
    badStatus = e.status;
  }
  console.log(JSON.stringify({
    streamed,
    whole: whole.choices[0].message.content,
    finish_stream: finishStream,
    finish_whole: whole.choices[0].finish_reason,
    bad_status: badStatus,
  }));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
