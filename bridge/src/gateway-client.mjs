// An operator client of the OpenClaw Gateway WebSocket protocol (v4, accepting v3; see
// shared/design/PROTOCOLS.md §1): challenge, `connect` as gateway-client/backend with the shared
// token and caps ["tool-events"], request/response correlation, and events. Node 20 has no stable
// global WebSocket client, so this uses the `ws` package.

import { EventEmitter } from 'node:events';
import { randomUUID } from 'node:crypto';
import WebSocket from 'ws';

export const MIN_PROTOCOL = 3;
export const MAX_PROTOCOL = 4;
export const CLIENT_ID = 'gateway-client';
export const CLIENT_MODE = 'backend';
export const SCOPES = Object.freeze(['operator.read', 'operator.write']);
export const CAPS = Object.freeze(['tool-events']);
const MAX_PAYLOAD = 64 * 1024 * 1024;

/** An error answer of the gateway (`res` with `ok: false`) or a refused connect. */
export class GatewayError extends Error {
  /** @param {{code?: string, message?: string, details?: any, retryable?: boolean, retryAfterMs?: number}} error */
  constructor(error) {
    const code = typeof error?.code === 'string' ? error.code : 'UNKNOWN';
    const detail = typeof error?.details?.code === 'string' ? ` (${error.details.code})` : '';
    super(`${code}${detail}: ${error?.message ?? 'the gateway refused the request'}`);
    this.name = 'GatewayError';
    this.code = code;
    this.details = error?.details;
    this.retryable = Boolean(error?.retryable);
    this.retryAfterMs = typeof error?.retryAfterMs === 'number' ? error.retryAfterMs : undefined;
  }
}

/** The connection could not be made or was lost (worth retrying while a gateway starts). */
export class GatewayConnectionError extends Error {
  constructor(/** @type {string} */ message) {
    super(message);
    this.name = 'GatewayConnectionError';
  }
}

/**
 * A URL safe to log and report: no credentials, query or fragment.
 * @param {string} url
 */
export function safeUrl(url) {
  try {
    const parsed = new URL(url);
    parsed.username = '';
    parsed.password = '';
    parsed.search = '';
    parsed.hash = '';
    return parsed.toString();
  } catch {
    return '(invalid URL)';
  }
}

/**
 * One connection. Emits `event` (name, payload) for every event frame after the handshake and
 * `closed` (reason) once, when the connection ends for any reason after `connect()` succeeded.
 */
export class GatewayClient extends EventEmitter {
  /**
   * @param {{url: string, token?: string, version?: string, requestTimeoutMs?: number,
   *   connectTimeoutMs?: number, displayName?: string}} options
   */
  constructor(options) {
    super();
    this.url = options.url;
    this.token = options.token;
    this.version = options.version ?? '0';
    this.displayName = options.displayName ?? 'clawlet OpenClaw bridge';
    this.requestTimeoutMs = options.requestTimeoutMs ?? 30_000;
    this.connectTimeoutMs = options.connectTimeoutMs ?? 10_000;
    /** @type {WebSocket | null} */
    this.ws = null;
    this.protocol = 0;
    /** @type {Record<string, any> | null} */
    this.hello = null;
    this.connected = false;
    this.closedReason = '';
    /** @type {Map<string, {resolve: (v: any) => void, reject: (e: Error) => void, timer: NodeJS.Timeout}>} */
    this.pending = new Map();
    this.lastSeen = Date.now();
    /** @type {NodeJS.Timeout | null} */
    this.watchdog = null;
  }

  /** Open the socket, answer the challenge, and resolve with the `hello-ok` payload. */
  connect() {
    return new Promise((resolve, reject) => {
      let settled = false;
      const ws = new WebSocket(this.url, { maxPayload: MAX_PAYLOAD, handshakeTimeout: this.connectTimeoutMs });
      this.ws = ws;
      const connectId = randomUUID();
      const fail = (/** @type {Error} */ err) => {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        ws.removeAllListeners();
        ws.on('error', () => {});
        ws.terminate();
        reject(err);
      };
      const timer = setTimeout(
        () => fail(new GatewayConnectionError(`no answer to connect from ${safeUrl(this.url)} within ${this.connectTimeoutMs} ms`)),
        this.connectTimeoutMs,
      );
      ws.on('error', (err) => fail(new GatewayConnectionError(`cannot connect to ${safeUrl(this.url)}: ${err.message}`)));
      ws.on('close', (code, reason) =>
        fail(new GatewayConnectionError(`${safeUrl(this.url)} closed the connection (${code}${reason.length ? ` ${reason}` : ''})`)),
      );
      ws.on('message', (data, isBinary) => {
        if (isBinary) return;
        let frame;
        try {
          frame = JSON.parse(data.toString());
        } catch {
          return;
        }
        if (frame?.type === 'event' && frame.event === 'connect.challenge') {
          ws.send(JSON.stringify({ type: 'req', id: connectId, method: 'connect', params: this.#connectParams() }));
        } else if (frame?.type === 'res' && frame.id === connectId) {
          if (!frame.ok) {
            fail(new GatewayError(frame.error));
            return;
          }
          settled = true;
          clearTimeout(timer);
          ws.removeAllListeners();
          this.#attach(ws, frame.payload ?? {});
          resolve(this.hello);
        }
      });
    });
  }

  #connectParams() {
    /** @type {Record<string, any>} */
    const params = {
      minProtocol: MIN_PROTOCOL,
      maxProtocol: MAX_PROTOCOL,
      client: { id: CLIENT_ID, version: this.version, platform: process.platform, mode: CLIENT_MODE, displayName: this.displayName },
      role: 'operator',
      scopes: [...SCOPES],
      caps: [...CAPS],
    };
    if (this.token) params.auth = { token: this.token };
    return params;
  }

  /** @param {WebSocket} ws @param {Record<string, any>} hello */
  #attach(ws, hello) {
    this.hello = hello;
    this.protocol = typeof hello.protocol === 'number' ? hello.protocol : MAX_PROTOCOL;
    this.connected = true;
    this.lastSeen = Date.now();
    ws.on('message', (data, isBinary) => {
      this.lastSeen = Date.now();
      if (!isBinary) this.#onFrame(data.toString());
    });
    ws.on('error', () => {}); // 'close' follows
    ws.on('close', (code, reason) => this.#closed(`the gateway closed the connection (${code}${reason.length ? ` ${reason}` : ''})`));
    const tick = Number(hello.policy?.tickIntervalMs);
    if (Number.isFinite(tick) && tick > 0) {
      // PROTOCOLS.md: a client drops a connection that has been silent for twice the tick interval
      this.watchdog = setInterval(() => {
        if (Date.now() - this.lastSeen > 2 * tick) {
          this.#closed(`the gateway sent nothing for ${Math.round((2 * tick) / 1000)} s`);
          ws.terminate();
        }
      }, Math.min(tick, 5_000));
      this.watchdog.unref();
    }
  }

  /** @param {string} text */
  #onFrame(text) {
    let frame;
    try {
      frame = JSON.parse(text);
    } catch {
      return;
    }
    if (frame?.type === 'res') {
      const waiter = this.pending.get(frame.id);
      if (!waiter) return;
      this.pending.delete(frame.id);
      clearTimeout(waiter.timer);
      if (frame.ok) waiter.resolve(frame.payload);
      else waiter.reject(new GatewayError(frame.error));
    } else if (frame?.type === 'event' && typeof frame.event === 'string') {
      this.emit('event', frame.event, frame.payload ?? {});
    }
  }

  /** @param {string} reason */
  #closed(reason) {
    if (!this.connected) return;
    this.connected = false;
    this.closedReason = reason;
    if (this.watchdog) clearInterval(this.watchdog);
    for (const [id, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(new GatewayConnectionError(reason));
      this.pending.delete(id);
    }
    this.emit('closed', reason);
  }

  /**
   * Send a request and resolve with the response payload.
   * @param {string} method
   * @param {Record<string, any>} [params]
   * @param {number} [timeoutMs]
   */
  request(method, params = {}, timeoutMs = this.requestTimeoutMs) {
    return new Promise((resolve, reject) => {
      if (!this.connected || !this.ws) {
        reject(new GatewayConnectionError(`cannot send ${method}: not connected (${this.closedReason || 'never connected'})`));
        return;
      }
      const id = randomUUID();
      const timer = setTimeout(() => {
        this.pending.delete(id);
        reject(new GatewayConnectionError(`${method}: no answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.pending.set(id, { resolve, reject, timer });
      this.ws.send(JSON.stringify({ type: 'req', id, method, params }), (err) => {
        if (!err) return;
        const waiter = this.pending.get(id);
        if (!waiter) return;
        this.pending.delete(id);
        clearTimeout(waiter.timer);
        reject(new GatewayConnectionError(`cannot send ${method}: ${err.message}`));
      });
    });
  }

  /** Close the connection (no `closed` event for a close we asked for). */
  close() {
    const ws = this.ws;
    this.connected = false;
    if (this.watchdog) clearInterval(this.watchdog);
    for (const [id, waiter] of this.pending) {
      clearTimeout(waiter.timer);
      waiter.reject(new GatewayConnectionError('the client closed the connection'));
      this.pending.delete(id);
    }
    if (ws && ws.readyState !== WebSocket.CLOSED) {
      ws.removeAllListeners();
      ws.on('error', () => {});
      ws.close(1000);
      setTimeout(() => ws.terminate(), 1_000).unref();
    }
  }
}

/**
 * Connect, retrying while the gateway is not up yet: connection errors and retryable refusals
 * (real OpenClaw answers `UNAVAILABLE` "gateway starting; retry shortly" for a second or two after
 * its port opens). A final refusal (bad token, protocol mismatch) is thrown at once.
 *
 * @param {ConstructorParameters<typeof GatewayClient>[0]} options
 * @param {{timeoutMs: number, retryDelayMs?: number, abort?: () => string | null}} retry
 *   `abort` returns a reason to give up early (e.g. the gateway process exited)
 * @returns {Promise<GatewayClient>}
 */
export async function connectWithRetry(options, retry) {
  const deadline = Date.now() + retry.timeoutMs;
  let last = 'no attempt yet';
  for (;;) {
    const stop = retry.abort?.();
    if (stop) throw new GatewayConnectionError(stop);
    const client = new GatewayClient({ ...options, connectTimeoutMs: Math.max(1_000, Math.min(options.connectTimeoutMs ?? 10_000, deadline - Date.now())) });
    let delay = retry.retryDelayMs ?? 250;
    try {
      await client.connect();
      return client;
    } catch (err) {
      if (err instanceof GatewayError && !err.retryable) throw err;
      if (err instanceof GatewayError && err.retryAfterMs) delay = Math.min(err.retryAfterMs, 2_000);
      last = err instanceof Error ? err.message : String(err);
    }
    if (Date.now() + delay > deadline) {
      throw new GatewayConnectionError(`the gateway at ${safeUrl(options.url)} did not accept a connect within ${retry.timeoutMs} ms (last error: ${last})`);
    }
    await new Promise((resolve) => setTimeout(resolve, delay));
  }
}
