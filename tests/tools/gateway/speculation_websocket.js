// Per-request speculation over the WebSocket protocol (docs/websocket.md) against `weft serve
// --speculate prompt-lookup`: "off" and a capped request give the same greedy tokens as the
// default; a method the server was not started with is an error frame naming the field.
const path = require('path');
const assert = require('assert');
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'ws'));
const wsUrl = process.env.WEFT_URL.replace('http://', 'ws://') + '/ws';

async function main() {
  const ws = await new Promise((resolve, reject) => {
    const w = new WebSocket(wsUrl);
    w.once('open', () => resolve(w));
    w.once('error', reject);
  });
  const frames = [];
  let wake = null;
  ws.on('message', (data) => {
    frames.push(JSON.parse(data.toString()));
    if (wake) wake();
  });
  const of = (id, type) => frames.filter((f) => f.id === id && f.type === type);
  const ended = (id) => of(id, 'done').length + of(id, 'error').length >= 1;
  const until = async (pred, what) => {
    const deadline = Date.now() + 60000;
    while (!pred()) {
      if (Date.now() > deadline) throw new Error('timed out waiting for ' + what + ': ' + JSON.stringify(frames).slice(0, 2000));
      await new Promise((r) => { wake = r; setTimeout(r, 200); });
    }
  };
  const prompt = 'The quick brown fox jumps over the lazy dog. The quick brown fox jumps over the lazy dog. The quick brown fox';
  const base = { type: 'generate', prompt, max_tokens: 20, temperature: 0, ignore_eos: true };
  // One at a time: each request's output must not depend on what shares its steps.
  for (const [id, speculation] of [['off', { method: 'off' }], ['default', undefined], ['capped', { tokens: 2 }], ['string', 'prompt-lookup']]) {
    ws.send(JSON.stringify({ ...base, id, ...(speculation === undefined ? {} : { speculation }) }));
    await until(() => ended(id), id);
  }
  ws.send(JSON.stringify({ ...base, id: 'draft', speculation: { method: 'draft' } }));
  ws.send(JSON.stringify({ ...base, id: 'bad', speculation: { method: 'off', tokens: 100 } }));
  await until(() => ended('draft') && ended('bad'), 'the refused requests');

  const ids = (id) => of(id, 'token').flatMap((f) => f.token_ids);
  assert.strictEqual(ids('off').length, 20, 'off: 20 tokens');
  for (const id of ['default', 'capped', 'string']) {
    assert.strictEqual(of(id, 'done').length, 1, id + ' finished');
    assert.deepStrictEqual(ids(id), ids('off'), id + ' gives the plain greedy tokens');
  }
  const draft = of('draft', 'error');
  assert.strictEqual(draft.length, 1, 'draft refused');
  assert.strictEqual(draft[0].code, 'invalid_request', JSON.stringify(draft[0]));
  assert.ok(/speculation\.method: "draft"/.test(draft[0].message), JSON.stringify(draft[0]));
  const bad = of('bad', 'error');
  assert.strictEqual(bad.length, 1, 'tokens 100 refused');
  assert.ok(/speculation\.tokens: 100 is outside \[1, 64\]/.test(bad[0].message), JSON.stringify(bad[0]));
  ws.close();
  console.log('all speculation websocket checks passed');
}

main().catch((e) => { console.log('FAIL', e.stack || e); process.exit(1); });
