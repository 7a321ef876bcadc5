// The official `openai` npm package against `weft serve` at $WEFT_URL: completions and chat,
// non-streaming and streaming (with include_usage), the prefix cache's share of a repeated
// prompt in usage.prompt_tokens_details.cached_tokens, and a 400 surfaced as the client's
// BadRequestError naming the parameter. WEFT_TEST_NODE is where setup_node.sh installed it.
const path = require('path');
const assert = require('assert');
const { OpenAI } = require(path.join(process.env.WEFT_TEST_NODE, 'node_modules', 'openai'));

const client = new OpenAI({ baseURL: process.env.WEFT_URL + '/v1', apiKey: 'unused', maxRetries: 0 });

async function main() {
  const models = await client.models.list();
  assert.deepStrictEqual(models.data.map((m) => m.id), ['weft-tiny']);

  const completion = await client.completions.create({
    model: 'weft-tiny', prompt: 'The whale', max_tokens: 4, temperature: 0,
  });
  assert.strictEqual(completion.object, 'text_completion');
  assert.strictEqual(completion.choices[0].finish_reason, 'length');
  assert.ok(completion.choices[0].text.length > 0);
  assert.strictEqual(completion.usage.completion_tokens, 4);
  console.log('ok   openai completions.create:', JSON.stringify(completion.choices[0].text));

  // Streaming completions: the text of the chunks is the non-streaming text (greedy).
  let streamed = '';
  let usage = null;
  const stream = await client.completions.create({
    model: 'weft-tiny', prompt: 'The whale', max_tokens: 4, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  for await (const chunk of stream) {
    if (chunk.choices.length) streamed += chunk.choices[0].text;
    if (chunk.usage) usage = chunk.usage;
  }
  assert.strictEqual(streamed, completion.choices[0].text);
  assert.strictEqual(usage.completion_tokens, 4);
  assert.strictEqual(typeof usage.prompt_tokens_details.cached_tokens, 'number');
  console.log('ok   openai completions stream');

  // The prefix cache in usage.prompt_tokens_details.cached_tokens: a long prompt's pages join
  // the cache when its request ends, so asking again is served from it (whole pages only).
  // (A fresh first word, so no earlier request of the run shares its first page.)
  const long = `Request ${Date.now()}-${Math.random()}. Call me Ishmael. Some years ago, ` +
    `never mind how long precisely, having little or no money in my purse, and nothing particular to interest me on shore, I thought I would ` +
    `sail about a little and see the watery part of the world.`;
  const first = await client.completions.create({
    model: 'weft-tiny', prompt: long, max_tokens: 2, temperature: 0,
  });
  const again = await client.completions.create({
    model: 'weft-tiny', prompt: long, max_tokens: 2, temperature: 0,
  });
  assert.strictEqual(first.usage.prompt_tokens_details.cached_tokens, 0);
  assert.ok(again.usage.prompt_tokens_details.cached_tokens > 0 &&
    again.usage.prompt_tokens_details.cached_tokens < again.usage.prompt_tokens,
    `cached ${again.usage.prompt_tokens_details.cached_tokens} of ${again.usage.prompt_tokens}`);
  console.log('ok   openai usage.prompt_tokens_details.cached_tokens:',
    again.usage.prompt_tokens_details.cached_tokens, 'of', again.usage.prompt_tokens);

  const chat = await client.chat.completions.create({
    model: 'weft-tiny', messages: [{ role: 'user', content: 'Hello there' }],
    max_tokens: 5, temperature: 0, seed: 3,
  });
  assert.strictEqual(chat.object, 'chat.completion');
  assert.strictEqual(chat.choices[0].message.role, 'assistant');
  assert.ok(chat.usage.completion_tokens >= 1 && chat.usage.completion_tokens <= 5);
  if (chat.choices[0].finish_reason === 'length') assert.strictEqual(chat.usage.completion_tokens, 5);
  console.log('ok   openai chat.completions.create:', JSON.stringify(chat.choices[0].message.content));

  let chatText = '';
  let finish = null;
  let role = null;
  const chatStream = await client.chat.completions.create({
    model: 'weft-tiny', messages: [{ role: 'user', content: 'Hello there' }],
    max_tokens: 5, temperature: 0, stream: true,
  });
  for await (const chunk of chatStream) {
    const choice = chunk.choices[0];
    if (choice.delta.role) role = choice.delta.role;
    if (choice.delta.content) chatText += choice.delta.content;
    if (choice.finish_reason) finish = choice.finish_reason;
  }
  assert.strictEqual(role, 'assistant');
  assert.strictEqual(chatText, chat.choices[0].message.content);
  assert.strictEqual(finish, chat.choices[0].finish_reason);
  console.log('ok   openai chat stream');

  await assert.rejects(
    client.chat.completions.create({
      model: 'weft-tiny', messages: [{ role: 'user', content: 'x' }], temperature: -1,
    }),
    (err) => err instanceof OpenAI.BadRequestError && err.status === 400 &&
      err.param === 'temperature' && /temperature/.test(err.message));
  await assert.rejects(
    client.completions.create({ model: 'other-model', prompt: 'x' }),
    (err) => err instanceof OpenAI.NotFoundError && err.code === 'model_not_found');
  console.log('ok   openai errors');
}

main().then(() => console.log('all openai checks passed'), (err) => {
  console.error('FAIL', err);
  process.exit(1);
});
