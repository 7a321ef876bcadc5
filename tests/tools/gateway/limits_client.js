// The gateway's limits against `weft serve --max-connections 6
// --max-live-requests 4 --ws-idle-timeout-s 2` (see serve.cmake; slow_reader.py checks the
// --ws-outbox-bytes flow control),
// driven by the `ws` npm package and Node's own HTTP client:
// - generations over --max-live-requests: 503 over HTTP, an `overloaded` error frame on /ws;
// - connections over --max-connections: 503 with OpenAI's error JSON, then served again once
//   connections close;
// - a peer that answers no ping is dropped after the idle time; one that answers stays.
const path = require('path');
const assert = require('assert');
const http = require('http');
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'ws'));
const base = process.env.WEFT_URL;
const wsUrl = base.replace('http://', 'ws://') + '/ws';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function open(options) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(wsUrl, options);
    ws.once('open', () => resolve(ws));
    ws.once('error', reject);
  });
}

function request(method, route, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(base + route, {
      method, agent: false, headers: body ? { 'Content-Type': 'application/json' } : {},
    }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', reject);
    if (body) req.write(JSON.stringify(body));
    req.end();
  });
}

async function metric(name) {
  const { text } = await request('GET', '/metrics');
  const m = text.match(new RegExp('^' + name + ' (\\S+)$', 'm'));
  assert.ok(m, 'metric ' + name + ' in /metrics');
  return Number(m[1]);
}

function framesOf(ws) {
  const frames = [];
  ws.on('message', (data) => frames.push(JSON.parse(data.toString())));
  return frames;
}

async function until(pred, what, ms = 20000) {
  const end = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(20);
  }
}

async function liveRequestLimit() {
  const ws = await open();
  const frames = framesOf(ws);
  for (let i = 0; i < 6; ++i) {
    ws.send(JSON.stringify({ type: 'generate', id: i, prompt: 'The sea', max_tokens: 900, ignore_eos: true }));
  }
  await until(() => frames.filter((f) => f.type === 'error').length === 2, 'two overloaded errors');
  const errors = frames.filter((f) => f.type === 'error');
  assert.ok(errors.every((f) => f.code === 'overloaded'), JSON.stringify(errors));
  const refused = await request('POST', '/v1/completions', { prompt: 'x', max_tokens: 2 });
  assert.strictEqual(refused.status, 503, refused.text);
  assert.strictEqual(JSON.parse(refused.text).error.code, 'overloaded');
  assert.strictEqual(refused.headers['retry-after'], '1', 'Retry-After on 503');
  const refusedIds = errors.map((f) => f.id);
  const accepted = [0, 1, 2, 3, 4, 5].filter((id) => !refusedIds.includes(id));
  for (const id of accepted) ws.send(JSON.stringify({ type: 'cancel', id }));
  await until(() => frames.filter((f) => f.type === 'done').length === 4, 'four cancelled');
  assert.ok(frames.filter((f) => f.type === 'done').every((f) => f.finish_reason === 'cancelled'));
  const ok = await request('POST', '/v1/completions', { prompt: 'x', max_tokens: 2 });
  assert.strictEqual(ok.status, 200, ok.text);
  ws.close();
  console.log('ok   over --max-live-requests: 2 overloaded frames, HTTP 503, served again after');
}

// Polls until `probe` resolves true (connections close on the server a little after the
// client lets go of them, later still on a loaded machine).
async function eventually(probe, what, ms = 15000) {
  const end = Date.now() + ms;
  while (!(await probe())) {
    if (Date.now() > end) throw new Error('timed out waiting for ' + what);
    await sleep(50);
  }
}

async function connectionLimit() {
  // Only the probe's own connection may be held before the count starts.
  await eventually(async () => (await metric('weft_gateway_connections')) === 1,
                   'earlier connections to close');
  const held = [];
  for (let i = 0; i < 6; ++i) held.push(await open());
  const refused = await request('GET', '/health');
  assert.strictEqual(refused.status, 503, refused.text);
  assert.strictEqual(JSON.parse(refused.text).error.code, 'overloaded');
  assert.strictEqual(refused.headers['retry-after'], '1', 'Retry-After on 503');
  assert.ok((await Promise.allSettled([open()]))[0].status === 'rejected', 'WebSocket refused too');
  for (const ws of held) ws.close();
  await eventually(async () => (await request('GET', '/health')).status === 200,
                   'a 200 once the held connections closed');
  assert.ok((await metric('weft_gateway_connections_peak')) >= 7);
  assert.ok((await metric('weft_gateway_connections_refused_total')) >= 2);
  console.log('ok   over --max-connections: 503, served again after they closed');
}

async function idleTimeout() {
  const mute = await open({ autoPong: false });
  const alive = await open();
  const muteClosed = new Promise((r) => mute.on('close', () => r(Date.now())));
  const start = Date.now();
  let aliveClosed = false;
  alive.on('close', () => { aliveClosed = true; });
  const closedAt = await Promise.race([muteClosed, sleep(8000).then(() => null)]);
  assert.ok(closedAt !== null, 'a peer that answers no ping is dropped');
  assert.ok(closedAt - start >= 1500, 'not before the idle time');
  await sleep(1500);
  assert.ok(!aliveClosed, 'a peer that answers pings stays connected');
  alive.close();
  console.log('ok   silent peer dropped after', closedAt - start, 'ms; a ponging one stays');
}

async function main() {
  await liveRequestLimit();
  await connectionLimit();
  await idleTimeout();
}

main().then(() => console.log('all limit checks passed'), (err) => {
  console.error('FAIL', err);
  process.exit(1);
});
