// One session's bridge: handles clawlet's IPC messages (seed 001 §4.5) and drives an OpenClaw
// gateway through the Gateway protocol, translating its events with the seed's table (§4.6).
//
//   start         {session_id, agent_config, skill_index, api_keys, openclaw_config}
//                 → provision skills (may `request get_skill_package`), start a private
//                   `openclaw gateway` (or connect to openclaw_config.gateway_url), connect as an
//                   operator → `ready {session_id, session_key, gateway, skills}`,
//                   or `error {message, fatal: true}` and exit 1
//   user_message  {turn, data: {message}} → chat.send; `sse_event {turn, data}` for each event,
//                   the last one execution_complete or execution_error
//   cancel        {} → chat.abort; the turn ends with execution_complete {cancelled: true}
//                   (at the latest `abort_grace_ms` later, even if the gateway stays silent)
//   stop          {} → cancel the turn, close the connection, stop the private gateway, exit 0
//   response      {id, result | error} → settles the bridge's `request {id, method, params}`
//
// `fire_and_forget` goes out for `usage_report {model, tokens_in, tokens_out}` (a final with
// usage) and `audit_log {event, details}` (tool calls, skills). A message in the wrong state or a
// bad line gets a non-fatal `error {message}`; only a failed start or a lost gateway is fatal.

import { randomUUID } from 'node:crypto';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { ConfigError, PrivateGateway, modelProvider } from './openclaw-gateway.mjs';
import { GatewayError, connectWithRetry, safeUrl } from './gateway-client.mjs';
import { provisionSkills } from './skills.mjs';
import { RunTranslator, translateEvent } from './translate.mjs';

export const VERSION = '0.1.0';
const DEFAULTS = Object.freeze({
  startupTimeoutMs: 120_000,
  connectTimeoutMs: 10_000,
  requestTimeoutMs: 120_000,
  abortGraceMs: 10_000,
  stopGraceMs: 10_000,
  sendRetryMs: 15_000,
});

/** @param {unknown} value */
const isObject = (value) => value !== null && typeof value === 'object' && !Array.isArray(value);

/** @param {unknown} value @param {number} fallback */
const positive = (value, fallback) => (typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : fallback);

/** @param {unknown} err */
const describe = (err) => (err instanceof Error ? err.message : String(err));

export class Bridge {
  /**
   * @param {{send: (message: Record<string, any>) => void, exit: (code: number) => void,
   *   log?: (line: string) => void}} io
   */
  constructor(io) {
    this.send = io.send;
    this.exit = io.exit;
    this.log = io.log ?? ((line) => process.stderr.write(`[openclaw-bridge] ${line}\n`));
    /** @type {'new' | 'starting' | 'ready' | 'stopping' | 'stopped'} */
    this.state = 'new';
    this.sessionId = '';
    this.sessionKey = '';
    this.model = '';
    /** @type {import('./gateway-client.mjs').GatewayClient | null} */
    this.client = null;
    /** @type {PrivateGateway | null} */
    this.gateway = null;
    /** @type {null | {id: string, runId: string, translator: RunTranslator, cancelRequested: boolean, acked: boolean, timer: NodeJS.Timeout | null}} */
    this.turn = null;
    /** @type {Map<string, {resolve: (v: any) => void, reject: (e: Error) => void, timer: NodeJS.Timeout}>} */
    this.pending = new Map();
    this.options = { ...DEFAULTS };
    this.tempRoot = '';
  }

  // -- IPC --------------------------------------------------------------------------------------

  /** @param {Record<string, any>} message one parsed line from clawlet */
  handle(message) {
    switch (message.type) {
      case 'start':
        return this.#start(message);
      case 'user_message':
        return this.#userMessage(message);
      case 'cancel':
        return this.#cancel();
      case 'stop':
        return this.shutdown(0, 'stop requested');
      case 'response':
        return this.#response(message);
      default:
        this.error(`unknown message type ${JSON.stringify(message.type)}`);
        return undefined;
    }
  }

  /** A non-fatal error (or, with `fatal`, the reason the bridge is about to exit). */
  error(/** @type {string} */ message, extra = {}) {
    this.send({ type: 'error', message, ...extra });
  }

  /**
   * Ask clawlet (and through it the control plane): memory_search, get_skill_package, mcp_call.
   * @param {string} method @param {Record<string, any>} params
   */
  request(method, params, timeoutMs = this.options.requestTimeoutMs) {
    return new Promise((resolve, reject) => {
      const id = randomUUID();
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new Error(`${method}: no response within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      this.send({ type: 'request', id, method, params });
    });
  }

  /** @param {string} method usage_report, audit_log @param {Record<string, any>} params */
  notify(method, params) {
    this.send({ type: 'fire_and_forget', method, params });
  }

  /** @param {Record<string, any>} message */
  #response(message) {
    const waiter = this.pending.get(message.id);
    if (!waiter) {
      this.error(`response to an unknown request id ${JSON.stringify(message.id)}`);
      return;
    }
    this.pending.delete(message.id);
    clearTimeout(waiter.timer);
    if (message.error !== undefined && message.error !== null) waiter.reject(new Error(String(message.error)));
    else waiter.resolve(message.result);
  }

  // -- start ------------------------------------------------------------------------------------

  /** @param {Record<string, any>} message */
  async #start(message) {
    if (this.state !== 'new') {
      this.error(`start: the bridge is already ${this.state}`);
      return;
    }
    this.state = 'starting';
    try {
      const info = await this.#setUp(message);
      if (this.state !== 'starting') return; // stopped while starting
      this.state = 'ready';
      this.send({ type: 'ready', ...info });
    } catch (err) {
      if (this.state !== 'starting') return;
      const detail = this.gateway ? this.gateway.tail() : '';
      this.log(`start failed: ${describe(err)}`);
      this.error(`the OpenClaw bridge could not start: ${describe(err)}${detail ? `\n--- openclaw gateway output ---\n${detail}` : ''}`, {
        fatal: true,
        code: err instanceof GatewayError ? err.code : err instanceof ConfigError ? 'CONFIG' : 'START_FAILED',
      });
      await this.shutdown(1, 'start failed');
    }
  }

  /** @param {Record<string, any>} message */
  async #setUp(message) {
    const sessionId = typeof message.session_id === 'string' && message.session_id ? message.session_id : randomUUID();
    for (const field of ['agent_config', 'api_keys', 'openclaw_config']) {
      if (message[field] !== undefined && !isObject(message[field])) throw new ConfigError(`start.${field} must be an object`);
    }
    if (message.skill_index !== undefined && !Array.isArray(message.skill_index)) throw new ConfigError('start.skill_index must be a list');
    const agentConfig = message.agent_config ?? {};
    const apiKeys = message.api_keys ?? {};
    const oc = message.openclaw_config ?? {};
    this.sessionId = sessionId;
    Object.assign(this.options, {
      startupTimeoutMs: positive(oc.startup_timeout_ms, DEFAULTS.startupTimeoutMs),
      connectTimeoutMs: positive(oc.connect_timeout_ms, DEFAULTS.connectTimeoutMs),
      requestTimeoutMs: positive(oc.request_timeout_ms, DEFAULTS.requestTimeoutMs),
      abortGraceMs: positive(oc.abort_grace_ms, DEFAULTS.abortGraceMs),
      stopGraceMs: positive(oc.stop_grace_ms, DEFAULTS.stopGraceMs),
      sendRetryMs: positive(oc.send_retry_ms, DEFAULTS.sendRetryMs),
    });
    let root = typeof oc.state_dir === 'string' && oc.state_dir ? path.resolve(oc.state_dir) : '';
    if (!root) {
      this.tempRoot = fs.mkdtempSync(path.join(os.tmpdir(), 'clawlet-openclaw-'));
      root = this.tempRoot;
    }
    fs.mkdirSync(root, { recursive: true, mode: 0o700 });
    const agentId = typeof oc.agent_id === 'string' && oc.agent_id ? oc.agent_id.toLowerCase() : 'main';
    this.sessionKey = (typeof oc.session_key === 'string' && oc.session_key ? oc.session_key : `agent:${agentId}:${sessionId}`).toLowerCase();
    const external = typeof oc.gateway_url === 'string' && oc.gateway_url;

    let provider = null;
    if (!external) {
      provider = modelProvider(agentConfig, apiKeys, oc);
      this.model = `${provider.id}/${provider.model}`;
      const node = typeof oc.node === 'string' && oc.node ? oc.node : process.execPath;
      if (typeof oc.openclaw_bin !== 'string' || !oc.openclaw_bin) throw new ConfigError('openclaw_config.openclaw_bin (the openclaw CLI) is required to start a private gateway');
      const systemPrompt = typeof agentConfig.system_prompt === 'string' ? agentConfig.system_prompt : '';
      this.gateway = new PrivateGateway({ node, entry: oc.openclaw_bin, root, provider, systemPrompt, log: this.log });
      this.gateway.prepare();
    } else {
      this.model = typeof agentConfig.model === 'string' ? agentConfig.model : '';
    }

    const skills = await provisionSkills({
      index: message.skill_index,
      skillsDir: this.gateway ? this.gateway.skillsDir : path.join(root, 'skills'),
      cacheDir: typeof oc.skills_cache_dir === 'string' && oc.skills_cache_dir ? oc.skills_cache_dir : undefined,
      request: (method, params) => this.request(method, params),
      notify: (method, params) => this.notify(method, params),
    });
    if (this.state !== 'starting') throw new Error('stopped while starting');

    let url = external ? oc.gateway_url : '';
    let token = typeof oc.gateway_token === 'string' ? oc.gateway_token : undefined;
    let timeoutMs = this.options.connectTimeoutMs;
    const gateway = this.gateway;
    if (gateway) {
      await gateway.spawn();
      url = gateway.url;
      token = gateway.token;
      timeoutMs = this.options.startupTimeoutMs;
    }
    const client = await connectWithRetry(
      { url, token, version: VERSION, requestTimeoutMs: 30_000, connectTimeoutMs: this.options.connectTimeoutMs },
      {
        timeoutMs,
        abort: () => {
          if (this.state !== 'starting') return 'stopped while starting';
          return gateway && gateway.exitReason !== null ? `openclaw gateway ${gateway.exitReason} before accepting connections` : null;
        },
      },
    );
    if (this.state !== 'starting') {
      client.close();
      throw new Error('stopped while starting');
    }
    this.client = client;
    // A run of this session key may outlive a bridge that died (a gateway's runs belong to it, not
    // to the connection): abort it, so the first message is not refused as "still answering".
    try {
      await client.request('chat.abort', { sessionKey: this.sessionKey }, 10_000);
    } catch (err) {
      this.log(`chat.abort of leftover runs failed (ignored): ${describe(err)}`);
    }
    client.on('event', (event, payload) => this.#onGatewayEvent(event, payload));
    client.on('closed', (reason) => this.#lost(`the OpenClaw gateway connection was lost: ${reason}`));
    if (gateway) gateway.exited.then(() => this.#lost(`the private openclaw gateway ${gateway.exitReason}`));
    const server = isObject(client.hello?.server) ? client.hello.server : {};
    this.log(`session ${sessionId}: connected to ${safeUrl(url)} (protocol ${client.protocol}), session key ${this.sessionKey}`);
    return {
      session_id: sessionId,
      session_key: this.sessionKey,
      gateway: {
        url: safeUrl(url),
        spawned: Boolean(gateway),
        protocol: client.protocol,
        server_version: typeof server.version === 'string' ? server.version : '',
        openclaw_version: gateway?.version ?? '',
        pid: gateway?.child?.pid ?? null,
      },
      model: this.model,
      skills,
    };
  }

  // -- turns ------------------------------------------------------------------------------------

  /** @param {Record<string, any>} message */
  async #userMessage(message) {
    const turnId = typeof message.turn === 'string' && message.turn ? message.turn : randomUUID();
    if (this.state !== 'ready' || !this.client) {
      this.error(`user_message: the bridge is ${this.state}, not ready`, { turn: turnId });
      return;
    }
    if (this.turn) {
      this.error('user_message: a turn is already running', { turn: turnId });
      return;
    }
    const data = isObject(message.data) ? message.data : {};
    const text = [data.message, data.content, message.message].find((v) => typeof v === 'string');
    if (typeof text !== 'string' || !text.trim()) {
      this.error("user_message needs a non-empty string 'data.message'", { turn: turnId });
      return;
    }
    const runId = randomUUID();
    const turn = { id: turnId, runId, translator: new RunTranslator(runId), cancelRequested: false, acked: false, timer: null };
    this.turn = turn;
    try {
      const ack = await this.#chatSend(turn, text);
      turn.acked = true;
      if (isObject(ack) && typeof ack.runId === 'string' && ack.runId && ack.runId !== runId) {
        turn.runId = ack.runId;
        turn.translator.runId = ack.runId;
      }
      if (turn.cancelRequested && this.turn === turn) await this.#abort(turn); // cancel raced the ack
    } catch (err) {
      if (this.turn !== turn) return;
      if (turn.cancelRequested) this.#endCancelled(turn);
      else this.#emitRuntime(turn, { type: 'error', message: `chat.send failed: ${describe(err)}` });
    }
  }

  /**
   * `chat.send`, retried with the same idempotency key while the gateway answers with a retryable
   * refusal (e.g. UNAVAILABLE "still answering" while an aborted run winds down), up to
   * `send_retry_ms`.
   * @param {NonNullable<Bridge['turn']>} turn @param {string} text
   */
  async #chatSend(turn, text) {
    const deadline = Date.now() + this.options.sendRetryMs;
    for (;;) {
      try {
        return await /** @type {import('./gateway-client.mjs').GatewayClient} */ (this.client).request('chat.send', {
          sessionKey: this.sessionKey,
          message: text,
          idempotencyKey: turn.runId,
        });
      } catch (err) {
        const retry = err instanceof GatewayError && err.retryable && Date.now() < deadline && this.turn === turn && !turn.cancelRequested;
        if (!retry) throw err;
        await new Promise((resolve) => setTimeout(resolve, Math.min(err.retryAfterMs ?? 250, 1_000)));
      }
    }
  }

  /** @param {string} event @param {Record<string, any>} payload */
  #onGatewayEvent(event, payload) {
    const turn = this.turn;
    if (!turn) return;
    let events = [];
    if (event === 'chat') events = turn.translator.chat(payload);
    else if (event === 'agent') events = turn.translator.agent(payload);
    else if (event === 'shutdown') return; // the connection closes next; #lost reports it
    for (const runtimeEvent of events) this.#emitRuntime(turn, runtimeEvent);
  }

  /**
   * Send one runtime event of `turn` on as its SSE event; a `done` or `error` ends the turn.
   * @param {NonNullable<Bridge['turn']>} turn @param {Record<string, any>} event
   */
  #emitRuntime(turn, event) {
    if (this.turn !== turn) return;
    const data = translateEvent(event);
    if (data) this.send({ type: 'sse_event', turn: turn.id, data });
    if (event.type === 'tool_result') {
      this.notify('audit_log', { event: 'tool_call', details: { tool_name: event.name, call_id: event.id, is_error: Boolean(event.isError) } });
    }
    if (event.type === 'done' || event.type === 'error') {
      this.turn = null;
      turn.translator.finished = true;
      if (turn.timer) clearTimeout(turn.timer);
      this.#reportUsage(turn.translator);
    }
  }

  /**
   * `usage_report` for a finished run: the final's `usage` when it has one (clawlet's gateway),
   * else the output tokens of `agent` "usage" events (real OpenClaw 2026.9 sends no input count
   * on the protocol: `input_unknown: true`).
   * @param {RunTranslator} translator
   */
  #reportUsage(translator) {
    const usage = translator.usage;
    const number = (/** @type {unknown[]} */ ...values) => values.find((v) => typeof v === 'number' && Number.isFinite(v)) ?? 0;
    if (usage) {
      const tokensIn = number(usage.input, usage.inputTokens, usage.prompt_tokens, usage.input_tokens);
      const tokensOut = number(usage.output, usage.outputTokens, usage.completion_tokens, usage.output_tokens);
      if (tokensIn || tokensOut) this.notify('usage_report', { model: this.model, tokens_in: tokensIn, tokens_out: tokensOut });
    } else if (translator.outputTokens) {
      this.notify('usage_report', { model: this.model, tokens_in: 0, tokens_out: translator.outputTokens, input_unknown: true });
    }
  }

  async #cancel() {
    const turn = this.turn;
    if (!turn || turn.cancelRequested) return;
    turn.cancelRequested = true;
    // the gateway's `aborted` event ends the turn; if it never comes, end it here
    turn.timer = setTimeout(() => this.#endCancelled(turn), this.options.abortGraceMs);
    if (turn.acked) await this.#abort(turn);
  }

  /** @param {NonNullable<Bridge['turn']>} turn */
  async #abort(turn) {
    try {
      const result = await this.client?.request('chat.abort', { sessionKey: this.sessionKey, runId: turn.runId });
      if (isObject(result) && result.aborted === false) this.#endCancelled(turn); // already over, or never started
    } catch (err) {
      this.log(`chat.abort failed: ${describe(err)}`);
      this.#endCancelled(turn);
    }
  }

  /** @param {NonNullable<Bridge['turn']>} turn */
  #endCancelled(turn) {
    this.#emitRuntime(turn, { type: 'done', response: turn.translator.sent, cancelled: true });
  }

  // -- ending -----------------------------------------------------------------------------------

  /** The gateway went away while the session was running: fatal. @param {string} reason */
  #lost(reason) {
    if (this.state !== 'ready') return;
    const turn = this.turn;
    if (turn) this.#emitRuntime(turn, { type: 'error', message: reason });
    this.error(reason, { fatal: true, code: 'GATEWAY_LOST' });
    void this.shutdown(1, reason);
  }

  /**
   * Stop everything and exit: a running turn ends cancelled, the connection closes, a private
   * gateway is stopped (SIGTERM, then SIGKILL after `stop_grace_ms`).
   * @param {number} code @param {string} why
   */
  async shutdown(code, why) {
    if (this.state === 'stopping' || this.state === 'stopped') return;
    const wasReady = this.state === 'ready';
    this.state = 'stopping';
    this.log(`stopping (${why})`);
    const turn = this.turn;
    if (wasReady && this.client?.connected) {
      // every run of the session (also one OpenClaw resumed on its own after a restart): a gateway
      // that is stopping drains active work first, which could take minutes
      try {
        await this.client.request('chat.abort', { sessionKey: this.sessionKey }, 5_000);
      } catch {
        // best effort: the gateway goes away next anyway
      }
    }
    if (turn) this.#endCancelled(turn);
    for (const [id, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(new Error('the bridge is stopping'));
      this.pending.delete(id);
    }
    this.client?.close();
    if (this.gateway) await this.gateway.stop(this.options.stopGraceMs);
    if (this.tempRoot) fs.rmSync(this.tempRoot, { recursive: true, force: true });
    this.state = 'stopped';
    this.exit(code);
  }

  /** Synchronous cleanup when the process is exiting anyway. */
  killNow() {
    this.gateway?.killNow();
  }
}
