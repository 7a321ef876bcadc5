// Beam search and FSD over the WebSocket protocol (docs/websocket.md): a beam request's n
// samples arrive as token frames with their index and one done frame per sample; FSD and
// randomized FSD take their fields; a bad field is answered with an error frame.
const path = require('path');
const assert = require('assert');
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'ws'));
const wsUrl = process.env.WEFT_URL.replace('http://', 'ws://') + '/ws';

function open() {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

async function main() {
  const ws = await open();
  const frames = [];
  let wake = null;
  ws.on('message', (data) => {
    frames.push(JSON.parse(data.toString()));
    if (wake) wake();
  });
  const until = async (pred, what) => {
    const deadline = Date.now() + 30000;
    while (!pred()) {
      if (Date.now() > deadline) throw new Error('timed out waiting for ' + what + ': ' + JSON.stringify(frames).slice(0, 2000));
      await new Promise((r) => { wake = r; setTimeout(r, 200); });
    }
  };
  const of = (id, type) => frames.filter((f) => f.id === id && f.type === type);
  const ended = (id, n) => () => of(id, 'done').length + of(id, 'error').length >= n;

  ws.send(JSON.stringify({ type: 'generate', id: 'beam', prompt: 'The whale', max_tokens: 5, beam_width: 3, n: 2, length_penalty: 0.5, ignore_eos: true }));
  ws.send(JSON.stringify({ type: 'generate', id: 'fsd', prompt: 'The whale', max_tokens: 6, fsd: 'fsd', fsd_k: 4, fsd_alpha: 0.5, fsd_n: 3, fsd_beta: 0.9, fsd_pool_size: 30, ignore_eos: true }));
  ws.send(JSON.stringify({ type: 'generate', id: 'rfsd', prompt: 'The whale', max_tokens: 6, fsd: 'random_fsd', fsd_random_steps: 4, fsd_random_prob: 0.5, seed: 2, ignore_eos: true }));
  ws.send(JSON.stringify({ type: 'generate', id: 'bad', prompt: 'The whale', beam_width: 2, top_k: 4 }));
  await until(() => ended('beam', 2)() && ended('fsd', 1)() && ended('rfsd', 1)() && ended('bad', 1)(), 'all requests');

  const beamDone = of('beam', 'done');
  assert.strictEqual(beamDone.length, 2, 'one done frame per sample');
  for (const index of [0, 1]) {
    const tokens = of('beam', 'token').filter((f) => (f.index || 0) === index);
    assert.strictEqual(tokens.reduce((n, f) => n + f.token_ids.length, 0), 5, 'beam ' + index + ' has 5 tokens');
  }
  for (const id of ['fsd', 'rfsd']) {
    assert.strictEqual(of(id, 'done').length, 1, id);
    assert.strictEqual(of(id, 'done')[0].finish_reason, 'length', id);
  }
  const bad = of('bad', 'error');
  assert.strictEqual(bad.length, 1);
  assert.ok(/beam_width: cannot be combined/.test(JSON.stringify(bad[0])), JSON.stringify(bad[0]));
  ws.close();
  console.log('all decoding websocket checks passed');
}

main().catch((e) => { console.log('FAIL', e.stack || e); process.exit(1); });
