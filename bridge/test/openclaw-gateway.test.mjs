import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { test } from 'node:test';

import { MODEL_KEY_ENV, TOKEN_ENV, modelProvider, nodeSupported, openclawConfig, resolveEntry, writeInstructions } from '../src/openclaw-gateway.mjs';
import { startBridge } from '../testing/harness.mjs';

test("OpenClaw's Node range: >=24.16.0 <25 || >=26.1.0", () => {
  for (const ok of ['v24.16.0', 'v24.21.0', 'v26.1.0', 'v27.0.0']) assert.ok(nodeSupported(ok), ok);
  for (const bad of ['v20.20.2', 'v24.15.9', 'v25.3.0', 'v26.0.5', 'garbage']) assert.ok(!nodeSupported(bad), bad);
});

test('the model provider comes from agent_config and api_keys', () => {
  assert.deepEqual(modelProvider({ model: 'scripted-model', base_url: 'http://127.0.0.1:9/v1' }, { openai: 'sk-1' }), {
    id: 'openai',
    model: 'scripted-model',
    baseUrl: 'http://127.0.0.1:9/v1',
    api: 'openai-completions',
    apiKey: 'sk-1',
    contextWindow: 128000,
    maxTokens: 8192,
  });
  const deepseek = modelProvider({ model: 'deepseek/deepseek-chat' }, { deepseek: 'ds-key', openai: 'sk-1' });
  assert.deepEqual([deepseek.id, deepseek.model, deepseek.baseUrl, deepseek.apiKey], ['deepseek', 'deepseek-chat', 'https://api.deepseek.com/v1', 'ds-key']);
  const inferred = modelProvider({ model: 'deepseek-chat' }, { deepseek: 'ds-key' });
  assert.deepEqual([inferred.id, inferred.model, inferred.apiKey], ['deepseek', 'deepseek-chat', 'ds-key']);
  assert.equal(modelProvider({ model: 'claude-sonnet-4' }, { anthropic: 'a-key' }).id, 'anthropic');
  const anthropic = modelProvider({ model: 'claude-x', provider: 'anthropic' }, { openai: 'sk-1' });
  assert.deepEqual([anthropic.api, anthropic.apiKey], ['anthropic-messages', 'not-needed']);
  assert.throws(() => modelProvider({}, {}), /agent_config.model is required/);
  assert.throws(() => modelProvider({ model: 'm', provider: 'custom' }, {}), /no base URL for provider "custom"/);
});

test('openclaw.json keeps secrets out: the token and the key are env references', () => {
  const provider = modelProvider({ model: 'm', base_url: 'http://127.0.0.1:1/v1' }, { openai: 'sk-secret' });
  const config = openclawConfig({ provider, logFile: '/x/log', workspace: '/x/ws' });
  const text = JSON.stringify(config);
  assert.ok(!text.includes('sk-secret'));
  assert.equal(config.gateway.auth.token, `\${${TOKEN_ENV}}`);
  assert.equal(config.models.providers.openai.apiKey, `\${${MODEL_KEY_ENV}}`);
  assert.equal(config.gateway.bind, 'loopback');
  assert.equal(config.agents.defaults.model.primary, 'openai/m');
  assert.equal(config.agents.defaults.workspace, '/x/ws');
});

test("the system prompt becomes AGENTS.md, but someone else's AGENTS.md is kept", () => {
  const ws = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-ws-'));
  try {
    assert.equal(writeInstructions(ws, ''), false);
    assert.equal(writeInstructions(ws, 'Be brief.'), true);
    assert.match(fs.readFileSync(path.join(ws, 'AGENTS.md'), 'utf8'), /Be brief\.\n$/);
    assert.equal(writeInstructions(ws, 'Be verbose.'), true);
    assert.match(fs.readFileSync(path.join(ws, 'AGENTS.md'), 'utf8'), /Be verbose/);
    fs.writeFileSync(path.join(ws, 'AGENTS.md'), '# mine');
    assert.equal(writeInstructions(ws, 'Be brief.'), false);
    assert.equal(fs.readFileSync(path.join(ws, 'AGENTS.md'), 'utf8'), '# mine');
  } finally {
    fs.rmSync(ws, { recursive: true, force: true });
  }
});

test('resolveEntry accepts the package directory and refuses a missing file', () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-pkg-'));
  try {
    fs.writeFileSync(path.join(dir, 'openclaw.mjs'), '');
    assert.equal(resolveEntry(dir), fs.realpathSync(path.join(dir, 'openclaw.mjs')));
    assert.throws(() => resolveEntry(path.join(dir, 'nope.mjs')), /not an openclaw.mjs file/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test('a private gateway that cannot run gives a clear fatal error', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-fake-cli-'));
  const entry = path.join(dir, 'openclaw.mjs');
  fs.writeFileSync(entry, "console.error('fake openclaw: refusing to start'); process.exit(3);\n");
  const bridge = await startBridge();
  try {
    bridge.send({
      type: 'start',
      session_id: 's',
      agent_config: { model: 'm', base_url: 'http://127.0.0.1:1/v1' },
      openclaw_config: { openclaw_bin: entry, state_dir: path.join(dir, 'state'), startup_timeout_ms: 20_000 },
    });
    const error = await bridge.next((m) => m.type === 'error', 25_000);
    assert.equal(error.fatal, true);
    if (nodeSupported(process.version)) {
      assert.match(error.message, /openclaw gateway exited with code 3 before accepting connections/);
      assert.match(error.message, /fake openclaw: refusing to start/);
    } else {
      assert.match(error.message, /OpenClaw needs >=24.16.0/);
    }
    assert.deepEqual(await bridge.exited, { code: 1, signal: null });
  } finally {
    await bridge.close();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});
