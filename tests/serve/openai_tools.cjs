// openai_tools.cjs — talks to a running `kvrun serve` through the official `openai` npm client
// with tools: a conversation holding an assistant tool call and its tool result, streamed and
// whole (greedy, so both must give the same text); then a round trip with tool_choice
// "required": the reply is forced (by grammar) to be a call, whose result goes back in the next
// request; a named function that is not in tools is a 400.
// Prints one JSON object on stdout: {streamed, whole, finish_stream, finish_whole, forced_name,
// forced_args, forced_finish, round_trip_finish, bad_status}.
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
  // Round trip with a forced call: a bounded argument (enum) so the call ends within max_tokens.
  const forcedTools = [{
    type: 'function',
    function: {
      name: 'get_weather', description: 'Current weather',
      parameters: { type: 'object', properties: { city: { type: 'string', enum: ['Paris', 'Rome'] } },
                    required: ['city'] },
    },
  }];
  const ask = [{ role: 'user', content: 'Weather in Paris?' }];
  const forced = await client.chat.completions.create({
    model: 'kvrun', messages: ask, tools: forcedTools, tool_choice: 'required', max_tokens: 64,
    temperature: 0.8, seed: 1,
  });
  const call = forced.choices[0].message.tool_calls[0];
  const next = await client.chat.completions.create({
    model: 'kvrun', tools: forcedTools, max_tokens: 8, temperature: 0,
    messages: [...ask, forced.choices[0].message,
      { role: 'tool', tool_call_id: call.id, content: '{"temperature": 18}' }],
  });
  let badStatus = 0;
  try {
    await client.chat.completions.create({
      ...request, tool_choice: { type: 'function', function: { name: 'nope' } },
    });
  } catch (e) {
    badStatus = e.status;
  }
  console.log(JSON.stringify({
    streamed,
    whole: whole.choices[0].message.content,
    finish_stream: finishStream,
    finish_whole: whole.choices[0].finish_reason,
    forced_name: call.function.name,
    forced_args: JSON.parse(call.function.arguments),
    forced_finish: forced.choices[0].finish_reason,
    round_trip_finish: next.choices[0].finish_reason,
    bad_status: badStatus,
  }));
}

main().catch((e) => {
  console.error(String(e && e.stack ? e.stack : e));
  process.exit(1);
});
