// The official `openai` npm package's embeddings.create against `weft serve` on a BERT model
// ($WEFT_BERT, tests/fixtures/bert/random_tiny): base64 (the package's default) and float
// encodings agree, a batch of inputs and concurrent requests give what single requests give,
// token-id inputs, dimensions, Weft's pooling/normalize, errors as the package's error
// classes, and `weft embed` ($WEFT_BIN) printing the same vectors.
const path = require('path');
const assert = require('assert');
const { execFileSync } = require('child_process');
const { OpenAI } = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'openai'));

const client = new OpenAI({ baseURL: process.env.WEFT_URL + '/v1', apiKey: 'unused', maxRetries: 0 });
const model = 'random_tiny';

function close(a, b, tol, what) {
  assert.strictEqual(a.length, b.length, what + ': lengths');
  for (let i = 0; i < a.length; ++i) {
    assert.ok(Math.abs(a[i] - b[i]) <= tol, `${what}: [${i}] ${a[i]} vs ${b[i]}`);
  }
}

async function rawPost(body) {
  const res = await fetch(process.env.WEFT_URL + '/v1/embeddings', {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
  });
  return { status: res.status, json: await res.json() };
}

async function main() {
  const models = await client.models.list();
  assert.deepStrictEqual(models.data.map((m) => m.id), [model]);

  // The package asks for base64 unless told otherwise, and decodes it.
  const one = await client.embeddings.create({ model, input: 'hello world' });
  assert.strictEqual(one.object, 'list');
  assert.strictEqual(one.model, model);
  assert.strictEqual(one.data.length, 1);
  assert.strictEqual(one.data[0].object, 'embedding');
  assert.strictEqual(one.data[0].embedding.length, 32);
  assert.deepStrictEqual(one.usage, { prompt_tokens: 4, total_tokens: 4 });
  const raw = await rawPost({ model, input: 'hello world', encoding_format: 'float' });
  assert.strictEqual(raw.status, 200);
  // The float text is the shortest that reads back as the same float32.
  close(one.data[0].embedding, raw.json.data[0].embedding.map(Math.fround), 0, 'base64 vs float');
  console.log('ok   embeddings.create (base64 and float agree)');

  const inputs = ['hello world', 'The quick brown fox jumps over the lazy dog.', 'x',
    'searching documents', 'caf\u00e9 \u4e2d\u6587'];
  const batch = await client.embeddings.create({ model, input: inputs, encoding_format: 'float' });
  assert.strictEqual(batch.data.length, inputs.length);
  batch.data.forEach((d, i) => assert.strictEqual(d.index, i));
  const singles = await Promise.all(inputs.concat(inputs).map(
    (text) => client.embeddings.create({ model, input: text, encoding_format: 'float' })));
  singles.forEach((s, i) => close(s.data[0].embedding, batch.data[i % inputs.length].embedding,
    1e-5, 'concurrent single ' + i));
  assert.strictEqual(batch.usage.prompt_tokens,
    singles.slice(0, inputs.length).reduce((n, s) => n + s.usage.prompt_tokens, 0));
  console.log('ok   a batch of inputs and 10 concurrent requests agree');

  // [CLS] hello world [SEP] as token ids, one array and an array of arrays.
  const ids = await client.embeddings.create({ model, input: [2, 100, 101, 3], encoding_format: 'float' });
  close(ids.data[0].embedding, raw.json.data[0].embedding, 1e-6, 'token ids');
  const idLists = await client.embeddings.create({ model, input: [[2, 100, 101, 3], [2, 3]] });
  assert.strictEqual(idLists.data.length, 2);
  console.log('ok   token id inputs');

  const unit = await rawPost({ model, input: 'hello world', normalize: true, encoding_format: 'float' });
  const norm = Math.hypot(...unit.json.data[0].embedding);
  assert.ok(Math.abs(norm - 1) < 1e-5, 'normalize: norm ' + norm);
  const short = await rawPost({ model, input: 'hello world', normalize: true, dimensions: 8 });
  assert.strictEqual(short.json.data[0].embedding.length, 8);
  assert.ok(Math.abs(Math.hypot(...short.json.data[0].embedding) - 1) < 1e-5);
  const cls = await rawPost({ model, input: 'hello world', pooling: 'cls' });
  assert.notDeepStrictEqual(cls.json.data[0].embedding, raw.json.data[0].embedding);
  console.log('ok   normalize, dimensions, pooling');

  await assert.rejects(client.embeddings.create({ model, input: '' }), (e) => {
    assert.strictEqual(e.status, 400);
    assert.strictEqual(e.param, 'input');
    return true;
  });
  await assert.rejects(client.embeddings.create({ model, input: 'hi', dimensions: 33 }), (e) => {
    assert.strictEqual(e.status, 400);
    assert.match(e.message, /dimensions: 33 is outside \[1, 32\]/);
    return true;
  });
  await assert.rejects(client.embeddings.create({ model: 'gpt-4', input: 'hi' }), (e) => {
    assert.strictEqual(e.status, 404);
    return true;
  });
  await assert.rejects(client.embeddings.create({ model, input: [2, 100000] }), (e) => {
    assert.strictEqual(e.status, 400);
    assert.match(e.message, /token id 100000 is outside the vocabulary/);
    return true;
  });
  await assert.rejects(client.embeddings.create({ model, input: 'fox '.repeat(50) }), (e) => {
    assert.strictEqual(e.status, 400);
    assert.match(e.message, /input\[0\]: 52 tokens exceed the model's 40 positions/);
    return true;
  });
  // truncate: true keeps [CLS], the first 38 words and [SEP].
  const cut = await rawPost({ model, input: ['fox '.repeat(50), 'hi'], truncate: true, encoding_format: 'float' });
  assert.strictEqual(cut.status, 200, JSON.stringify(cut.json));
  const shorter = await rawPost({ model, input: 'fox '.repeat(38), encoding_format: 'float' });
  assert.strictEqual(shorter.json.usage.prompt_tokens, 40);
  close(cut.json.data[0].embedding, shorter.json.data[0].embedding, 1e-6, 'truncate');
  const badTruncate = await rawPost({ model, input: 'hi', truncate: 1 });
  assert.strictEqual(badTruncate.status, 400);
  assert.match(badTruncate.json.error.message, /^truncate: expected a boolean/);
  await assert.rejects(client.completions.create({ model, prompt: 'hi', max_tokens: 2 }), (e) => {
    assert.strictEqual(e.status, 400);
    assert.match(e.message, /encoder-only/);
    return true;
  });
  console.log('ok   errors');

  // weft embed prints the vectors the server returns.
  const out = execFileSync(process.env.WEFT_BIN,
    ['embed', '--model', process.env.WEFT_BERT, '--threads', '1', ...inputs], { encoding: 'utf8' });
  const lines = out.trim().split('\n').map((l) => JSON.parse(l));
  assert.strictEqual(lines.length, inputs.length);
  lines.forEach((l, i) => close(l.embedding, batch.data[i].embedding, 1e-6, 'weft embed ' + i));
  console.log('ok   weft embed agrees with /v1/embeddings');
  console.log('all embeddings checks passed');
}

main().catch((e) => {
  console.log('FAIL', e);
  process.exit(1);
});
