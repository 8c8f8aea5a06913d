// The official openai Node library against a running fusion node.
// Driven by TestNodeSDK (sdk_clients_test.go), which starts the nodes and
// sets FUSION_BASE_URL (auth on, key FUSION_API_KEY), FUSION_TIGHT_URL (no
// auth, one generation at a time) and FUSION_MODEL; NODE_PATH finds the
// pinned openai package.
'use strict';
const test = require('node:test');
const assert = require('node:assert/strict');
const OpenAI = require('openai');

const BASE = process.env.FUSION_BASE_URL;
const KEY = process.env.FUSION_API_KEY;
const TIGHT = process.env.FUSION_TIGHT_URL;
const MODEL = process.env.FUSION_MODEL;
const MSGS = [{ role: 'user', content: 'Tell me a story' }];

const client = (base = BASE, apiKey = KEY) => new OpenAI({ baseURL: base + '/v1', apiKey, maxRetries: 0 });

async function post(path, body) {
  const r = await fetch(BASE + path, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: 'Bearer ' + KEY },
    body: JSON.stringify(body),
  });
  assert.equal(r.status, 200);
  return r.json();
}

let noEOS;
test.before(async () => {
  noEOS = {};
  for (const s of ['<|im_end|>', '<|endoftext|>']) {
    const r = await post('/tokenize', { model: MODEL, prompt: s, add_special_tokens: false });
    assert.equal(r.count, 1);
    noEOS[String(r.tokens[0])] = -100;
  }
});

test('chat completion', async () => {
  const r = await client().chat.completions.create({ model: MODEL, messages: MSGS, max_tokens: 5, temperature: 0, logit_bias: noEOS });
  assert.equal(r.object, 'chat.completion');
  assert.match(r.id, /^chatcmpl-/);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].message.role, 'assistant');
  assert.equal(r.choices[0].finish_reason, 'length');
  assert.equal(r.usage.completion_tokens, 5);
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + 5);
  assert.equal(r.usage.prompt_tokens_details.cached_tokens, 0);
  assert.equal(r.usage.cached_tokens, 0);
});

test('streaming with usage matches the non-streamed text', async () => {
  const params = { model: MODEL, messages: MSGS, max_tokens: 6, temperature: 0, logit_bias: noEOS };
  const whole = await client().chat.completions.create(params);
  const stream = await client().chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  assert.equal(chunks[0].choices[0].delta.role, 'assistant');
  assert.equal(chunks.at(-2).choices[0].finish_reason, 'length');
  assert.deepEqual(chunks.at(-1).choices, []);
  assert.equal(chunks.at(-1).usage.completion_tokens, 6);
  const text = chunks.flatMap((c) => c.choices.map((ch) => ch.delta.content ?? '')).join('');
  assert.equal(text, whole.choices[0].message.content);
  // The SDK's stream helper assembles the same message.
  const runner = client().chat.completions.stream(params);
  const final = await runner.finalChatCompletion();
  assert.equal(final.choices[0].message.content, whole.choices[0].message.content);
});

test('completions, models, tokenize', async () => {
  const r = await client().completions.create({ model: MODEL, prompt: ['Once upon', 'def main'], max_tokens: 3, echo: true, logit_bias: noEOS });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.choices.length, 2);
  assert.ok(r.choices[0].text.startsWith('Once upon'));
  assert.ok(r.choices[1].text.startsWith('def main'));
  const models = [];
  for await (const m of client().models.list()) models.push(m.id);
  assert.deepEqual(models, [MODEL]);
  const m = await client().models.retrieve(MODEL);
  assert.equal(m.object, 'model');
  const t = await post('/tokenize', { model: MODEL, prompt: 'Hello, world' });
  const d = await post('/detokenize', { model: MODEL, tokens: t.tokens });
  assert.equal(d.prompt, 'Hello, world');
});

test('error classes', async () => {
  await assert.rejects(client().chat.completions.create({ model: 'nope', messages: MSGS }),
    (e) => e instanceof OpenAI.NotFoundError && e.code === 'model_not_found');
  await assert.rejects(client().chat.completions.create({ model: MODEL, messages: MSGS, temperature: 'hot' }),
    (e) => e instanceof OpenAI.BadRequestError && e.param === 'temperature' && e.code === 'invalid_type');
  await assert.rejects(client(BASE, 'sk-wrong').chat.completions.create({ model: MODEL, messages: MSGS }),
    (e) => e instanceof OpenAI.AuthenticationError && e.code === 'invalid_api_key');
  // n=2 on a node admitting one generation: the first cannot finish before the second is refused.
  await assert.rejects(client(TIGHT, 'unused').chat.completions.create({ model: MODEL, messages: MSGS, n: 2, max_tokens: 4000, logit_bias: noEOS }),
    (e) => e instanceof OpenAI.RateLimitError && e.headers.get('retry-after') === '1');
});

test('cancel mid-stream', async () => {
  const metrics = async () => (await fetch(BASE + '/metrics', { headers: { authorization: 'Bearer ' + KEY } })).json();
  const before = await metrics();
  const stream = await client().chat.completions.create({ model: MODEL, messages: MSGS, max_tokens: 4096, logit_bias: noEOS, stream: true });
  let i = 0;
  for await (const _ of stream) {
    if (++i === 3) break; // breaking out aborts the request
  }
  const deadline = Date.now() + 10000;
  for (;;) {
    const m = await metrics();
    if (m.cancelled_requests === before.cancelled_requests + 1 && m.engine.in_flight === 0 && m.active_requests === 0) break;
    assert.ok(Date.now() < deadline, JSON.stringify(m));
    await new Promise((r) => setTimeout(r, 10));
  }
});
