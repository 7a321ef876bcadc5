// Load on `weft serve` (docs/PERFORMANCE.md, "Gateway load"): WS WebSocket streams and SSE
// server-sent-event streams at once on loopback, every one checked, then idle connections.
// Run through bench/gateway_load.sh, which starts the server; by hand:
//   WEFT_URL=http://127.0.0.1:PORT WEFT_SERVER_PID=PID WEFT_NODE=DIR node bench/gateway_load.js
// Options (environment): WS=256 SSE=256 MAX_TOKENS=48 CANCEL_EVERY=8 IDLE=1000.
//
// Checks: each request that is not cancelled receives exactly the greedy text of its prompt
// (fetched once per prompt without streaming), token by token in order, then one done frame
// (WS) or `data: [DONE]` (SSE); each cancelled WebSocket request ends with `cancelled` and
// gets nothing after; each SSE client that disconnects mid-stream has its request cancelled
// (counted by /metrics). Reports: the gateway thread's CPU time per streamed token, peak
// connections, and memory per idle WebSocket and per idle HTTP keep-alive connection.
const path = require('path');
const fs = require('fs');
const http = require('http');
const net = require('net');
const WebSocket = require(path.join(process.env.WEFT_NODE, 'node_modules', 'ws'));

const base = process.env.WEFT_URL;
const pid = Number(process.env.WEFT_SERVER_PID);
const WS = Number(process.env.WS || 256);
const SSE = Number(process.env.SSE || 256);
const MAX_TOKENS = Number(process.env.MAX_TOKENS || 48);
const CANCEL_EVERY = Number(process.env.CANCEL_EVERY || 8);
const IDLE = Number(process.env.IDLE || 1000);
const PROMPTS = ['The whale', 'Call me Ishmael.', 'It was the best of times', 'Mr. Speaker,',
  'The sea was', 'In the beginning', 'Our nation', 'Fellow citizens', 'The ship sailed',
  'Captain Ahab', 'We the people', 'Four score and', 'The harpoon', 'Ask not what',
  'The storm rose', 'Queequeg said'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const failures = [];
const check = (ok, what) => { if (!ok) failures.push(what); };

// CPU seconds of the server's threads, by name (utime + stime from /proc).
function cpuByThread() {
  const tick = 100;  // USER_HZ on Linux
  const out = {};
  for (const tid of fs.readdirSync(`/proc/${pid}/task`)) {
    const comm = fs.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    const stat = fs.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    out[comm] = (out[comm] || 0) + (Number(fields[11]) + Number(fields[12])) / tick;
  }
  return out;
}
function rssKiB() {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Number(m[1]);
}

function post(route, body) {
  return new Promise((resolve, reject) => {
    const req = http.request(base + route, { method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve(JSON.parse(text)));
    });
    req.on('error', reject);
    req.end(JSON.stringify(body));
  });
}
async function metrics() {
  const text = await (await fetch(base + '/metrics')).text();
  const get = (re) => { const m = text.match(re); return m ? Number(m[1]) : NaN; };
  return {
    peak: get(/^weft_gateway_connections_peak (\S+)$/m),
    cancelled: get(/^weft_requests_finished_total\{finish_reason="cancelled"\} (\S+)$/m),
  };
}

const body = (i) => ({ prompt: PROMPTS[i % PROMPTS.length], max_tokens: MAX_TOKENS,
  temperature: 0, ignore_eos: true });

function runWs(i, reference, stats) {
  return new Promise((resolve) => {
    const ws = new WebSocket(base.replace('http://', 'ws://') + '/ws');
    const cancel = i % CANCEL_EVERY === CANCEL_EVERY - 1;
    let text = '', tokens = 0, done = null;
    ws.on('error', (e) => { check(false, `ws ${i}: ${e.message}`); resolve(); });
    ws.on('open', () => ws.send(JSON.stringify({ type: 'generate', id: i, ...body(i) })));
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString());
      check(f.id === i, `ws ${i}: a frame of another id ${f.id}`);
      check(done === null, `ws ${i}: a frame after done`);
      if (f.type === 'token') {
        text += f.text; tokens += f.token_ids.length; stats.tokens += f.token_ids.length;
        if (cancel && tokens >= 4 && tokens - f.token_ids.length < 4) {
          ws.send(JSON.stringify({ type: 'cancel', id: i }));
        }
      } else if (f.type === 'done') {
        done = f;
        if (cancel) {
          check(f.finish_reason === 'cancelled' || tokens === MAX_TOKENS, `ws ${i}: not cancelled`);
          check(reference.startsWith(text), `ws ${i}: cancelled text is not a prefix`);
          stats.cancelled++;
        } else {
          check(f.finish_reason === 'length' && tokens === MAX_TOKENS &&
                f.usage.completion_tokens === MAX_TOKENS, `ws ${i}: ${tokens} tokens, ${f.finish_reason}`);
          check(text === reference, `ws ${i}: text differs from the reference`);
          stats.complete++;
        }
        setTimeout(() => { ws.close(); resolve(); }, 50);  // nothing may follow done
      } else {
        check(false, `ws ${i}: ${JSON.stringify(f)}`);
      }
    });
  });
}

function runSse(i, reference, stats) {
  return new Promise((resolve) => {
    const disconnect = i % CANCEL_EVERY === CANCEL_EVERY - 1;
    const req = http.request(base + '/v1/completions', { method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let buffer = '', text = '', chunks = 0, finish = null, doneSeen = false;
      res.setEncoding('utf8');
      res.on('data', (d) => {
        buffer += d;
        let cut;
        while ((cut = buffer.indexOf('\n\n')) >= 0) {
          const event = buffer.slice(0, cut); buffer = buffer.slice(cut + 2);
          const data = event.replace(/^data: /, '');
          check(!doneSeen, `sse ${i}: an event after [DONE]`);
          if (data === '[DONE]') { doneSeen = true; continue; }
          const chunk = JSON.parse(data);
          const choice = chunk.choices[0];
          text += choice.text; chunks++;
          if (choice.text.length) stats.tokens++;
          if (choice.finish_reason) finish = choice.finish_reason;
          if (disconnect && chunks === 4) {
            req.destroy(); stats.disconnected++; resolve(); return;
          }
        }
      });
      res.on('end', () => {
        check(doneSeen && finish === 'length', `sse ${i}: ended without [DONE] or length`);
        check(text === reference, `sse ${i}: text differs from the reference`);
        stats.complete++;
        resolve();
      });
      res.on('error', () => resolve());
    });
    req.on('error', (e) => { if (!disconnect) check(false, `sse ${i}: ${e.message}`); resolve(); });
    req.end(JSON.stringify({ ...body(i), stream: true }));
  });
}

// Run first, on a fresh server, so that heap freed by the load cannot hide the growth: RSS
// before and after opening COUNT idle HTTP keep-alive connections, then COUNT idle
// WebSocket connections on top; all closed again before the load.
async function idleConnections(count) {
  const before = rssKiB();
  const agent = new http.Agent({ keepAlive: true, maxSockets: count, maxFreeSockets: count });
  await Promise.all(Array.from({ length: count }, () => new Promise((resolve, reject) => {
    http.get(base + '/health', { agent }, (res) => { res.resume(); res.on('end', resolve); })
      .on('error', reject);
  })));
  await sleep(500);
  const withHttp = rssKiB();
  const sockets = [];
  for (let i = 0; i < count; ++i) {
    sockets.push(await new Promise((resolve, reject) => {
      const ws = new WebSocket(base.replace('http://', 'ws://') + '/ws');
      ws.once('open', () => resolve(ws)); ws.once('error', reject);
    }));
  }
  await sleep(500);
  const withWs = rssKiB();
  for (const ws of sockets) ws.close();
  agent.destroy();
  await sleep(1000);
  return { httpKiB: (withHttp - before) / count, wsKiB: (withWs - withHttp) / count };
}

async function main() {
  const idle = await idleConnections(IDLE);
  const references = [];
  for (let p = 0; p < PROMPTS.length; ++p) {
    const r = await post('/v1/completions', body(p));
    references.push(r.choices[0].text);
  }
  const m0 = await metrics();
  const cpu0 = cpuByThread();
  const stats = { tokens: 0, complete: 0, cancelled: 0, disconnected: 0 };
  const t0 = process.hrtime.bigint();
  const work = [];
  for (let i = 0; i < Math.max(WS, SSE); ++i) {
    if (i < WS) work.push(runWs(i, references[i % PROMPTS.length], stats));
    if (i < SSE) work.push(runSse(i, references[i % PROMPTS.length], stats));
  }
  let last = 0;
  const progress = setInterval(() => {
    if (stats.tokens !== last) process.stderr.write(`  ${stats.tokens} tokens streamed\r`);
    last = stats.tokens;
  }, 1000);
  await Promise.all(work);
  clearInterval(progress);
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9;
  const cpu1 = cpuByThread();
  await sleep(500);
  const m1 = await metrics();
  const expectCancelled = Math.floor(WS / CANCEL_EVERY) + Math.floor(SSE / CANCEL_EVERY);
  check(m1.cancelled - m0.cancelled >= expectCancelled,
        `cancelled requests: ${m1.cancelled - m0.cancelled} of ${expectCancelled}`);
  const gatewayCpu = (cpu1['weft-gateway'] || 0) - (cpu0['weft-gateway'] || 0);
  const engineCpu = Object.keys(cpu1).filter((k) => k !== 'weft-gateway')
    .reduce((s, k) => s + cpu1[k] - (cpu0[k] || 0), 0);
  const result = {
    ws_streams: WS, sse_streams: SSE, max_tokens: MAX_TOKENS,
    completed: stats.complete, cancelled_ws: stats.cancelled, disconnected_sse: stats.disconnected,
    tokens_streamed: stats.tokens, seconds: +seconds.toFixed(2),
    tokens_per_second: Math.round(stats.tokens / seconds),
    gateway_cpu_s: +gatewayCpu.toFixed(2), engine_cpu_s: +engineCpu.toFixed(2),
    gateway_us_per_token: +(gatewayCpu * 1e6 / stats.tokens).toFixed(1),
    peak_connections: m1.peak,
    idle_connections: IDLE, rss_kib_per_idle_ws: +idle.wsKiB.toFixed(1),
    rss_kib_per_idle_http: +idle.httpKiB.toFixed(1),
    failures: failures.length,
  };
  console.log(JSON.stringify(result, null, 1));
  if (failures.length) {
    console.error('FAILED checks (first 10):\n  ' + failures.slice(0, 10).join('\n  '));
    process.exit(1);
  }
  console.log('gateway load: all checks passed');
}

main().catch((e) => { console.error(e); process.exit(1); });
