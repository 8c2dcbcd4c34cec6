// The real bridge process (src/main.mjs) on its Unix socket, with a fake OpenClaw gateway.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { after, before, test } from 'node:test';

import { HELLO_TEXT, startFakeGateway } from '../testing/fake-gateway.mjs';
import { startBridge } from '../testing/harness.mjs';

/** @type {Awaited<ReturnType<typeof startFakeGateway>>} */
let gateway;
before(async () => {
  gateway = await startFakeGateway();
});
after(async () => {
  await gateway.close();
});

/** A bridge started against the fake gateway. */
async function readyBridge(extra = {}) {
  const bridge = await startBridge();
  bridge.send({
    type: 'start',
    session_id: 'S-1',
    agent_config: { model: 'fake-model' },
    skill_index: [],
    api_keys: { openai: 'sk-never-used' },
    openclaw_config: { gateway_url: gateway.url, gateway_token: gateway.token, ...extra },
  });
  const ready = await bridge.next((m) => m.type === 'ready' || m.type === 'error');
  assert.equal(ready.type, 'ready', JSON.stringify(ready));
  return { bridge, ready };
}

test('start → ready; a turn streams text_chunks and ends with execution_complete', async () => {
  const { bridge, ready } = await readyBridge();
  try {
    assert.equal(ready.session_key, 'agent:main:s-1');
    assert.equal(ready.gateway.protocol, 4);
    assert.equal(ready.gateway.spawned, false);
    assert.equal(ready.gateway.server_version, 'fake-1.0');
    const connect = gateway.frames.find((f) => f.dir === 'in' && f.frame.method === 'connect').frame.params;
    assert.deepEqual(connect.client.id, 'gateway-client');
    assert.deepEqual(connect.client.mode, 'backend');
    assert.deepEqual(connect.caps, ['tool-events']);
    assert.deepEqual(connect.scopes, ['operator.read', 'operator.write']);
    assert.deepEqual([connect.minProtocol, connect.maxProtocol], [3, 4]);

    bridge.send({ type: 'user_message', turn: 't1', data: { message: 'hello there' } });
    const events = await bridge.turn('t1');
    assert.deepEqual(events, [
      { type: 'text_chunk', content: 'Hello' },
      { type: 'text_chunk', content: ' from the' },
      { type: 'text_chunk', content: ' fake gateway' },
      { type: 'execution_complete', content: HELLO_TEXT },
    ]);
    const usage = await bridge.next((m) => m.type === 'fire_and_forget' && m.params && m.method === 'usage_report');
    assert.deepEqual(usage.params, { model: 'fake-model', tokens_in: 12, tokens_out: 5 });
    const send = gateway.sent('chat.send').at(-1);
    assert.equal(send.params.sessionKey, 'agent:main:s-1');
    assert.equal(send.params.message, 'hello there');
  } finally {
    await bridge.close();
  }
});

test('tool events, thinking, a failed run, and a second turn on the same session', async () => {
  const { bridge } = await readyBridge({ session_key: 'agent:main:Custom' });
  try {
    bridge.send({ type: 'user_message', turn: 'tool', data: { message: 'please [tool]' } });
    assert.deepEqual(await bridge.turn('tool'), [
      { type: 'tool_call_start', tool_name: 'ls', tool_input: { path: '.' }, call_id: 'call-1' },
      { type: 'tool_call_complete', tool_name: 'ls', result: 'a.txt\nb.txt', call_id: 'call-1', is_error: false },
      { type: 'text_chunk', content: 'I listed' },
      { type: 'text_chunk', content: ' the files.' },
      { type: 'execution_complete', content: 'I listed the files.' },
    ]);
    const audit = await bridge.next((m) => m.type === 'fire_and_forget' && m.method === 'audit_log');
    assert.deepEqual(audit.params, { event: 'tool_call', details: { tool_name: 'ls', call_id: 'call-1', is_error: false } });
    // no usage in this final: the output tokens of agent "usage" events (what real OpenClaw sends)
    const usage = await bridge.next((m) => m.type === 'fire_and_forget' && m.method === 'usage_report');
    assert.deepEqual(usage.params, { model: 'fake-model', tokens_in: 0, tokens_out: 9, input_unknown: true });

    bridge.send({ type: 'user_message', turn: 'think', data: { message: '[think]' } });
    const thought = await bridge.turn('think');
    assert.deepEqual(thought.slice(0, 2), [
      { type: 'thinking', content: 'Let me', stage: 'openclaw' },
      { type: 'thinking', content: ' think', stage: 'openclaw' },
    ]);

    bridge.send({ type: 'user_message', turn: 'fail', data: { message: '[fail]' } });
    assert.deepEqual(await bridge.turn('fail'), [
      { type: 'text_chunk', content: 'partial' },
      { type: 'execution_error', error: 'the model provider refused' },
    ]);
    assert.equal(gateway.sent('chat.send').at(-1).params.sessionKey, 'agent:main:custom');
  } finally {
    await bridge.close();
  }
});

test('cancel aborts the gateway run and ends the turn with cancelled: true', async () => {
  const { bridge } = await readyBridge();
  try {
    bridge.send({ type: 'user_message', turn: 'slow', data: { message: 'go [slow]' } });
    await bridge.next((m) => m.type === 'sse_event' && m.turn === 'slow' && m.data.type === 'text_chunk');
    bridge.send({ type: 'cancel' });
    const events = await bridge.turn('slow');
    const last = events.at(-1);
    assert.equal(last.type, 'execution_complete');
    assert.equal(last.cancelled, true);
    assert.match(last.content, /^(slow )+$/);
    const abort = gateway.sent('chat.abort').at(-1);
    assert.equal(abort.params.sessionKey, 'agent:main:s-1');
    assert.equal(abort.params.runId, gateway.sent('chat.send').at(-1).params.idempotencyKey);
    // the session goes on
    bridge.send({ type: 'user_message', turn: 'next', data: { message: 'again' } });
    assert.equal((await bridge.turn('next')).at(-1).content, HELLO_TEXT);
  } finally {
    await bridge.close();
  }
});

test('stop during a turn ends it cancelled and the bridge exits 0', async () => {
  const { bridge } = await readyBridge();
  bridge.send({ type: 'user_message', turn: 'slow', data: { message: '[slow]' } });
  await bridge.next((m) => m.type === 'sse_event' && m.data.type === 'text_chunk');
  bridge.send({ type: 'stop' });
  const events = await bridge.turn('slow');
  assert.equal(events.at(-1).cancelled, true);
  assert.deepEqual(await bridge.exited, { code: 0, signal: null });
  await bridge.close();
});

test('bad input lines get an error message, never a crash', async () => {
  const { bridge } = await readyBridge();
  try {
    const from = bridge.received.length;
    bridge.sendRaw('this is not json\n');
    bridge.sendRaw('[1,2,3]\n');
    bridge.sendRaw('{"type":"launch_missiles"}\n');
    bridge.sendRaw('{"type":"response","id":"nope","result":1}\n');
    bridge.sendRaw('{"type":"user_message","data":{}}\n');
    bridge.sendRaw('{"type":"start"}\n');
    await bridge.next((m) => m.type === 'error' && /already ready/.test(m.message), 5_000, from);
    const errors = bridge.received.slice(from).filter((m) => m.type === 'error');
    assert.equal(errors.length, 6, JSON.stringify(errors));
    assert.match(errors[0].message, /bad message: not JSON/);
    assert.match(errors[1].message, /JSON object/);
    assert.match(errors[2].message, /unknown message type "launch_missiles"/);
    assert.match(errors[3].message, /unknown request id/);
    assert.match(errors[4].message, /non-empty string 'data.message'/);
    assert.ok(errors.every((e) => !e.fatal));
    // still working
    bridge.send({ type: 'user_message', turn: 'ok', data: { message: 'still there?' } });
    assert.equal((await bridge.turn('ok')).at(-1).type, 'execution_complete');
  } finally {
    await bridge.close();
  }
});

test('skills: a cache hit is copied, a miss is asked for with request get_skill_package', async () => {
  const cache = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-skill-cache-'));
  const state = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-state-'));
  fs.mkdirSync(path.join(cache, 'cached'));
  fs.writeFileSync(path.join(cache, 'cached', 'SKILL.md'), '# cached');
  const bridge = await startBridge();
  try {
    bridge.send({
      type: 'start',
      session_id: 's2',
      skill_index: [{ skill_id: 'cached' }, { skill_id: 'fetched', version: '2' }, { skill_id: 'broken' }, { skill_id: '../evil' }],
      openclaw_config: { gateway_url: gateway.url, gateway_token: gateway.token, state_dir: state, skills_cache_dir: cache },
    });
    const first = await bridge.next((m) => m.type === 'request');
    assert.deepEqual([first.method, first.params], ['get_skill_package', { skill_id: 'fetched', version: '2' }]);
    bridge.send({
      type: 'response',
      id: first.id,
      result: { files: [{ path: 'SKILL.md', content: '# fetched' }, { path: 'scripts/run.py', content: Buffer.from('print(1)').toString('base64'), encoding: 'base64' }] },
    });
    const second = await bridge.next((m) => m.type === 'request' && m.id !== first.id);
    assert.equal(second.params.skill_id, 'broken');
    bridge.send({ type: 'response', id: second.id, error: 'no such skill' });
    const ready = await bridge.next((m) => m.type === 'ready' || m.type === 'error');
    assert.equal(ready.type, 'ready', JSON.stringify(ready));
    assert.deepEqual(ready.skills.loaded, ['cached', 'fetched']);
    assert.deepEqual(ready.skills.unavailable.map((u) => u.skill_id), ['broken', '../evil']);
    assert.match(ready.skills.unavailable[0].error, /no such skill/);
    assert.equal(fs.readFileSync(path.join(state, 'skills', 'fetched', 'scripts', 'run.py'), 'utf8'), 'print(1)');
    assert.equal(fs.readFileSync(path.join(state, 'skills', 'cached', 'SKILL.md'), 'utf8'), '# cached');
    const audits = bridge.received.filter((m) => m.type === 'fire_and_forget' && m.method === 'audit_log').map((m) => [m.params.event, m.params.details.skill_id]);
    assert.deepEqual(audits, [['skill_loaded', 'cached'], ['skill_loaded', 'fetched'], ['skill_unavailable', 'broken']]);
  } finally {
    await bridge.close();
    fs.rmSync(cache, { recursive: true, force: true });
    fs.rmSync(state, { recursive: true, force: true });
  }
});

test('a refused connect is a fatal error and exit 1', async () => {
  const bridge = await startBridge();
  try {
    bridge.send({ type: 'start', session_id: 's3', openclaw_config: { gateway_url: gateway.url, gateway_token: 'wrong' } });
    const error = await bridge.next((m) => m.type === 'error');
    assert.equal(error.fatal, true);
    assert.match(error.message, /INVALID_REQUEST \(AUTH_TOKEN_MISMATCH\)/);
    assert.deepEqual(await bridge.exited, { code: 1, signal: null });
  } finally {
    await bridge.close();
  }
});

test('a gateway still starting (UNAVAILABLE, retryable) is retried', async () => {
  const starting = await startFakeGateway({ unavailableConnects: 2 });
  const bridge = await startBridge();
  try {
    bridge.send({ type: 'start', session_id: 's4', openclaw_config: { gateway_url: starting.url, gateway_token: starting.token } });
    const ready = await bridge.next((m) => m.type === 'ready' || m.type === 'error');
    assert.equal(ready.type, 'ready');
    assert.equal(starting.sent('connect').length, 3);
  } finally {
    await bridge.close();
    await starting.close();
  }
});

test('on connect leftover runs of the session are aborted; a busy chat.send is retried', async () => {
  const busy = await startFakeGateway({ busySends: 2 });
  const bridge = await startBridge();
  try {
    bridge.send({ type: 'start', session_id: 's7', openclaw_config: { gateway_url: busy.url, gateway_token: busy.token } });
    await bridge.next((m) => m.type === 'ready');
    assert.deepEqual(busy.sent('chat.abort').map((f) => f.params), [{ sessionKey: 'agent:main:s7' }]);
    bridge.send({ type: 'user_message', turn: 't', data: { message: 'hello' } });
    assert.equal((await bridge.turn('t')).at(-1).content, HELLO_TEXT);
    const keys = busy.sent('chat.send').map((f) => f.params.idempotencyKey);
    assert.equal(keys.length, 3);
    assert.equal(new Set(keys).size, 1); // the same idempotency key every time
  } finally {
    await bridge.close();
    await busy.close();
  }
});

test('a lost gateway fails the running turn and the bridge exits 1', async () => {
  const own = await startFakeGateway();
  const bridge = await startBridge();
  try {
    bridge.send({ type: 'start', session_id: 's5', openclaw_config: { gateway_url: own.url, gateway_token: own.token } });
    await bridge.next((m) => m.type === 'ready');
    bridge.send({ type: 'user_message', turn: 'slow', data: { message: '[slow]' } });
    await bridge.next((m) => m.type === 'sse_event' && m.data.type === 'text_chunk');
    own.dropAll();
    const events = await bridge.turn('slow');
    assert.equal(events.at(-1).type, 'execution_error');
    assert.match(events.at(-1).error, /gateway connection was lost/);
    const fatal = await bridge.next((m) => m.type === 'error' && m.fatal);
    assert.equal(fatal.code, 'GATEWAY_LOST');
    assert.deepEqual(await bridge.exited, { code: 1, signal: null });
  } finally {
    await bridge.close();
    await own.close();
  }
});

test('EOF on the socket (clawlet went away) makes the bridge exit 0', async () => {
  const { bridge } = await readyBridge();
  bridge.disconnect();
  assert.deepEqual(await bridge.exited, { code: 0, signal: null });
  await bridge.close();
});

test('a private gateway needs a model and the openclaw CLI: clear fatal errors', async () => {
  const bridge = await startBridge();
  try {
    bridge.send({ type: 'start', session_id: 's6', agent_config: {}, openclaw_config: { openclaw_bin: '/nonexistent/openclaw.mjs' } });
    const error = await bridge.next((m) => m.type === 'error');
    assert.equal(error.fatal, true);
    assert.equal(error.code, 'CONFIG');
    assert.match(error.message, /agent_config.model is required/);
  } finally {
    await bridge.close();
  }
});
