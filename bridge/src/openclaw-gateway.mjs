// A private `openclaw gateway` child for one session: its own state directory, HOME and config,
// loopback only, a random token, and one model provider built from the session's agent_config and
// api_keys (shared/design/PROTOCOLS.md §1; the same config tests/support/openclaw_gateway.py writes).
//
// Secrets never reach the disk: the config names the model API key and the gateway token as
// `${CLAWLET_OPENCLAW_MODEL_KEY}` / `${CLAWLET_OPENCLAW_GATEWAY_TOKEN}` (OpenClaw's env
// substitution) and only the child's environment holds them. The child stays in the bridge's
// process group (clawlet starts the bridge in a session of its own), so killing that group ends
// both; a graceful stop is SIGTERM (OpenClaw drains and exits in about a second), then SIGKILL.

import { spawn, execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

/** OpenClaw 2026.9.x declares `engines.node: ">=24.16.0 <25 || >=26.1.0"`. */
export const MIN_NODE = Object.freeze([24, 16, 0]);
export const MODEL_KEY_ENV = 'CLAWLET_OPENCLAW_MODEL_KEY';
export const TOKEN_ENV = 'CLAWLET_OPENCLAW_GATEWAY_TOKEN';
/** Passed through from the bridge's (already scrubbed) environment; everything else is built here. */
const PASSED_ENV = ['LANG', 'LC_ALL', 'TZ', 'TMPDIR'];

/** Default OpenAI-compatible endpoints of providers clawlet knows by name. */
export const PROVIDER_DEFAULTS = Object.freeze({
  openai: { baseUrl: 'https://api.openai.com/v1', api: 'openai-completions' },
  deepseek: { baseUrl: 'https://api.deepseek.com/v1', api: 'openai-completions' },
  anthropic: { baseUrl: 'https://api.anthropic.com', api: 'anthropic-messages' },
});

export class ConfigError extends Error {
  constructor(/** @type {string} */ message) {
    super(message);
    this.name = 'ConfigError';
  }
}

/** @param {string} text @returns {number[]} */
export function versionTuple(text) {
  const match = /(\d+)\.(\d+)\.(\d+)/.exec(text);
  return match ? match.slice(1, 4).map(Number) : [];
}

/** @param {number[]} a @param {number[]} b */
function compare(a, b) {
  for (let i = 0; i < Math.max(a.length, b.length); i += 1) {
    const d = (a[i] ?? 0) - (b[i] ?? 0);
    if (d !== 0) return d;
  }
  return 0;
}

/** OpenClaw's engines range `>=24.16.0 <25 || >=26.1.0`. @param {string} version */
export function nodeSupported(version) {
  const v = versionTuple(version);
  if (!v.length) return false;
  return (compare(v, [...MIN_NODE]) >= 0 && compare(v, [25, 0, 0]) < 0) || compare(v, [26, 1, 0]) >= 0;
}

/**
 * The OpenClaw CLI entry: `…/openclaw.mjs`, the `node_modules/.bin/openclaw` symlink, or the
 * package directory.
 * @param {string} raw
 */
export function resolveEntry(raw) {
  let entry = raw;
  try {
    if (fs.statSync(entry).isDirectory()) entry = path.join(entry, 'openclaw.mjs');
    entry = fs.realpathSync(entry);
    if (fs.statSync(entry).isFile()) return entry;
  } catch {
    // fall through
  }
  throw new ConfigError(`openclaw_bin ${JSON.stringify(raw)} is not an openclaw.mjs file or an openclaw package directory`);
}

/**
 * The one model provider of the private gateway.
 *
 * `agent_config.model` names the model (`gpt-4o-mini`, or `provider/model`); the provider is
 * `agent_config.provider`, the model's prefix, else inferred from the name (`claude…` → anthropic,
 * `deepseek…` → deepseek, anything else → openai); the base URL is `agent_config.base_url`
 * (or `openclaw_config.model_base_url`), else the provider's default; the key is
 * `api_keys[provider]` (or `api_keys.openai` for an OpenAI-compatible endpoint).
 *
 * @param {Record<string, any>} agentConfig
 * @param {Record<string, any>} apiKeys
 * @param {Record<string, any>} [openclawConfig]
 */
export function modelProvider(agentConfig, apiKeys, openclawConfig = {}) {
  let model = typeof agentConfig.model === 'string' ? agentConfig.model.trim() : '';
  if (!model) throw new ConfigError('agent_config.model is required to run a private OpenClaw gateway');
  let id = typeof agentConfig.provider === 'string' && agentConfig.provider.trim() ? agentConfig.provider.trim().toLowerCase() : '';
  const slash = model.indexOf('/');
  if (!id && slash > 0) {
    id = model.slice(0, slash).toLowerCase();
    model = model.slice(slash + 1);
  }
  if (!id) {
    // the names clawlet's exec plane infers a provider from (execplane/daemon.py session_settings)
    const lowered = model.toLowerCase();
    id = lowered.startsWith('claude') ? 'anthropic' : lowered.startsWith('deepseek') ? 'deepseek' : 'openai';
  }
  if (!/^[a-z][a-z0-9_-]{0,63}$/.test(id)) throw new ConfigError(`invalid provider id ${JSON.stringify(id)}`);
  const defaults = PROVIDER_DEFAULTS[/** @type {keyof typeof PROVIDER_DEFAULTS} */ (id)];
  const baseUrl = [agentConfig.base_url, openclawConfig.model_base_url, defaults?.baseUrl].find((v) => typeof v === 'string' && v.trim());
  if (!baseUrl) throw new ConfigError(`no base URL for provider ${JSON.stringify(id)}: set agent_config.base_url`);
  const api = [agentConfig.api, defaults?.api, 'openai-completions'].find((v) => typeof v === 'string' && v.trim());
  const key = [apiKeys?.[id], api === 'openai-completions' ? apiKeys?.openai : undefined].find((v) => typeof v === 'string' && v);
  const contextWindow = Number.isInteger(agentConfig.context_window) && agentConfig.context_window > 0 ? agentConfig.context_window : 128_000;
  const maxTokens = Number.isInteger(agentConfig.max_tokens) && agentConfig.max_tokens > 0 ? agentConfig.max_tokens : 8_192;
  return { id, model, baseUrl: String(baseUrl).trim(), api: String(api), apiKey: key ?? 'not-needed', contextWindow, maxTokens };
}

/**
 * `openclaw.json` for a private, isolated gateway.
 * @param {{provider: ReturnType<typeof modelProvider>, logFile: string, workspace: string}} options
 */
export function openclawConfig({ provider, logFile, workspace }) {
  return {
    gateway: { mode: 'local', bind: 'loopback', auth: { mode: 'token', token: `\${${TOKEN_ENV}}` } },
    update: { checkOnStart: false },
    telemetry: { enabled: false },
    discovery: { mdns: { mode: 'off' } },
    logging: { file: logFile },
    skills: { load: { watch: false } },
    models: {
      catalogRefresh: { enabled: false },
      providers: {
        [provider.id]: {
          baseUrl: provider.baseUrl,
          apiKey: `\${${MODEL_KEY_ENV}}`,
          api: provider.api,
          models: [{ id: provider.model, name: provider.model, contextWindow: provider.contextWindow, maxTokens: provider.maxTokens }],
        },
      },
    },
    agents: { defaults: { workspace, model: { primary: `${provider.id}/${provider.model}` } } },
  };
}

/** A free TCP port on 127.0.0.1. */
export function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.unref();
    server.on('error', reject);
    server.listen(0, '127.0.0.1', () => {
      const address = server.address();
      const port = typeof address === 'object' && address ? address.port : 0;
      server.close(() => resolve(port));
    });
  });
}

/** One `openclaw gateway` process under `root`. */
export class PrivateGateway {
  /**
   * @param {{node: string, entry: string, root: string, provider: ReturnType<typeof modelProvider>,
   *   systemPrompt?: string, log?: (msg: string) => void}} options
   */
  constructor(options) {
    this.node = options.node;
    this.entry = options.entry;
    this.root = path.resolve(options.root);
    this.provider = options.provider;
    this.systemPrompt = options.systemPrompt ?? '';
    this.log = options.log ?? (() => {});
    this.token = randomBytes(24).toString('hex');
    this.port = 0;
    /** @type {import('node:child_process').ChildProcess | null} */
    this.child = null;
    /** @type {string | null} how the process ended, once it has */
    this.exitReason = null;
    /** @type {Promise<void>} */
    this.exited = Promise.resolve();
    this.version = '';
  }

  get url() {
    return `ws://127.0.0.1:${this.port}`;
  }

  get stateDir() {
    return path.join(this.root, 'state');
  }

  get workspace() {
    return path.join(this.root, 'workspace');
  }

  get skillsDir() {
    return path.join(this.workspace, 'skills');
  }

  get consoleLog() {
    return path.join(this.root, 'openclaw-gateway.console.log');
  }

  /** Check the Node version, write the config and the workspace's instructions. */
  prepare() {
    let nodeVersion;
    try {
      nodeVersion = execFileSync(this.node, ['--version'], { encoding: 'utf8', timeout: 15_000 }).trim();
    } catch (err) {
      throw new ConfigError(`cannot run ${this.node} --version: ${err instanceof Error ? err.message : err}`);
    }
    if (!nodeSupported(nodeVersion)) {
      throw new ConfigError(`${this.node} is Node ${nodeVersion}; OpenClaw needs >=24.16.0 <25 or >=26.1.0`);
    }
    this.entry = resolveEntry(this.entry);
    try {
      this.version = JSON.parse(fs.readFileSync(path.join(path.dirname(this.entry), 'package.json'), 'utf8')).version ?? '';
    } catch {
      this.version = '';
    }
    fs.mkdirSync(this.stateDir, { recursive: true, mode: 0o700 });
    fs.mkdirSync(this.skillsDir, { recursive: true, mode: 0o700 });
    const config = openclawConfig({ provider: this.provider, logFile: path.join(this.root, 'openclaw-gateway.log'), workspace: this.workspace });
    fs.writeFileSync(path.join(this.stateDir, 'openclaw.json'), JSON.stringify(config, null, 2), { mode: 0o600 });
    writeInstructions(this.workspace, this.systemPrompt);
  }

  #env() {
    /** @type {Record<string, string>} */
    const env = {};
    for (const name of PASSED_ENV) if (process.env[name]) env[name] = /** @type {string} */ (process.env[name]);
    Object.assign(env, {
      PATH: `${path.dirname(this.node)}${path.delimiter}/usr/local/bin:/usr/bin:/bin`,
      HOME: this.root,
      OPENCLAW_STATE_DIR: this.stateDir,
      OPENCLAW_CONFIG_PATH: path.join(this.stateDir, 'openclaw.json'),
      NO_COLOR: '1',
      FORCE_COLOR: '0',
      CI: '1',
      [TOKEN_ENV]: this.token,
      [MODEL_KEY_ENV]: this.provider.apiKey,
    });
    return env;
  }

  /** Spawn the gateway on a free port (`prepare()` first). */
  async spawn() {
    this.port = await freePort();
    const out = fs.openSync(this.consoleLog, 'a', 0o600);
    try {
      this.child = spawn(this.node, [this.entry, 'gateway', '--port', String(this.port)], {
        cwd: this.root,
        env: this.#env(),
        stdio: ['ignore', out, out],
      });
    } finally {
      fs.closeSync(out);
    }
    const child = this.child;
    this.exited = new Promise((resolve) => {
      child.on('error', (err) => {
        this.exitReason ??= `could not be started: ${err.message}`;
        resolve();
      });
      child.on('exit', (code, signal) => {
        this.exitReason ??= signal ? `was killed by signal ${signal}` : `exited with code ${code}`;
        resolve();
      });
    });
    this.log(`openclaw gateway pid ${child.pid} on ${this.url} (state ${this.root})`);
  }

  /** The last lines of the gateway's console output, for error messages. */
  tail(lines = 15) {
    try {
      const text = fs.readFileSync(this.consoleLog, 'utf8').trimEnd().split('\n');
      return text.slice(-lines).join('\n');
    } catch {
      return '';
    }
  }

  /** SIGTERM, then SIGKILL after `graceMs`. */
  async stop(graceMs = 10_000) {
    const child = this.child;
    if (!child || this.exitReason !== null) return;
    this.exitReason = 'was stopped';
    child.kill('SIGTERM');
    let timer;
    const killed = new Promise((resolve) => {
      timer = setTimeout(() => {
        child.kill('SIGKILL');
        resolve(undefined);
      }, graceMs);
    });
    await Promise.race([this.exited, killed]);
    clearTimeout(timer);
    await this.exited;
  }

  /** Synchronous last resort when the bridge itself is exiting. */
  killNow() {
    if (this.child && this.exitReason === null) {
      this.exitReason = 'was killed with the bridge';
      try {
        this.child.kill('SIGKILL');
      } catch {
        // already gone
      }
    }
  }
}

const INSTRUCTIONS_MARKER = '<!-- written by clawlet from agent_config.system_prompt -->';

/**
 * The agent's `system_prompt` as the workspace's AGENTS.md (OpenClaw owns its generated system
 * prompt; AGENTS.md, loaded every session, is where operating instructions go). An AGENTS.md not
 * written by clawlet is left alone.
 * @param {string} workspace
 * @param {string} systemPrompt
 */
export function writeInstructions(workspace, systemPrompt) {
  if (!systemPrompt.trim()) return false;
  const file = path.join(workspace, 'AGENTS.md');
  fs.mkdirSync(workspace, { recursive: true, mode: 0o700 });
  if (fs.existsSync(file) && !fs.readFileSync(file, 'utf8').startsWith(INSTRUCTIONS_MARKER)) return false;
  fs.writeFileSync(file, `${INSTRUCTIONS_MARKER}\n${systemPrompt.trim()}\n`, { mode: 0o600 });
  return true;
}
