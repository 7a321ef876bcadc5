// Tool calls over `weft serve`'s /ws with the `ws` npm package (docs/websocket.md#tool-calls):
// a tool_call frame names each call, tool_call_arguments frames carry its arguments, and the
// done frame has finish_reason "tool_calls" and the whole calls, which the frames add up to.
const path = require('path');
const assert = require('assert');
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'ws'));
const wsUrl = process.env.WEFT_URL.replace('http://', 'ws://') + '/ws';

const tools = [{
  type: 'function',
  function: {
    name: 'lookup',
    parameters: {
      type: 'object',
      properties: { word: { type: 'string', minLength: 1, maxLength: 10 }, limit: { type: 'integer', minimum: 1, maximum: 5 } },
      required: ['word', 'limit'],
      additionalProperties: false,
    },
  },
}];

function run(ws, request) {
  return new Promise((resolve, reject) => {
    const frames = [];
    const timer = setTimeout(() => reject(new Error('timed out; frames: ' + JSON.stringify(frames))), 30000);
    const onMessage = (data) => {
      const frame = JSON.parse(data.toString());
      if (frame.id !== request.id) return;
      frames.push(frame);
      if (frame.type === 'done' || frame.type === 'error') {
        clearTimeout(timer);
        ws.off('message', onMessage);
        resolve(frames);
      }
    };
    ws.on('message', onMessage);
    ws.send(JSON.stringify(request));
  });
}

async function main() {
  const ws = new WebSocket(wsUrl);
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });
  const messages = [{ role: 'user', content: 'Look up whales' }];

  const frames = await run(ws, {
    type: 'generate', id: 't1', messages, tools, tool_choice: 'required', parallel_tool_calls: false,
    max_tokens: 100, temperature: 0,
  });
  const done = frames[frames.length - 1];
  assert.strictEqual(done.type, 'done', JSON.stringify(frames));
  assert.strictEqual(done.finish_reason, 'tool_calls');
  assert.strictEqual(done.tool_calls.length, 1);
  const call = done.tool_calls[0];
  assert.match(call.id, /^call_/);
  assert.strictEqual(call.function.name, 'lookup');
  const args = JSON.parse(call.function.arguments);
  assert.ok(typeof args.word === 'string' && args.word.length >= 1 && args.word.length <= 10);
  assert.ok(Number.isInteger(args.limit) && args.limit >= 1 && args.limit <= 5);
  // The frames add up to the done frame's call; token frames carry no call markup.
  const start = frames.find((f) => f.type === 'tool_call');
  assert.deepStrictEqual([start.call_index, start.call_id, start.name], [0, call.id, 'lookup']);
  const streamed = frames.filter((f) => f.type === 'tool_call_arguments').map((f) => f.arguments).join('');
  assert.strictEqual(streamed, call.function.arguments);
  const text = frames.filter((f) => f.type === 'token').map((f) => f.text).join('');
  assert.strictEqual(text, '');
  assert.ok(frames.filter((f) => f.type === 'token').reduce((n, f) => n + f.token_ids.length, 0) > 0);
  console.log('ok   ws tool call:', call.function.arguments);

  // A bad tool is an invalid_parameter error frame naming it.
  const bad = await run(ws, { type: 'generate', id: 't2', messages, tools: [{ type: 'function', function: {} }] });
  assert.strictEqual(bad[0].type, 'error');
  assert.strictEqual(bad[0].code, 'invalid_parameter');
  assert.match(bad[0].message, /^tools\[0\]\.function\.name: is required/);
  console.log('ok   ws bad tools');
  ws.close();
}

main().then(() => console.log('all websocket tools checks passed'), (err) => {
  console.error('FAIL', err);
  process.exit(1);
});
