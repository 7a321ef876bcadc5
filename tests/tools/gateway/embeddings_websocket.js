// Embeddings over `weft serve`'s /ws with the `ws` npm package (docs/websocket.md#embeddings),
// on a BERT model ($WEFT_BERT, tests/fixtures/bert/random_tiny): one `embeddings` frame
// answers each request with the HTTP route's object (same vectors as POST /v1/embeddings),
// requests on one connection run concurrently, and bad parameters, over-long inputs (unless
// `truncate`), generate on an encoder and unknown types are error frames.
const path = require('path');
const assert = require('assert');
const WebSocket = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'ws'));
const wsUrl = process.env.WEFT_URL.replace('http://', 'ws://') + '/ws';
const model = 'random_tiny';

function close(a, b, tol, what) {
  assert.strictEqual(a.length, b.length, what + ': lengths');
  for (let i = 0; i < a.length; ++i) {
    assert.ok(Math.abs(a[i] - b[i]) <= tol, `${what}: [${i}] ${a[i]} vs ${b[i]}`);
  }
}

// Sends `request` and resolves with the first frame that carries its id.
function run(ws, request) {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out waiting for ' + request.id)), 30000);
    const onMessage = (data) => {
      const frame = JSON.parse(data.toString());
      if (frame.id !== request.id) return;
      clearTimeout(timer);
      ws.off('message', onMessage);
      resolve(frame);
    };
    ws.on('message', onMessage);
    ws.send(JSON.stringify(request));
  });
}

async function post(body) {
  const res = await fetch(process.env.WEFT_URL + '/v1/embeddings', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function main() {
  const ws = new WebSocket(wsUrl);
  await new Promise((resolve, reject) => { ws.once('open', resolve); ws.once('error', reject); });

  // One string: the HTTP route's object, with the frame's type and id.
  const one = await run(ws, { type: 'embeddings', id: 'e1', input: 'hello world', model });
  assert.strictEqual(one.type, 'embeddings', JSON.stringify(one));
  assert.strictEqual(one.object, 'list');
  assert.strictEqual(one.model, model);
  assert.strictEqual(one.data.length, 1);
  assert.strictEqual(one.data[0].object, 'embedding');
  assert.strictEqual(one.data[0].index, 0);
  assert.strictEqual(one.data[0].embedding.length, 32);
  assert.deepStrictEqual(one.usage, { prompt_tokens: 4, total_tokens: 4 });
  const http = await post({ model, input: 'hello world', encoding_format: 'float' });
  assert.strictEqual(http.status, 200);
  close(one.data[0].embedding, http.json.data[0].embedding, 1e-6, 'ws vs http');
  console.log('ok   ws embeddings of one string');

  // An array, token ids, and several requests in flight on the connection at once (integer
  // ids too): each answered by its own frame, with what it gives alone.
  const inputs = ['the quick brown fox', 'hello', 'jumps over the lazy dog'];
  const [batch, ids, alone, cls] = await Promise.all([
    run(ws, { type: 'embeddings', id: 2, input: inputs }),
    run(ws, { type: 'embeddings', id: 'ids', input: [2, 100, 101, 3] }),
    run(ws, { type: 'embeddings', id: 'alone', input: inputs[2] }),
    run(ws, { type: 'embeddings', id: 'cls', input: 'hello world', pooling: 'cls', normalize: true }),
  ]);
  assert.strictEqual(batch.id, 2);
  assert.strictEqual(batch.data.length, 3);
  batch.data.forEach((d, i) => assert.strictEqual(d.index, i));
  close(batch.data[2].embedding, alone.data[0].embedding, 1e-5, 'batched vs alone');
  close(ids.data[0].embedding, one.data[0].embedding, 1e-6, 'token ids vs text');
  const norm = Math.sqrt(cls.data[0].embedding.reduce((s, x) => s + x * x, 0));
  assert.ok(Math.abs(norm - 1) < 1e-5, 'normalize: norm ' + norm);
  console.log('ok   ws arrays, token ids, concurrent requests, pooling');

  // base64 and dimensions as over HTTP.
  const b64 = await run(ws, { type: 'embeddings', id: 'b', input: 'hello world', encoding_format: 'base64', dimensions: 8 });
  const bytes = Buffer.from(b64.data[0].embedding, 'base64');
  const floats = Array.from({ length: bytes.length / 4 }, (_, i) => bytes.readFloatLE(4 * i));
  close(floats, one.data[0].embedding.slice(0, 8).map(Math.fround), 0, 'base64');
  console.log('ok   ws base64 and dimensions');

  // Too long: an error naming the input, its tokens and the limit; with truncate, the first
  // 40 tokens ([CLS], 38 words, [SEP]).
  const long = 'fox '.repeat(50);
  const tooLong = await run(ws, { type: 'embeddings', id: 'long', input: ['ok', long] });
  assert.strictEqual(tooLong.type, 'error');
  assert.strictEqual(tooLong.code, 'invalid_request');
  assert.match(tooLong.message, /input\[1\]: 52 tokens exceed the model's 40 positions/);
  const cut = await run(ws, { type: 'embeddings', id: 'cut', input: long, truncate: true });
  assert.strictEqual(cut.type, 'embeddings', JSON.stringify(cut));
  assert.strictEqual(cut.usage.prompt_tokens, 40);
  const same = await run(ws, { type: 'embeddings', id: 'same', input: 'fox '.repeat(38) });
  assert.strictEqual(same.usage.prompt_tokens, 40);
  close(cut.data[0].embedding, same.data[0].embedding, 1e-6, 'truncated vs shorter text');
  console.log('ok   ws truncation');

  // Errors: bad parameters name themselves; an encoder does not generate; unknown types.
  const bad = await run(ws, { type: 'embeddings', id: 'd', input: 'hi', dimensions: 99 });
  assert.deepStrictEqual([bad.type, bad.code], ['error', 'invalid_parameter']);
  assert.match(bad.message, /^dimensions: 99 is outside \[1, 32\]/);
  const noInput = await run(ws, { type: 'embeddings', id: 'n' });
  assert.deepStrictEqual([noInput.code, noInput.message], ['invalid_parameter', 'input: required']);
  const badTruncate = await run(ws, { type: 'embeddings', id: 't', input: 'hi', truncate: 'yes' });
  assert.match(badTruncate.message, /^truncate: expected a boolean/);
  const gen = await run(ws, { type: 'generate', id: 'g', prompt: 'hi', max_tokens: 2 });
  assert.deepStrictEqual([gen.type, gen.code], ['error', 'invalid_request']);
  assert.match(gen.message, /encoder-only/);
  const unknown = await run(ws, { type: 'embed', id: 'u', input: 'hi' });
  assert.strictEqual(unknown.code, 'invalid_frame');
  assert.match(unknown.message, /not one of generate, embeddings, cancel/);
  console.log('ok   ws errors');
  ws.close();
}

main().then(() => console.log('all websocket embeddings checks passed'), (err) => {
  console.error('FAIL', err);
  process.exit(1);
});
