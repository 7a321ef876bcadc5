// The `ws` npm package against `weft serve`'s /ws (docs/websocket.md): three requests
// multiplexed on one connection, one cancelled mid-stream; every bad frame answered with an
// error frame while the connection keeps serving; a connection that keeps violating the
// protocol is closed with 1008.
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

// Collects frames by id; `until(pred)` resolves once pred(frames) holds.
function collector(ws) {
  const frames = [];
  const waiters = [];
  ws.on('message', (data, isBinary) => {
    assert.ok(!isBinary, 'the server sends text frames');
    frames.push(JSON.parse(data.toString()));
    for (const w of waiters.slice()) if (w.pred(frames)) { waiters.splice(waiters.indexOf(w), 1); w.resolve(); }
  });
  return {
    frames,
    until(pred, what) {
      if (pred(frames)) return Promise.resolve();
      return new Promise((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error('timed out waiting for ' + what + '; frames: ' + JSON.stringify(frames).slice(0, 2000))), 20000);
        waiters.push({ pred, resolve: () => { clearTimeout(timer); resolve(); } });
      });
    },
  };
}

const doneFor = (id) => (fs) => fs.some((f) => f.id === id && (f.type === 'done' || f.type === 'error'));

async function main() {
  const ws = await open();
  const c = collector(ws);

  // Multiplexing: three requests at once, ids of both kinds; "b" is cancelled mid-stream.
  ws.send(JSON.stringify({ type: 'generate', id: 'a', prompt: 'The whale', max_tokens: 6, temperature: 0 }));
  ws.send(JSON.stringify({ type: 'generate', id: 'b', prompt: 'Call me Ishmael.', max_tokens: 900, ignore_eos: true }));
  ws.send(JSON.stringify({ type: 'generate', id: 7, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 4, top_k: 3, seed: 1 }));
  await c.until((fs) => fs.filter((f) => f.id === 'b' && f.type === 'token').length >= 2, 'tokens of b');
  ws.send(JSON.stringify({ type: 'cancel', id: 'b' }));
  await c.until((fs) => ['a', 'b', 7].every((id) => doneFor(id)(fs)), 'three done frames');
  const done = (id) => c.frames.find((f) => f.id === id && f.type === 'done');
  const tokens = (id) => c.frames.filter((f) => f.id === id && f.type === 'token');
  assert.strictEqual(done('a').finish_reason, 'length');
  assert.strictEqual(done('a').usage.completion_tokens, 6);
  assert.strictEqual(tokens('a').reduce((n, f) => n + f.token_ids.length, 0), 6);
  assert.strictEqual(done('b').finish_reason, 'cancelled');
  assert.ok(done('b').usage.completion_tokens < 900);
  assert.strictEqual(done(7).usage.completion_tokens, tokens(7).reduce((n, f) => n + f.token_ids.length, 0));
  // Nothing for a request after its done frame.
  for (const id of ['a', 'b', 7]) {
    const last = c.frames.map((f) => f.id).lastIndexOf(id);
    assert.strictEqual(c.frames[last].type, 'done', 'the done frame of ' + id + ' is its last');
  }
  console.log('ok   ws multiplexed generate + cancel:', JSON.stringify(tokens('a').map((f) => f.text).join('')));

  // Bad frames: each gets an error frame; the connection serves on.
  const before = c.frames.length;
  const errorAfter = (n, pred, what) => c.until((fs) => fs.slice(n).some((f) => f.type === 'error' && pred(f)), what);
  ws.send('this is not json');
  await errorAfter(before, (f) => f.code === 'invalid_json' && f.id === null, 'invalid_json');
  ws.send(Buffer.from([1, 2, 3]), { binary: true });
  await errorAfter(before, (f) => f.code === 'binary_frame', 'binary_frame');
  ws.send(JSON.stringify({ type: 'dance', id: 'x' }));
  await errorAfter(before, (f) => f.id === 'x' && /type: "dance"/.test(f.message), 'unknown type');
  ws.send(JSON.stringify({ type: 'generate', prompt: 'x' }));
  await errorAfter(before, (f) => /^id: /.test(f.message) && f.id === null, 'missing id');
  ws.send(JSON.stringify({ type: 'generate', id: 'p', prompt: 'x', top_p: 2 }));
  await errorAfter(before, (f) => f.id === 'p' && f.code === 'invalid_parameter' && /^top_p: /.test(f.message), 'bad top_p');
  ws.send(JSON.stringify({ type: 'cancel', id: 'nobody' }));
  await errorAfter(before, (f) => f.id === 'nobody' && f.code === 'unknown_id', 'unknown cancel');
  ws.send(JSON.stringify({ type: 'generate', id: 'd', prompt: 'The whale', max_tokens: 400, ignore_eos: true }));
  ws.send(JSON.stringify({ type: 'generate', id: 'd', prompt: 'The whale', max_tokens: 2 }));
  await errorAfter(before, (f) => f.id === 'd' && f.code === 'duplicate_id', 'duplicate id');
  ws.send(JSON.stringify({ type: 'cancel', id: 'd' }));
  await c.until((fs) => fs.some((f) => f.id === 'd' && f.type === 'done'), 'done of d');
  assert.strictEqual(c.frames.find((f) => f.id === 'd' && f.type === 'done').finish_reason, 'cancelled');
  ws.send(JSON.stringify({ type: 'generate', id: 'after', prompt: 'The whale', max_tokens: 2 }));
  await c.until(doneFor('after'), 'done after bad frames');
  assert.strictEqual(c.frames.find((f) => f.id === 'after').type, 'token');
  console.log('ok   ws bad frames answered, connection still serving');
  ws.close();

  // A client that keeps violating the protocol is closed with 1008 (policy violation).
  const bad = await open();
  const closed = new Promise((resolve) => bad.on('close', (code, reason) => resolve([code, reason.toString()])));
  bad.on('message', () => {});
  for (let i = 0; i < 10; ++i) bad.send('{');
  const [code, reason] = await closed;
  assert.strictEqual(code, 1008);
  assert.match(reason, /protocol violations/);
  console.log('ok   ws repeated violations closed with', code, reason);

  // An oversized message closes with 1009 (message too big).
  const big = await open();
  const bigClosed = new Promise((resolve) => big.on('close', (code) => resolve(code)));
  big.on('error', () => {});
  big.send(JSON.stringify({ type: 'generate', id: 1, prompt: 'a'.repeat(1100000) }));
  assert.strictEqual(await bigClosed, 1009);
  console.log('ok   ws oversized message closed with 1009');
}

main().then(() => console.log('all websocket checks passed'), (err) => {
  console.error('FAIL', err);
  process.exit(1);
});
