// A small fake OpenClaw gateway for the bridge's tests: the Gateway protocol's handshake, chat.send
// (runs scripted by the message text), chat.abort, and `chat` / `agent` events shaped like real
// OpenClaw 2026.9's (docs/openclaw-interop.md). Not a test file itself (node --test skips this
// directory).
//
// Message → run:
//   contains "[tool]"   agent tool events (start, update, result) for `ls`, then text and final
//   contains "[slow]"   a delta every 40 ms until chat.abort (then `aborted` with the partial text)
//   contains "[fail]"   a delta, then state "error"
//   contains "[think]"  agent "thinking" events, then the final
//   contains "[replace]" a delta with replace: true
//   anything else       "Hello from the fake gateway" in three deltas, then final with usage

import { WebSocketServer } from 'ws';

export const HELLO_TEXT = 'Hello from the fake gateway';
export const TOOL_TEXT = 'I listed the files.';

/**
 * @param {{token?: string, unavailableConnects?: number, busySends?: number}} [options]
 *   `unavailableConnects`: refuse that many connects as "starting"; `busySends`: refuse that many
 *   chat.send as "still answering" (both UNAVAILABLE, retryable, like the real thing)
 */
export async function startFakeGateway(options = {}) {
  const token = options.token ?? 'fake-token';
  let unavailable = options.unavailableConnects ?? 0;
  let busy = options.busySends ?? 0;
  const wss = new WebSocketServer({ host: '127.0.0.1', port: 0 });
  await new Promise((resolve) => wss.once('listening', resolve));
  const address = wss.address();
  const port = typeof address === 'object' && address ? address.port : 0;
  /** @type {{dir: 'in' | 'out', frame: any}[]} */
  const frames = [];
  /** @type {Map<string, {sessionKey: string, text: string, timer: NodeJS.Timeout | null, seq: number, done: boolean}>} */
  const runs = new Map();
  /** @type {Set<import('ws').WebSocket>} */
  const sockets = new Set();

  const send = (/** @type {import('ws').WebSocket} */ ws, /** @type {any} */ frame) => {
    frames.push({ dir: 'out', frame });
    if (ws.readyState === ws.OPEN) ws.send(JSON.stringify(frame));
  };
  const broadcast = (/** @type {string} */ event, /** @type {any} */ payload) => {
    for (const ws of sockets) send(ws, { type: 'event', event, payload });
  };

  const chat = (/** @type {string} */ runId, /** @type {Record<string, any>} */ extra) => {
    const run = runs.get(runId);
    if (!run) return;
    run.seq += 1;
    broadcast('chat', { runId, sessionKey: run.sessionKey, agentId: 'main', seq: run.seq, ...extra });
  };
  const agent = (/** @type {string} */ runId, /** @type {string} */ stream, /** @type {any} */ data) => {
    const run = runs.get(runId);
    if (!run) return;
    run.seq += 1;
    broadcast('agent', { runId, seq: run.seq, stream, ts: Date.now(), sessionKey: run.sessionKey, data });
  };
  const message = (/** @type {string} */ text) => ({ role: 'assistant', content: [{ type: 'text', text }] });
  const finish = (/** @type {string} */ runId, /** @type {Record<string, any>} */ extra) => {
    const run = runs.get(runId);
    if (!run || run.done) return;
    run.done = true;
    if (run.timer) clearInterval(run.timer);
    chat(runId, extra);
  };

  /** Stream `pieces` as deltas (cumulative message + deltaText), then the final. */
  const stream = async (/** @type {string} */ runId, /** @type {string[]} */ pieces, final = true) => {
    let text = '';
    for (const piece of pieces) {
      await new Promise((resolve) => setTimeout(resolve, 5));
      text += piece;
      chat(runId, { state: 'delta', message: message(text), deltaText: piece });
    }
    if (final) finish(runId, { state: 'final', message: message(text), stopReason: 'stop', usage: { input: 12, output: 5, totalTokens: 17 } });
    return text;
  };

  const startRun = async (/** @type {string} */ runId, /** @type {string} */ text) => {
    // another run's events first: the bridge must ignore them
    broadcast('chat', { runId: 'someone-else', sessionKey: 'agent:main:other', seq: 1, state: 'delta', message: message('not yours'), deltaText: 'not yours' });
    chat(runId, { state: 'status', phase: 'starting_model' });
    if (text.includes('[tool]')) {
      agent(runId, 'tool', { phase: 'start', name: 'ls', toolCallId: 'call-1', args: { path: '.' } });
      agent(runId, 'tool', { phase: 'update', name: 'ls', toolCallId: 'call-1', partialResult: 'a' });
      agent(runId, 'tool', {
        phase: 'result',
        name: 'ls',
        toolCallId: 'call-1',
        isError: false,
        result: { content: [{ type: 'text', text: 'a.txt\nb.txt' }], details: {} },
      });
      agent(runId, 'usage', { outputTokens: 4 });
      agent(runId, 'usage', { outputTokens: 9 });
      await stream(runId, ['I listed', ' the files.'], false);
      finish(runId, { state: 'final', message: message('I listed the files.'), stopReason: 'stop' });
    } else if (text.includes('[slow]')) {
      const run = runs.get(runId);
      if (!run) return;
      let sent = '';
      run.timer = setInterval(() => {
        sent += 'slow ';
        chat(runId, { state: 'delta', message: message(sent), deltaText: 'slow ' });
      }, 40);
      run.text = '';
      Object.defineProperty(run, 'partial', { get: () => sent });
    } else if (text.includes('[fail]')) {
      await stream(runId, ['partial'], false);
      finish(runId, { state: 'error', errorMessage: 'the model provider refused', errorKind: 'unknown' });
    } else if (text.includes('[think]')) {
      agent(runId, 'thinking', { text: 'Let me', delta: 'Let me' });
      agent(runId, 'thinking', { text: 'Let me think' });
      await stream(runId, ['Thought ', 'it over.']);
    } else if (text.includes('[replace]')) {
      chat(runId, { state: 'delta', message: message('Draft'), deltaText: 'Draft' });
      chat(runId, { state: 'delta', message: message('Draft, longer'), deltaText: 'Draft, longer', replace: true });
      chat(runId, { state: 'delta', message: message('Rewritten'), deltaText: 'Rewritten', replace: true });
      finish(runId, { state: 'final', message: message('Rewritten'), stopReason: 'stop' });
    } else {
      await stream(runId, ['Hello', ' from the', ' fake gateway']);
    }
  };

  wss.on('connection', (ws) => {
    let connected = false;
    send(ws, { type: 'event', event: 'connect.challenge', payload: { nonce: 'n-1', ts: Date.now() } });
    ws.on('message', (data) => {
      const frame = JSON.parse(data.toString());
      frames.push({ dir: 'in', frame });
      const reply = (/** @type {any} */ payload) => send(ws, { type: 'res', id: frame.id, ok: true, payload });
      const refuse = (/** @type {any} */ error) => send(ws, { type: 'res', id: frame.id, ok: false, error });
      if (!connected) {
        if (frame.method !== 'connect') {
          ws.close(1008, 'connect first');
          return;
        }
        if (unavailable > 0) {
          unavailable -= 1;
          refuse({ code: 'UNAVAILABLE', message: 'gateway starting; retry shortly', retryable: true, retryAfterMs: 50 });
          ws.close(1013, 'starting');
          return;
        }
        if (frame.params?.auth?.token !== token) {
          refuse({ code: 'INVALID_REQUEST', message: 'unauthorized: gateway token mismatch', details: { code: 'AUTH_TOKEN_MISMATCH' } });
          ws.close(1008, 'unauthorized');
          return;
        }
        connected = true;
        sockets.add(ws);
        reply({
          type: 'hello-ok',
          protocol: Math.min(4, frame.params.maxProtocol),
          server: { version: 'fake-1.0', connId: 'c-1' },
          features: { methods: ['chat.send', 'chat.abort'], events: ['chat', 'agent', 'tick'] },
          snapshot: { sessionDefaults: { defaultAgentId: 'main', mainSessionKey: 'agent:main:main' } },
          auth: { role: 'operator', scopes: frame.params.scopes },
          policy: { maxPayload: 26214400, tickIntervalMs: 30000 },
        });
        return;
      }
      if (frame.method === 'chat.send' && busy > 0) {
        busy -= 1;
        refuse({ code: 'UNAVAILABLE', message: `session ${frame.params.sessionKey} is still answering; retry later`, retryable: true });
      } else if (frame.method === 'chat.send') {
        const runId = frame.params.idempotencyKey;
        runs.set(runId, { sessionKey: frame.params.sessionKey, text: frame.params.message, timer: null, seq: 0, done: false });
        reply({ runId, status: 'started' });
        void startRun(runId, frame.params.message);
      } else if (frame.method === 'chat.abort') {
        const run = runs.get(frame.params.runId);
        if (!run || run.done) {
          reply({ ok: true, aborted: false, runIds: [] });
          return;
        }
        reply({ ok: true, aborted: true, runIds: [frame.params.runId] });
        const partial = /** @type {any} */ (run).partial ?? '';
        finish(frame.params.runId, { state: 'aborted', stopReason: 'rpc', message: message(partial) });
      } else {
        refuse({ code: 'INVALID_REQUEST', message: `unknown method: ${frame.method}` });
      }
    });
    ws.on('close', () => sockets.delete(ws));
  });

  return {
    url: `ws://127.0.0.1:${port}`,
    token,
    frames,
    /** Requests the bridge sent, by method. @param {string} method */
    sent: (method) => frames.filter((f) => f.dir === 'in' && f.frame.method === method).map((f) => f.frame),
    /** Drop every connection (a gateway that went away). */
    dropAll: () => {
      for (const ws of sockets) ws.terminate();
    },
    close: async () => {
      for (const run of runs.values()) if (run.timer) clearInterval(run.timer);
      for (const ws of wss.clients) ws.terminate();
      await new Promise((resolve) => wss.close(() => resolve(undefined)));
    },
  };
}
