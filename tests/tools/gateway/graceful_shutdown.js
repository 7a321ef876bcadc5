// Graceful shutdown of `weft serve` (docs/http-api.md, "Shutdown"), with the `openai` and `ws`
// npm packages. Starts its own servers on free loopback ports:
//   node graceful_shutdown.js WEFT MODEL      (WEFT_TEST_NODE: where setup_node.sh installed)
// 1. Drain: --shutdown-timeout 20; SSE and WebSocket streams in flight when SIGTERM comes
//    finish whole (finish_reason "length", every token); meanwhile new connections are refused,
//    a new request on a kept-alive connection gets 503 `shutting_down` with Retry-After, a new
//    WebSocket generate gets a `shutting_down` error frame; the server exits 0 once they end.
// 2. Deadline: --shutdown-timeout 1 with streams far longer than that: they end with
//    finish_reason "shutdown" after about 1 s, KV pages are all freed, and the exit status is 0.
// 3. A second SIGTERM during the drain exits at once with 128 + 15.
// WEFT_TEST_TIME_SCALE (1 by default; the sanitizer builds set it) multiplies the drain's
// shutdown timeout and the script's own limits: a sanitized server on a loaded machine
// generates the drain's 6 x 200 tokens too slowly for 20 s.
const path = require('path');
const assert = require('assert');
const http = require('http');
const { spawn } = require('child_process');
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'ws'));
const { OpenAI } = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'openai'));
const [weft, model] = process.argv.slice(2);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const timeScale = Number(process.env.WEFT_TEST_TIME_SCALE || 1);

function start(args) {
  return new Promise((resolve, reject) => {
    const proc = spawn(weft, ['serve', '--model', model, '--port', '0', '--threads', '1', ...args],
      { stdio: ['ignore', 'pipe', 'pipe'] });
    let log = '';
    const exited = new Promise((r) => proc.on('exit', (code, signal) => r({ code, signal, at: Date.now() })));
    const onData = (d) => {
      log += d;
      const m = log.match(/on (http:\/\/127\.0\.0\.1:\d+)/);
      if (m) resolve({ proc, url: m[1], exited, log: () => log });
    };
    proc.stdout.on('data', onData);
    proc.stderr.on('data', onData);
    proc.on('exit', () => reject(new Error('weft serve exited early: ' + log)));
    setTimeout(() => reject(new Error('weft serve printed no address: ' + log)), 30000).unref();
  });
}

function wsStream(url, id, maxTokens) {
  return new Promise((resolve, reject) => {
    const ws = new WebSocket(url.replace('http://', 'ws://') + '/ws');
    const out = { ws, tokens: 0, done: null, opened: null };
    out.opened = new Promise((r) => ws.on('open', r));
    ws.on('open', () => ws.send(JSON.stringify({ type: 'generate', id, prompt: 'The whale',
      max_tokens: maxTokens, ignore_eos: true, temperature: 0 })));
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString());
      if (f.type === 'token') out.tokens += f.token_ids.length;
      if (f.type === 'done' || f.type === 'error') { out.done = f; resolve(out); }
    });
    ws.on('error', reject);
    ws.on('close', () => resolve(out));
  });
}

async function sseStream(url, maxTokens, counter) {
  const client = new OpenAI({ baseURL: url + '/v1', apiKey: 'unused', maxRetries: 0 });
  const stream = await client.completions.create({ model: 'weft-tiny', prompt: 'Call me Ishmael.',
    max_tokens: maxTokens, ignore_eos: true, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  const out = { text: '', finish: null, usage: null };
  for await (const chunk of stream) {
    if (chunk.choices.length) {
      out.text += chunk.choices[0].text;
      counter.chunks++;
      if (chunk.choices[0].finish_reason) out.finish = chunk.choices[0].finish_reason;
    }
    if (chunk.usage) out.usage = chunk.usage;
  }
  return out;
}

function post(agent, url, body) {
  return new Promise((resolve) => {
    const req = http.request(url + '/v1/completions', { method: 'POST', agent,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', (e) => resolve({ status: -1, error: e.code || e.message }));
    req.end(JSON.stringify(body));
  });
}

async function metric(url, name) {
  const text = await (await fetch(url + '/metrics')).text();
  return Number(text.match(new RegExp('^' + name + ' (\\S+)$', 'm'))[1]);
}

async function drain() {
  const s = await start(['--shutdown-timeout', String(20 * timeScale)]);
  // A keep-alive connection opened (and used) before the signal.
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  assert.strictEqual((await post(agent, s.url, { prompt: 'Hi', max_tokens: 2 })).status, 200);
  const ws = await wsStream(s.url, 'idle', 1);  // an open WebSocket, its request done
  const counter = { chunks: 0 };
  const sse = [1, 2, 3].map(() => sseStream(s.url, 200, counter));
  const wss = [1, 2, 3].map((i) => wsStream(s.url, i, 200));
  while (counter.chunks < 6) await sleep(5);
  const signalled = Date.now();
  s.proc.kill('SIGTERM');
  await sleep(100);
  // New connections are refused; a kept-alive one gets 503 shutting_down; a WebSocket that is
  // already open gets an error frame for a new generate.
  const fresh = await post(false, s.url, { prompt: 'Hi', max_tokens: 2 });
  assert.strictEqual(fresh.error, 'ECONNREFUSED', 'a new connection while draining: ' + JSON.stringify(fresh));
  const kept = await post(agent, s.url, { prompt: 'Hi', max_tokens: 2 });
  assert.strictEqual(kept.status, 503, 'kept-alive connection while draining: ' + JSON.stringify(kept));
  assert.strictEqual(JSON.parse(kept.text).error.code, 'shutting_down');
  assert.ok(Number(kept.headers['retry-after']) >= 1, 'Retry-After on 503 while draining');
  assert.strictEqual(kept.headers.connection, 'close');
  const refusedFrame = new Promise((r) => ws.ws.on('message', (d) => r(JSON.parse(d.toString()))));
  ws.ws.send(JSON.stringify({ type: 'generate', id: 'late', prompt: 'Hi', max_tokens: 2 }));
  const frame = await refusedFrame;
  assert.strictEqual(frame.type, 'error');
  assert.strictEqual(frame.code, 'shutting_down');
  // The streams in flight finish whole.
  for (const r of await Promise.all(sse)) {
    assert.strictEqual(r.finish, 'length');
    assert.strictEqual(r.usage.completion_tokens, 200);
  }
  for (const r of await Promise.all(wss)) {
    assert.strictEqual(r.done.finish_reason, 'length');
    assert.strictEqual(r.tokens, 200);
  }
  const exit = await s.exited;
  assert.strictEqual(exit.code, 0, 'exit status after draining: ' + JSON.stringify(exit) + s.log());
  assert.ok(exit.at - signalled < 20000 * timeScale, 'drained within the shutdown timeout');
  console.log(`ok   drain: 6 streams finished whole, new work refused, exit 0 after ${exit.at - signalled} ms`);
}

async function deadline() {
  const s = await start(['--shutdown-timeout', '1']);
  const counter = { chunks: 0 };
  const sse = [1, 2].map(() => sseStream(s.url, 1000, counter));
  const wss = [1, 2].map((i) => wsStream(s.url, i, 1000));
  while (counter.chunks < 4) await sleep(5);
  const pagesBefore = await metric(s.url, 'weft_kv_pages_used');
  assert.ok(pagesBefore > 0, 'pages in use while streaming');
  const signalled = Date.now();
  s.proc.kill('SIGTERM');
  for (const r of await Promise.all(sse)) assert.strictEqual(r.finish, 'shutdown');
  for (const r of await Promise.all(wss)) assert.strictEqual(r.done.finish_reason, 'shutdown');
  const exit = await s.exited;
  const ms = exit.at - signalled;
  assert.strictEqual(exit.code, 0, 'exit status after the deadline: ' + JSON.stringify(exit) + s.log());
  assert.ok(ms >= 900 && ms < 8000, `stopped ${ms} ms after SIGTERM with --shutdown-timeout 1`);
  assert.match(s.log(), /still live after the shutdown timeout; cancelling them/);
  console.log(`ok   deadline: 4 long streams ended with finish_reason shutdown, exit 0 after ${ms} ms`);
}

async function secondSignal() {
  const s = await start(['--shutdown-timeout', '60']);
  const w = wsStream(s.url, 1, 1000);
  const first = new Promise((r) => {
    const c = { chunks: 0 };
    sseStream(s.url, 1000, c).catch(() => {});
    const t = setInterval(() => { if (c.chunks > 2) { clearInterval(t); r(); } }, 5);
  });
  await first;
  s.proc.kill('SIGTERM');
  await sleep(200);
  const signalled = Date.now();
  s.proc.kill('SIGTERM');
  const exit = await s.exited;
  await w.catch(() => {});
  assert.strictEqual(exit.code, 128 + 15, 'second SIGTERM: ' + JSON.stringify(exit));
  assert.ok(exit.at - signalled < 2000);
  console.log(`ok   second signal: exit ${exit.code} after ${exit.at - signalled} ms`);
}

setTimeout(() => {
  console.log(`FAIL graceful_shutdown did not finish in ${120 * timeScale} s`);
  process.exit(1);
}, 120000 * timeScale).unref();
(async () => {
  await drain();
  await deadline();
  await secondSignal();
  console.log('graceful shutdown checks passed');
})().catch((e) => { console.log('FAIL ' + (e.stack || e)); process.exit(1); });
