// Tool calling and structured outputs through the official `openai` npm package against
// `weft serve` at $WEFT_URL (docs/http-api.md#tools): tool_choice required and named give
// tool_calls whose arguments validate against the function's schema, streaming
// delta.tool_calls reassemble to the same calls, assistant tool_calls and tool messages go
// through the chat template, bad tools are a 400 naming the field, and response_format
// json_schema's strict. WEFT_TEST_NODE is where setup_node.sh installed the client.
const path = require('path');
const assert = require('assert');
const { OpenAI } = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'openai'));

const client = new OpenAI({ baseURL: process.env.WEFT_URL + '/v1', apiKey: 'unused', maxRetries: 0 });

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'The weather in a city',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', minLength: 1, maxLength: 12 },
          unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
          days: { type: 'integer', minimum: 1, maximum: 7 },
        },
        required: ['city', 'unit'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'get_time',
      parameters: {
        type: 'object',
        properties: { zone: { type: 'string', enum: ['UTC', 'CET', 'PST'] } },
        required: ['zone'],
      },
    },
  },
];

// A validator for the keywords the schemas above use (no ajv in the test data).
function validate(schema, value, at = '$') {
  if (schema.enum) assert.ok(schema.enum.includes(value), `${at}: ${JSON.stringify(value)} not in enum`);
  if (schema.type === 'object') {
    assert.ok(value && typeof value === 'object' && !Array.isArray(value), `${at}: not an object`);
    for (const key of schema.required || []) assert.ok(key in value, `${at}: ${key} is required`);
    for (const [key, v] of Object.entries(value)) {
      const sub = (schema.properties || {})[key];
      if (!sub) {
        assert.notStrictEqual(schema.additionalProperties, false, `${at}.${key}: not allowed`);
        continue;
      }
      validate(sub, v, `${at}.${key}`);
    }
  } else if (schema.type === 'string') {
    assert.strictEqual(typeof value, 'string', `${at}: not a string`);
    if (schema.minLength !== undefined) assert.ok([...value].length >= schema.minLength, `${at}: too short`);
    if (schema.maxLength !== undefined) assert.ok([...value].length <= schema.maxLength, `${at}: too long`);
  } else if (schema.type === 'integer') {
    assert.ok(Number.isInteger(value), `${at}: not an integer`);
    if (schema.minimum !== undefined) assert.ok(value >= schema.minimum, `${at}: below minimum`);
    if (schema.maximum !== undefined) assert.ok(value <= schema.maximum, `${at}: above maximum`);
  }
}

function checkCall(call) {
  assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
  assert.strictEqual(call.type, 'function');
  const tool = tools.find((t) => t.function.name === call.function.name);
  assert.ok(tool, `unknown function ${call.function.name}`);
  assert.strictEqual(typeof call.function.arguments, 'string');
  validate(tool.function.parameters, JSON.parse(call.function.arguments));
}

const messages = [{ role: 'user', content: 'What is the weather in Oslo?' }];

async function main() {
  // tool_choice required: one call (parallel_tool_calls false), arguments per the schema.
  const base = { model: 'weft-tiny', messages, tools, max_tokens: 120, temperature: 0, parallel_tool_calls: false };
  const required = await client.chat.completions.create({ ...base, tool_choice: 'required' });
  const choice = required.choices[0];
  assert.strictEqual(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
  assert.strictEqual(choice.message.content, null);
  assert.strictEqual(choice.message.tool_calls.length, 1);
  checkCall(choice.message.tool_calls[0]);
  console.log('ok   tool_choice required:', JSON.stringify(choice.message.tool_calls[0].function));

  // A named function: that function, whatever the model would rather do.
  const named = await client.chat.completions.create({
    ...base, tool_choice: { type: 'function', function: { name: 'get_time' } },
  });
  const call = named.choices[0].message.tool_calls[0];
  assert.strictEqual(named.choices[0].finish_reason, 'tool_calls');
  assert.strictEqual(call.function.name, 'get_time');
  checkCall(call);
  console.log('ok   tool_choice named:', call.function.arguments);

  // Parallel calls allowed: one or more calls, each valid.
  const parallel = await client.chat.completions.create({
    ...base, parallel_tool_calls: true, tool_choice: 'required', max_tokens: 200,
  });
  const pc = parallel.choices[0];
  assert.ok(pc.message.tool_calls.length >= 1);
  // Cut by max_tokens, the last call's arguments may be unfinished: check the finished ones.
  const finished = pc.finish_reason === 'length' ? pc.message.tool_calls.slice(0, -1) : pc.message.tool_calls;
  finished.forEach(checkCall);
  console.log('ok   parallel_tool_calls:', pc.message.tool_calls.length, 'call(s),', pc.finish_reason);

  // Streaming: delta.tool_calls reassemble to the non-streaming call (greedy decoding).
  const stream = await client.chat.completions.create({ ...base, tool_choice: 'required', stream: true });
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta.content) content += c.delta.content;
    for (const d of c.delta.tool_calls || []) {
      if (d.id) {
        assert.strictEqual(calls.length, d.index);
        assert.ok(d.function.name, 'the first delta of a call names it');
        calls.push({ id: d.id, type: d.type, function: { name: d.function.name, arguments: d.function.arguments || '' } });
      } else {
        calls[d.index].function.arguments += d.function.arguments;
      }
    }
    if (c.finish_reason) finish = c.finish_reason;
  }
  assert.strictEqual(finish, 'tool_calls');
  assert.strictEqual(content, '');
  assert.strictEqual(calls.length, 1);
  checkCall(calls[0]);
  assert.deepStrictEqual(calls[0].function, choice.message.tool_calls[0].function);
  console.log('ok   streaming delta.tool_calls');

  // The SDK's own stream helper reassembles the same message.
  const runner = client.beta && client.beta.chat && client.beta.chat.completions &&
    client.beta.chat.completions.stream
    ? client.beta.chat.completions.stream({ ...base, tool_choice: 'required' })
    : client.chat.completions.stream({ ...base, tool_choice: 'required' });
  const final = await runner.finalChatCompletion();
  assert.deepStrictEqual(final.choices[0].message.tool_calls[0].function, choice.message.tool_calls[0].function);
  console.log('ok   SDK stream helper');

  // tool_choice auto: text or calls, each well formed.
  const auto = await client.chat.completions.create({ ...base, tool_choice: 'auto', max_tokens: 40 });
  const ac = auto.choices[0];
  if (ac.message.tool_calls) {
    assert.ok(['tool_calls', 'length'].includes(ac.finish_reason));
    const done = ac.finish_reason === 'length' ? ac.message.tool_calls.slice(0, -1) : ac.message.tool_calls;
    done.forEach(checkCall);
  } else {
    assert.strictEqual(typeof ac.message.content, 'string');
    assert.ok(!ac.message.content.includes('<tool_call>'));
    assert.notStrictEqual(ac.finish_reason, 'tool_calls');
  }
  console.log('ok   tool_choice auto:', ac.finish_reason);

  // A tool round trip: the assistant's call and the tool's answer go through the template
  // (weft-tiny's renders every message's content, so the tool result adds prompt tokens).
  const history = [
    ...messages,
    { role: 'assistant', content: null, tool_calls: [choice.message.tool_calls[0]] },
    { role: 'tool', tool_call_id: choice.message.tool_calls[0].id, content: '{"temperature": 21, "sky": "clear and blue"}' },
  ];
  const answer = await client.chat.completions.create({ model: 'weft-tiny', messages: history, tools, max_tokens: 8, temperature: 0, tool_choice: 'none' });
  assert.strictEqual(typeof answer.choices[0].message.content, 'string');
  assert.ok(!answer.choices[0].message.tool_calls);
  const shorter = await client.chat.completions.create({
    model: 'weft-tiny', messages: history.slice(0, 2), tools, max_tokens: 1, tool_choice: 'none',
  });
  assert.ok(answer.usage.prompt_tokens > shorter.usage.prompt_tokens + 8,
    `the tool message reached the prompt (${answer.usage.prompt_tokens} vs ${shorter.usage.prompt_tokens})`);
  console.log('ok   tool messages round trip:', JSON.stringify(answer.choices[0].message.content));

  // Bad tools: 400s that name the field.
  const rejects = (body, param, pattern) => assert.rejects(
    client.chat.completions.create({ model: 'weft-tiny', messages, max_tokens: 4, ...body }),
    (err) => {
      assert.ok(err instanceof OpenAI.BadRequestError, String(err));
      assert.strictEqual(err.status, 400);
      assert.strictEqual(err.param, param, err.message);
      if (pattern) assert.match(err.message, pattern);
      return true;
    });
  await rejects({ tools: [tools[0], { type: 'function', function: { name: 'bad name!' } }] }, 'tools[1].function.name');
  await rejects({ tools: [{ type: 'retrieval' }] }, 'tools[0].type');
  await rejects({ tools, tool_choice: { type: 'function', function: { name: 'nope' } } }, 'tool_choice.function.name', /"nope" is not one of the tools/);
  await rejects({ tools, tool_choice: 'sometimes' }, 'tool_choice');
  await rejects({ tool_choice: 'required' }, 'tool_choice', /only allowed when tools are given/);
  await rejects({
    tools: [{ type: 'function', function: { name: 'f', strict: true, parameters: { type: 'object', properties: { a: { not: {} } } } } }],
    tool_choice: 'required',
  }, 'tools[0].function.parameters', /#\/properties\/a.*unsupported keyword 'not'/);
  await rejects({ messages: [{ role: 'tool', content: 'x' }] }, 'messages[0].tool_call_id');
  await rejects({ messages: [{ role: 'assistant', content: null, tool_calls: [{ type: 'function', function: { name: 'f' } }] }] },
    'messages[0].tool_calls[0].function.arguments');
  console.log('ok   bad tools are 400s naming the field');

  // response_format json_schema: strict true refuses what cannot be enforced, naming the
  // JSON pointer; strict false skips it and constrains the rest.
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 99, multipleOf: 3 } }, required: ['n'] };
  await rejects({ response_format: { type: 'json_schema', json_schema: { name: 's', schema, strict: true } } },
    'response_format', /#\/properties\/n.*multipleOf/);
  const lenient = await client.chat.completions.create({
    model: 'weft-tiny', messages, max_tokens: 20, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 's', schema, strict: false } },
  });
  const value = JSON.parse(lenient.choices[0].message.content);
  assert.ok(Number.isInteger(value.n) && value.n >= 0 && value.n <= 99);
  const object = await client.chat.completions.create({
    model: 'weft-tiny', messages, max_tokens: 30, temperature: 0, response_format: { type: 'json_object' },
  });
  if (object.choices[0].finish_reason === 'stop') {
    assert.strictEqual(typeof JSON.parse(object.choices[0].message.content), 'object');
  }
  console.log('ok   response_format strict:', lenient.choices[0].message.content);
}

main().then(() => console.log('all tools checks passed'), (err) => {
  console.error('FAIL', err);
  process.exit(1);
});
