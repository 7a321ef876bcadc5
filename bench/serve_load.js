// Load and faults against a running `weft serve` on loopback (docs/reliability.md, "Server
// under load and faults"), with the real clients: the `openai` npm package (SSE) and `ws`.
//   WEFT_URL=http://127.0.0.1:PORT WEFT_SERVER_PID=PID WEFT_NODE=DIR node bench/serve_load.js
// bench/serve_load.sh and the ctest wrappers (tests/tools/serve.cmake) start the server.
// PHASES (comma separated, default "streams,cancel") picks what runs:
// - streams: STREAMS requests (greedy; TEMPERATURE=0.8 makes them seeded, seed = index;
//   ignore_eos), alternately over SSE (openai client) and WebSocket (ws), all at once; each is
//   checked against the same request run alone beforehand: WebSocket token ids equal exactly
//   (every token once, in order), SSE text equal exactly and completion_tokens = MAX_TOKENS.
//   Seeded requests are not all batch-invariant on the CPU path (docs/reliability.md).
// - cancel: STORM streams at once, of which half are cut at a random token: openai client
//   AbortController, raw socket destroy mid-SSE, ws terminate(), ws `cancel` frame; then
//   /metrics must show KV pages used, running, waiting and live requests back to 0 within
//   SETTLE_S seconds.
// - overload: a burst of 4 x LIVE_LIMIT raw HTTP requests (the server runs with
//   --max-live-requests LIVE_LIMIT and --max-queued-requests); refusals must be 429 or 503 with
//   Retry-After and OpenAI's error JSON; then the server must serve requests again, and the
//   openai client (which honours Retry-After) must get through a second burst.
// - slow: SLOW SSE readers that read nothing (paused sockets) on long generations: the
//   server's RSS must grow by less than SLOW_RSS_MB over a warm-up of the same requests read
//   at full speed, and with --send-timeout-s their requests must be cancelled
//   (weft_gateway_send_timeouts_total; all of them with SLOW_EXPECT_TIMEOUTS=1) and their
//   pages freed. SLOW_HOLD=1 (with --send-timeout-s 0) keeps them paused until the engine has
//   generated every token, and measures what the server then holds for them.
// - soak: mixed load (streams, cancels, disconnects) for SOAK_S seconds, sampling RSS and KV
//   pages every SAMPLE_S seconds; prints the table; fails if RSS after warm-up grows by more
//   than SOAK_RSS_MB or pages do not return to 0.
// Prints `ok ...` lines, a JSON summary, and `all serve_load checks passed` or FAIL lines.
const path = require('path');
const fs = require('fs');
const http = require('http');
const nodeDir = process.env.WEFT_NODE || process.env.WEFT_TEST_NODE;
const WebSocket = require(path.join(nodeDir, 'node_modules', 'ws'));
const { OpenAI } = require(path.join(nodeDir, 'node_modules', 'openai'));

const base = process.env.WEFT_URL;
const pid = Number(process.env.WEFT_SERVER_PID);
const env = (name, dflt) => (process.env[name] !== undefined ? process.env[name] : dflt);
const PHASES = env('PHASES', 'streams,cancel').split(',');
const STREAMS = Number(env('STREAMS', 64));
const MAX_TOKENS = Number(env('MAX_TOKENS', 24));
const STORM = Number(env('STORM', 64));
const SETTLE_S = Number(env('SETTLE_S', 20));
const LIVE_LIMIT = Number(env('LIVE_LIMIT', 4));
const SLOW = Number(env('SLOW', 8));
const SLOW_TOKENS = Number(env('SLOW_TOKENS', 900));
const SLOW_RSS_MB = Number(env('SLOW_RSS_MB', 32));
const SOAK_S = Number(env('SOAK_S', 60));
const SAMPLE_S = Number(env('SAMPLE_S', 10));
const SOAK_RSS_MB = Number(env('SOAK_RSS_MB', 64));
const SOAK_CLIENTS = Number(env('SOAK_CLIENTS', 32));
const PROMPTS = ['The whale', 'Call me Ishmael.', 'It was the best of times', 'Mr. Speaker,',
  'The sea was', 'In the beginning', 'Our nation', 'Fellow citizens', 'The ship sailed',
  'Captain Ahab', 'We the people', 'Four score and', 'The harpoon', 'Ask not what',
  'The storm rose', 'Queequeg said'];
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const failures = [];
const summary = {};
const check = (ok, what) => {
  if (!ok) {
    failures.push(what);
    console.log('FAIL ' + what);
  }
  return ok;
};
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 0, timeout: 120000 });

function rssKiB() {
  const m = fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+) kB/);
  return Number(m[1]);
}

async function metrics() {
  const text = await (await fetch(base + '/metrics')).text();
  const get = (name) => {
    const m = text.match(new RegExp('^' + name.replace(/[{}"]/g, (c) => '\\' + c) + ' (\\S+)$', 'm'));
    return m ? Number(m[1]) : NaN;
  };
  return {
    pages: get('weft_kv_pages_used'), running: get('weft_requests_running'),
    waiting: get('weft_requests_waiting'), live: get('weft_gateway_live_requests'),
    queued: get('weft_gateway_queued_requests'), connections: get('weft_gateway_connections'),
    cancelled: get('weft_requests_finished_total{finish_reason="cancelled"}'),
    sendTimeouts: get('weft_gateway_send_timeouts_total'),
    refused: get('weft_gateway_requests_refused_total'),
    throttled: get('weft_gateway_requests_throttled_total'),
  };
}

// Waits until the engine and the gateway hold nothing: no pages, no sequences, no live answers.
async function settle(what) {
  const end = Date.now() + SETTLE_S * 1000;
  let m;
  for (;;) {
    m = await metrics();
    if (m.pages === 0 && m.running === 0 && m.waiting === 0 && m.live === 0) break;
    if (Date.now() > end) break;
    await sleep(50);
  }
  check(m.pages === 0 && m.running === 0 && m.waiting === 0 && m.live === 0,
    `${what}: after ${SETTLE_S} s /metrics still shows pages ${m.pages}, running ${m.running}, ` +
    `waiting ${m.waiting}, live ${m.live}`);
  return m;
}

const TEMPERATURE = Number(env('TEMPERATURE', 0));
const params = (i, maxTokens = MAX_TOKENS) => ({
  model: 'weft-tiny', prompt: PROMPTS[i % PROMPTS.length], max_tokens: maxTokens,
  temperature: TEMPERATURE, seed: i, ignore_eos: true,
});

// One WebSocket request: its token ids, text and done frame. `cut` (a token count) ends it
// early: 'terminate' drops the TCP connection, 'cancel' sends a cancel frame.
function wsRequest(i, { maxTokens = MAX_TOKENS, cutAt = -1, how = 'cancel' } = {}) {
  return new Promise((resolve) => {
    const ws = new WebSocket(base.replace('http://', 'ws://') + '/ws');
    const out = { ids: [], text: '', done: null, error: null, cut: false };
    ws.on('error', (e) => { out.error = out.error || e.message; resolve(out); });
    ws.on('open', () => ws.send(JSON.stringify({ type: 'generate', id: i, ...params(i, maxTokens) })));
    ws.on('message', (data) => {
      const f = JSON.parse(data.toString());
      if (f.type === 'token') {
        out.ids.push(...f.token_ids);
        out.text += f.text;
        if (out.ids.length >= cutAt && cutAt >= 0 && !out.cut) {
          out.cut = true;
          if (how === 'terminate') {
            ws.terminate();
            resolve(out);
          } else {
            ws.send(JSON.stringify({ type: 'cancel', id: i }));
          }
        }
      } else if (f.type === 'done') {
        out.done = f;
        ws.close();
        resolve(out);
      } else if (f.type === 'error') {
        out.error = f.code + ': ' + f.message;
        ws.close();
        resolve(out);
      }
    });
    ws.on('close', () => resolve(out));
  });
}

// One SSE request through the openai client; `cutAt` aborts it after that many chunks.
async function sseRequest(i, { maxTokens = MAX_TOKENS, cutAt = -1 } = {}) {
  const out = { text: '', chunks: 0, usage: null, finish: null, error: null, cut: false };
  const abort = new AbortController();
  try {
    const stream = await client.completions.create(
      { ...params(i, maxTokens), stream: true, stream_options: { include_usage: true } },
      { signal: abort.signal });
    for await (const chunk of stream) {
      if (chunk.choices.length) {
        out.text += chunk.choices[0].text;
        if (chunk.choices[0].finish_reason) out.finish = chunk.choices[0].finish_reason;
        if (++out.chunks >= cutAt && cutAt >= 0) {
          out.cut = true;
          abort.abort();
          break;
        }
      }
      if (chunk.usage) out.usage = chunk.usage;
    }
  } catch (e) {
    if (!out.cut) out.error = e.message;
  }
  return out;
}

// A raw SSE request whose socket is destroyed after `cutAt` data lines (no FIN courtesy).
function rawSseDestroy(i, cutAt) {
  return new Promise((resolve) => {
    const req = http.request(base + '/v1/completions', { method: 'POST', agent: false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let lines = 0;
      res.on('data', (d) => {
        lines += (d.toString().match(/^data: /mg) || []).length;
        if (lines >= cutAt) { req.socket.destroy(); resolve(lines); }
      });
      res.on('end', () => resolve(lines));
      res.on('error', () => resolve(lines));
    });
    req.on('error', () => resolve(-1));
    req.end(JSON.stringify({ ...params(i), max_tokens: 400, stream: true }));
  });
}

async function phaseStreams() {
  // References: each request alone, over WebSocket (token ids) and HTTP (text).
  const t0 = Date.now();
  const ref = [];
  for (let i = 0; i < STREAMS; ++i) {
    const r = await wsRequest(i);
    check(r.done && r.ids.length === MAX_TOKENS, `reference ${i}: ${r.error || r.ids.length + ' tokens'}`);
    ref.push(r);
  }
  const refMs = Date.now() - t0;
  const t1 = Date.now();
  const rss0 = rssKiB();
  let peakConnections = 0;
  const poll = setInterval(async () => {
    try { peakConnections = Math.max(peakConnections, (await metrics()).connections); } catch {}
  }, 100);
  const results = await Promise.all(Array.from({ length: STREAMS }, (_, i) =>
    (i % 2 ? wsRequest(i) : sseRequest(i)).then((r) => [i, r])));
  clearInterval(poll);
  const concMs = Date.now() - t1;
  let tokens = 0, lost = 0, mismatched = 0;
  for (const [i, r] of results) {
    if (i % 2) {
      const same = r.done && r.done.finish_reason === 'length' &&
        r.ids.length === ref[i].ids.length && r.ids.every((t, k) => t === ref[i].ids[k]);
      if (!same) ++mismatched;
      lost += Math.max(0, ref[i].ids.length - r.ids.length);
      tokens += r.ids.length;
      const k = r.ids.findIndex((t, j) => t !== ref[i].ids[j]);
      check(same, `ws stream ${i}: ${r.error || ''} got ${r.ids.length} ids, first difference ` +
        `from the request alone at token ${k}: ${JSON.stringify(r.ids.slice(Math.max(0, k - 2), k + 4))} ` +
        `alone ${JSON.stringify(ref[i].ids.slice(Math.max(0, k - 2), k + 4))}`);
    } else {
      const n = r.usage ? r.usage.completion_tokens : 0;
      const same = !r.error && r.text === ref[i].text && n === MAX_TOKENS && r.finish === 'length';
      if (!same) ++mismatched;
      lost += Math.max(0, MAX_TOKENS - n);
      tokens += n;
      check(same, `sse stream ${i}: ${r.error || ''} text ${JSON.stringify(r.text)} ` +
        `(${n} tokens, ${r.finish}), alone ${JSON.stringify(ref[i].text)}`);
    }
  }
  summary.streams = { streams: STREAMS, sse: Math.ceil(STREAMS / 2), ws: Math.floor(STREAMS / 2),
    max_tokens: MAX_TOKENS, tokens_delivered: tokens, tokens_lost: lost, mismatched,
    peak_connections_seen: peakConnections, reference_ms: refMs, concurrent_ms: concMs,
    rss_delta_kib: rssKiB() - rss0 };
  if (!mismatched) console.log(`ok   ${STREAMS} concurrent streams equal the same requests run alone (${tokens} tokens)`);
  await settle('streams');
}

async function phaseCancel() {
  const before = await metrics();
  const kinds = ['sse-abort', 'sse-destroy', 'ws-terminate', 'ws-cancel'];
  let cut = 0;
  const jobs = Array.from({ length: STORM }, (_, i) => {
    const kind = kinds[i % kinds.length];
    const cutting = (i >> 2) % 2 === 0;  // half of each kind
    const at = cutting ? 1 + Math.floor(Math.random() * 20) : -1;
    if (cutting) ++cut;
    if (kind === 'sse-abort') return sseRequest(1000 + i, { maxTokens: 200, cutAt: at });
    if (kind === 'sse-destroy') return cutting ? rawSseDestroy(1000 + i, at) : sseRequest(1000 + i, { maxTokens: 40 });
    if (kind === 'ws-terminate') return wsRequest(1000 + i, { maxTokens: 200, cutAt: at, how: 'terminate' });
    return wsRequest(1000 + i, { maxTokens: 200, cutAt: at, how: 'cancel' });
  });
  const results = await Promise.all(jobs);
  // The uncut ones must have ended normally.
  let uncutBad = 0;
  results.forEach((r, i) => {
    const cutting = (i >> 2) % 2 === 0;
    if (cutting || typeof r !== 'object') return;
    const ok = r.done ? r.done.finish_reason === 'length' : r.finish === 'length' && !r.error;
    if (!ok) ++uncutBad;
    check(ok, `cancel storm: uncut request ${i} ended ${JSON.stringify(r.done || r.finish)} ${r.error || ''}`);
  });
  const t = Date.now();
  const after = await settle('cancel storm');
  summary.cancel = { streams: STORM, cut, uncut_failed: uncutBad, settle_ms: Date.now() - t,
    cancelled_by_engine: after.cancelled - before.cancelled, pages_after: after.pages };
  if (after.pages === 0) console.log(`ok   cancel storm: ${cut} of ${STORM} streams cut, KV pages back to 0 in ${Date.now() - t} ms`);
}

function rawPost(body, agent) {
  return new Promise((resolve) => {
    const req = http.request(base + '/v1/completions', { method: 'POST', agent: agent || false,
      headers: { 'Content-Type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => { text += d; });
      res.on('end', () => resolve({ status: res.statusCode, headers: res.headers, text }));
    });
    req.on('error', (e) => resolve({ status: -1, text: e.message, headers: {} }));
    req.end(JSON.stringify(body));
  });
}

async function phaseOverload() {
  const burst = 4 * LIVE_LIMIT;
  const answers = await Promise.all(Array.from({ length: burst }, (_, i) =>
    rawPost({ ...params(i), max_tokens: 48 })));
  const byStatus = {};
  for (const a of answers) byStatus[a.status] = (byStatus[a.status] || 0) + 1;
  const refused = answers.filter((a) => a.status === 429 || a.status === 503);
  check(refused.length > 0, `overload: a burst of ${burst} over a limit of ${LIVE_LIMIT} was all served: ${JSON.stringify(byStatus)}`);
  check(answers.every((a) => [200, 429, 503].includes(a.status)), `overload: unexpected statuses ${JSON.stringify(byStatus)}`);
  for (const a of refused) {
    let body = null;
    try { body = JSON.parse(a.text); } catch {}
    check(Number(a.headers['retry-after']) >= 1, `overload: ${a.status} without Retry-After`);
    check(body && body.error && ['overloaded', 'rate_limit_exceeded'].includes(body.error.code) &&
      typeof body.error.message === 'string', `overload: ${a.status} body ${a.text}`);
  }
  // Recovery: once the burst is over, requests are served again.
  await settle('overload');
  const again = [];
  for (let i = 0; i < 4; ++i) again.push(await rawPost({ ...params(i), max_tokens: 8 }));
  check(again.every((a) => a.status === 200), `overload: not recovered: ${again.map((a) => a.status)}`);
  // The openai client retries 429/503 after Retry-After: a second burst gets through whole.
  const retrying = new OpenAI({ baseURL: base + '/v1', apiKey: 'unused', maxRetries: 8 });
  const second = await Promise.all(Array.from({ length: 2 * LIVE_LIMIT }, (_, i) =>
    retrying.completions.create({ ...params(i), max_tokens: 8 }).then(
      (c) => c.usage.completion_tokens, (e) => 'error ' + e.message)));
  check(second.every((n) => n === 8), `overload: openai client with retries: ${second}`);
  summary.overload = { burst, limit: LIVE_LIMIT, statuses: byStatus,
    retry_after: refused.length ? refused[0].headers['retry-after'] : null,
    recovered: again.every((a) => a.status === 200), retried_burst_ok: second.every((n) => n === 8) };
  if (!failures.length) console.log(`ok   overload: ${JSON.stringify(byStatus)} with Retry-After, then served again`);
}

// A raw HTTP SSE request whose socket stops reading once the headers arrived.
function pausedSse(i) {
  return new Promise((resolve) => {
    const net = require('net');
    const u = new URL(base);
    const sock = net.connect({ host: u.hostname, port: Number(u.port) }, () => {
      const body = JSON.stringify({ ...params(i), max_tokens: SLOW_TOKENS, stream: true, logprobs: 20 });
      sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`);
    });
    sock.once('data', () => { sock.pause(); resolve(sock); });
    sock.on('error', () => {});
  });
}

async function phaseSlow() {
  // Warm-up: the same requests streamed and read at full speed, so that the KV pages and
  // buffers they touch count in the baseline and the growth below is what the stalled readers
  // hold (a non-streamed warm-up would build whole answers, as big as the backlog, and hide it).
  await Promise.all(Array.from({ length: SLOW }, (_, i) =>
    rawPost({ ...params(2000 + i), max_tokens: SLOW_TOKENS, logprobs: 20, stream: true })));
  const before = await metrics();
  const rss0 = rssKiB();
  const socks = await Promise.all(Array.from({ length: SLOW }, (_, i) => pausedSse(2000 + i)));
  let peak = rss0;
  const samples = [];
  // Until every paused request has ended in the engine (finished or cancelled by the send
  // timeout), or 120 s.
  const started = Date.now();
  const end = started + 120000;
  let m;
  for (;;) {
    await sleep(250);
    peak = Math.max(peak, rssKiB());
    m = await metrics();
    samples.push(m.pages);
    const engineDone = m.running === 0 && m.waiting === 0;
    // SLOW_HOLD=1 (a server with --send-timeout-s 0): the readers stay paused; measure what
    // the server holds once every token has been generated and waits for them.
    if (engineDone && env('SLOW_HOLD', '0') === '1') {
      await sleep(2000);
      peak = Math.max(peak, rssKiB());
      break;
    }
    if (engineDone && (m.sendTimeouts - before.sendTimeouts >= SLOW || m.live === 0)) break;
    if (Date.now() > end) break;
  }
  // A control request is still served while the slow readers are held.
  const control = await rawPost({ ...params(1), max_tokens: 4 });
  check(control.status === 200, `slow readers: a control request got ${control.status}`);
  const growthMb = (peak - rss0) / 1024;
  check(growthMb < SLOW_RSS_MB, `slow readers: RSS grew ${growthMb.toFixed(1)} MiB (limit ${SLOW_RSS_MB})`);
  const timedOut = m.sendTimeouts - before.sendTimeouts;
  if (env('SLOW_EXPECT_TIMEOUTS', '0') === '1') {
    check(timedOut === SLOW, `slow readers: ${timedOut} of ${SLOW} cut by --send-timeout-s`);
  }
  for (const s of socks) s.destroy();
  const after = await settle('slow readers');
  summary.slow = { readers: SLOW, tokens_each: SLOW_TOKENS, rss_before_mib: +(rss0 / 1024).toFixed(1),
    rss_growth_mib: Number(growthMb.toFixed(1)),
    send_timeouts: timedOut, pages_after: after.pages, live_when_engine_done: m.live,
    waited_ms: Date.now() - started };
  console.log(`ok   slow readers: ${SLOW} paused SSE readers, RSS +${growthMb.toFixed(1)} MiB, ` +
    `${timedOut} cut by the send timeout, pages back to ${after.pages}`);
}

async function phaseSoak() {
  const end = Date.now() + SOAK_S * 1000;
  const table = [];
  let requests = 0, cut = 0, errors = 0, tokens = 0;
  const worker = async (w) => {
    for (let k = 0; Date.now() < end; ++k) {
      const i = w * 100000 + k;
      const mode = k % 6;
      const cutAt = mode >= 4 ? 1 + (k % 7) : -1;
      ++requests;
      if (cutAt >= 0) ++cut;
      const r = (k + w) % 2 ? await wsRequest(i, { maxTokens: 32, cutAt, how: mode === 4 ? 'terminate' : 'cancel' })
        : await sseRequest(i, { maxTokens: 32, cutAt });
      if (cutAt < 0) {
        const n = r.ids ? r.ids.length : (r.usage ? r.usage.completion_tokens : 0);
        tokens += n;
        if (n !== 32 || r.error) { ++errors; check(false, `soak request ${i}: ${r.error || n + ' tokens'}`); }
      }
    }
  };
  const sampler = (async () => {
    const t0 = Date.now();
    while (Date.now() < end) {
      const m = await metrics();
      table.push({ t_s: Math.round((Date.now() - t0) / 1000), rss_mib: +(rssKiB() / 1024).toFixed(1),
        pages: m.pages, running: m.running, connections: m.connections, requests });
      await sleep(SAMPLE_S * 1000);
    }
  })();
  await Promise.all([sampler, ...Array.from({ length: SOAK_CLIENTS }, (_, w) => worker(w))]);
  const after = await settle('soak');
  table.push({ t_s: SOAK_S, rss_mib: +(rssKiB() / 1024).toFixed(1), pages: after.pages,
    running: after.running, connections: after.connections, requests });
  console.log('t_s\trss_mib\tpages\trunning\tconns\trequests');
  for (const r of table) console.log(`${r.t_s}\t${r.rss_mib}\t${r.pages}\t${r.running}\t${r.connections}\t${r.requests}`);
  // Growth after warm-up: the first sample past 20% of the run against the last.
  const warm = table[Math.min(table.length - 1, Math.max(1, Math.floor(table.length / 5)))];
  const growth = table[table.length - 1].rss_mib - warm.rss_mib;
  check(growth < SOAK_RSS_MB, `soak: RSS grew ${growth.toFixed(1)} MiB after warm-up (limit ${SOAK_RSS_MB})`);
  summary.soak = { seconds: SOAK_S, clients: SOAK_CLIENTS, requests, cut, errors, tokens,
    rss_first_mib: table[0].rss_mib, rss_warm_mib: warm.rss_mib,
    rss_last_mib: table[table.length - 1].rss_mib, rss_growth_after_warmup_mib: +growth.toFixed(1),
    peak_pages: Math.max(...table.map((r) => r.pages)), pages_after: after.pages };
}

async function main() {
  const phases = { streams: phaseStreams, cancel: phaseCancel, overload: phaseOverload,
    slow: phaseSlow, soak: phaseSoak };
  for (const p of PHASES) {
    if (!phases[p]) throw new Error(`PHASES: unknown phase "${p}" (streams, cancel, overload, slow, soak)`);
    await phases[p]();
  }
  console.log(JSON.stringify(summary, null, 1));
  if (failures.length) {
    console.log(`FAIL ${failures.length} check(s) failed`);
    process.exit(1);
  }
  console.log('all serve_load checks passed');
}

// Bounded in time whatever happens.
setTimeout(() => { console.log('FAIL serve_load did not finish within its time limit'); process.exit(1); },
  Number(env('LIMIT_S', 600)) * 1000).unref();
main().catch((e) => { console.log('FAIL ' + (e.stack || e)); process.exit(1); });
