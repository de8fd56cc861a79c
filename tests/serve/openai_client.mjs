// openai_client.mjs: numallm serve driven by OpenAI's official JavaScript client (the `openai`
// npm package), as tests/serve/openai_js_test.sh runs it. Every call goes through the client's
// own parsing: its types, its stream reader (server-sent events) and its error classes.
//
//   node openai_client.mjs PACKAGE_DIR BASE_URL MODEL [API_KEY]
//
// PACKAGE_DIR holds node_modules/openai. With API_KEY the server was started with --api-key
// API_KEY, and only the checks of the key run. Prints one line per check; exits 1 at the first
// failure, naming what was expected and what came.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const [pkgDir, baseURL, model, apiKey] = process.argv.slice(2);
const pkgPath = join(pkgDir, 'node_modules', 'openai');
const pkg = JSON.parse(readFileSync(join(pkgPath, 'package.json'), 'utf8'));
const { default: OpenAI } = await import(pathToFileURL(join(pkgPath, pkg.exports['.'].default)).href);
console.log(`openai ${pkg.version} (node ${process.version}) against ${baseURL}`);

// No retries: a 5xx or a dropped connection is a failure here, not something to hide.
const client = new OpenAI({ baseURL, apiKey: apiKey ?? 'no-key', maxRetries: 0, timeout: 120_000 });

function check(cond, what, got) {
  if (!cond) {
    console.error(`FAIL: ${what}${got === undefined ? '' : `: got ${JSON.stringify(got)}`}`);
    process.exit(1);
  }
}
function ok(what) { console.log(`ok: ${what}`); }

// The error the client throws for a call, or null when it succeeds.
async function thrown(call) {
  try {
    const r = await call();
    if (r && typeof r[Symbol.asyncIterator] === 'function') for await (const _ of r); // a stream
    return null;
  } catch (e) {
    return e;
  }
}

if (apiKey) {
  const bad = new OpenAI({ baseURL, apiKey: 'wrong', maxRetries: 0, timeout: 60_000 });
  let e = await thrown(() => bad.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hi' }] }));
  check(e instanceof OpenAI.AuthenticationError, 'a wrong key gives AuthenticationError', e && `${e.name}: ${e.message}`);
  check(e.status === 401 && e.type === 'authentication_error', 'its status and type', [e.status, e.type]);
  e = await thrown(() => bad.models.list());
  check(e instanceof OpenAI.AuthenticationError, 'models.list with a wrong key', e && `${e.name}: ${e.message}`);
  ok('a wrong API key: AuthenticationError 401');
  const r = await client.completions.create({ model, prompt: 'Hello', max_tokens: 3, temperature: 0 });
  check(r.usage.completion_tokens === 3, 'the right key completes', r);
  ok('the right API key');
  process.exit(0);
}

// ---- models ----
const models = [];
for await (const m of client.models.list()) models.push(m);
check(models.length === 1 && models[0].id === model && models[0].object === 'model', 'models.list', models);
check(Number.isInteger(models[0].created) && typeof models[0].owned_by === 'string', 'a model\'s fields', models[0]);
const one = await client.models.retrieve(model);
check(one.id === model && one.object === 'model', 'models.retrieve', one);
ok(`models.list and models.retrieve: ${model}`);

// ---- chat, not streaming ----
const messages = [{ role: 'system', content: 'Be brief.' }, { role: 'user', content: 'Hello' }];
const chat = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
check(chat.object === 'chat.completion' && chat.id.startsWith('chatcmpl-') && chat.model === model, 'chat shape', chat);
check(chat.choices.length === 1 && chat.choices[0].index === 0, 'one choice', chat.choices);
const choice = chat.choices[0];
check(choice.message.role === 'assistant' && typeof choice.message.content === 'string', 'the message', choice);
check(choice.finish_reason === 'length', 'finish_reason after max_tokens', choice.finish_reason);
const u = chat.usage;
check(u.completion_tokens === 10 && u.prompt_tokens > 0 && u.total_tokens === u.prompt_tokens + 10, 'usage', u);
const again = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0 });
check(again.choices[0].message.content === choice.message.content, 'greedy chat repeats', again.choices[0]);
ok(`chat.completions.create: ${JSON.stringify(choice.message.content)}, usage ${JSON.stringify(u)}`);

// ---- chat, streaming: the same text, then finish_reason, then usage ----
const stream = await client.chat.completions.create({
  model, messages, max_tokens: 10, temperature: 0, stream: true, stream_options: { include_usage: true },
});
let text = '', role = null, finish = null, usage = null, nchunks = 0, id = null;
for await (const chunk of stream) {
  nchunks++;
  check(chunk.object === 'chat.completion.chunk' && chunk.model === model, 'chunk shape', chunk);
  id ??= chunk.id;
  check(chunk.id === id, 'every chunk has the same id', [id, chunk.id]);
  if (chunk.usage) {
    check(chunk.choices.length === 0 && usage === null, 'the usage chunk has no choices and comes once', chunk);
    usage = chunk.usage;
    continue;
  }
  check(usage === null, 'no chunk after the usage chunk', chunk);
  const c = chunk.choices[0];
  check(finish === null, 'no chunk after finish_reason', chunk);
  if (c.delta.role) role = c.delta.role;
  text += c.delta.content ?? '';
  finish = c.finish_reason;
}
check(role === 'assistant', 'a chunk carries the role', role);
check(text === choice.message.content, 'streamed text equals the non-streamed answer', [text, choice.message.content]);
check(finish === 'length', 'streamed finish_reason', finish);
check(usage && usage.completion_tokens === 10 && usage.prompt_tokens === u.prompt_tokens, 'streamed usage', usage);
ok(`chat stream: ${nchunks} chunks, same text, finish_reason ${finish}, usage ${JSON.stringify(usage)}`);

// Without include_usage there is no usage chunk.
let sawUsage = false, text2 = '';
for await (const chunk of await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, stream: true })) {
  if (chunk.usage) sawUsage = true;
  for (const c of chunk.choices) text2 += c.delta.content ?? '';
}
check(!sawUsage && text2 === text, 'a stream without stream_options has no usage and the same text', [sawUsage, text2]);
ok('chat stream without include_usage');

// ---- completions: text and token ids ----
const prompt = 'The capital of France is';
const comp = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0 });
check(comp.object === 'text_completion' && comp.id.startsWith('cmpl-') && comp.model === model, 'completion shape', comp);
check(comp.choices.length === 1 && comp.choices[0].finish_reason === 'length', 'completion choice', comp.choices);
check(comp.usage.completion_tokens === 12, 'completion usage', comp.usage);
const ctext = comp.choices[0].text;
const tokRes = await fetch(`${baseURL.replace(/\/v1$/, '')}/tokenize`, { method: 'POST', body: JSON.stringify({ content: prompt }) });
const ids = (await tokRes.json()).tokens;
check(Array.isArray(ids) && ids.length === comp.usage.prompt_tokens, '/tokenize agrees with prompt_tokens', ids);
const byIds = await client.completions.create({ model, prompt: ids, max_tokens: 12, temperature: 0 });
check(byIds.choices[0].text === ctext && byIds.usage.prompt_tokens === ids.length, 'a token-id prompt gives the same text', byIds);
ok(`completions.create, text and ${ids.length} token ids: ${JSON.stringify(ctext)}`);

let stext = '', sfinish = null, susage = null;
for await (const chunk of await client.completions.create({
  model, prompt, max_tokens: 12, temperature: 0, stream: true, stream_options: { include_usage: true },
})) {
  if (chunk.usage) { susage = chunk.usage; continue; }
  stext += chunk.choices[0].text;
  sfinish = chunk.choices[0].finish_reason ?? sfinish;
}
check(stext === ctext && sfinish === 'length' && susage?.completion_tokens === 12, 'completion stream', [stext, sfinish, susage]);
ok('completions stream: same text, finish_reason, usage');

// ---- stop strings: a piece of the greedy text ends the answer before it, streaming or not ----
const stop = ctext.slice(Math.floor(ctext.length / 3), Math.floor(ctext.length / 3) + 5);
check(stop.length === 5, 'a 5-character stop string from the greedy text', ctext);
const want = ctext.slice(0, ctext.indexOf(stop));
const st = await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stop: ['zzz', stop] });
check(st.choices[0].text === want && st.choices[0].finish_reason === 'stop', `stop ${JSON.stringify(stop)}`, st.choices[0]);
let sst = '', sstFinish = null;
for await (const chunk of await client.completions.create({ model, prompt, max_tokens: 12, temperature: 0, stop, stream: true })) {
  sst += chunk.choices[0]?.text ?? '';
  sstFinish = chunk.choices[0]?.finish_reason ?? sstFinish;
}
check(sst === want && sstFinish === 'stop', 'stop string, streaming', [sst, sstFinish]);
const cst = choice.message.content.slice(2, 6);
const chatStop = await client.chat.completions.create({ model, messages, max_tokens: 10, temperature: 0, stop: cst });
check(chatStop.choices[0].message.content === choice.message.content.slice(0, choice.message.content.indexOf(cst)) &&
      chatStop.choices[0].finish_reason === 'stop', `chat stop ${JSON.stringify(cst)}`, chatStop.choices[0]);
ok(`stop strings: ${JSON.stringify(stop)} -> ${JSON.stringify(want)}`);

// ---- errors, as the client surfaces them ----
let e = await thrown(() => client.chat.completions.create({ model, messages, n: 2 }));
check(e instanceof OpenAI.BadRequestError && e.status === 400, 'n = 2 gives BadRequestError 400', e && `${e.name}: ${e.message}`);
check(e.type === 'invalid_request_error' && /\bn\b/.test(e.message), 'its type and message', [e.type, e.message]);
e = await thrown(() => client.chat.completions.create({ model, messages, n: 2, stream: true }));
check(e instanceof OpenAI.BadRequestError, 'n = 2 when streaming: BadRequestError before any chunk', e && `${e.name}: ${e.message}`);
ok(`n = 2: ${e.constructor.name} ${e.status} ${JSON.stringify(e.message)}`);

e = await thrown(() => client.chat.completions.create({ model: 'gpt-no-such-model', messages }));
check(e instanceof OpenAI.NotFoundError && e.status === 404, 'an unknown model gives NotFoundError 404', e && `${e.name}: ${e.message}`);
check(e.code === 'model_not_found' && e.message.includes('gpt-no-such-model'), 'its code names the model', [e.code, e.message]);
e = await thrown(() => client.completions.create({ model: 'gpt-no-such-model', prompt, stream: true }));
check(e instanceof OpenAI.NotFoundError, 'an unknown model, streaming', e && `${e.name}: ${e.message}`);
e = await thrown(() => client.models.retrieve('gpt-no-such-model'));
check(e instanceof OpenAI.NotFoundError, 'models.retrieve of an unknown model', e && `${e.name}: ${e.message}`);
ok(`unknown model: ${e.constructor.name} ${e.status} ${JSON.stringify(e.message)}`);

e = await thrown(() => client.completions.create({ model, prompt, temperature: 'hot' }));
check(e instanceof OpenAI.BadRequestError && e.message.includes('temperature'), 'a bad temperature', e && e.message);
e = await thrown(() => client.completions.create({ model, prompt: Array(600).fill(50) }));
check(e instanceof OpenAI.BadRequestError && /slot holds \d+ positions/.test(e.message), 'a prompt too long', e && e.message);
ok('bad settings and a prompt longer than a slot: BadRequestError');
console.log('PASS');
