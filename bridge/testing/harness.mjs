// The clawlet side of the IPC for the bridge's tests: a Unix socket server in a private temp dir,
// the real bridge process (`node src/main.mjs --socket …`) connected to it, and helpers to send
// messages and wait for the bridge's.

import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { LineDecoder, encodeMessage } from '../src/ipc.mjs';

export const MAIN = fileURLToPath(new URL('../src/main.mjs', import.meta.url));

export async function startBridge() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'oc-bridge-test-'));
  const socketPath = path.join(dir, 'bridge.sock');
  /** @type {Record<string, any>[]} */
  const received = [];
  /** @type {(() => void)[]} */
  let waiters = [];
  const wakeAll = () => {
    const woken = waiters;
    waiters = [];
    for (const wake of woken) wake();
  };
  /** @type {net.Socket | null} */
  let conn = null;
  let closed = false;
  /** @type {(value?: unknown) => void} */
  let onConnect = () => {};
  const connected = new Promise((resolve) => {
    onConnect = resolve;
  });
  const server = net.createServer((socket) => {
    conn = socket;
    const decoder = new LineDecoder((line) => {
      received.push(JSON.parse(line));
      wakeAll();
    });
    socket.on('data', (chunk) => decoder.push(chunk));
    socket.on('close', () => {
      closed = true;
      wakeAll();
    });
    onConnect();
  });
  await new Promise((resolve) => server.listen(socketPath, () => resolve(undefined)));
  let stderr = '';
  const child = spawn(process.execPath, [MAIN, '--socket', socketPath], { stdio: ['ignore', 'ignore', 'pipe'] });
  child.stderr.on('data', (chunk) => {
    stderr += chunk;
  });
  const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));

  const harness = {
    server,
    child,
    received,
    exited,
    get stderr() {
      return stderr;
    },
    get closed() {
      return closed;
    },
    /** @param {Record<string, any>} message */
    send(message) {
      conn?.write(encodeMessage(message));
    },
    /** End clawlet's side of the connection (clawlet went away). */
    disconnect() {
      conn?.end();
    },
    /** @param {string} text raw bytes, for bad-input tests */
    sendRaw(text) {
      conn?.write(text);
    },
    /**
     * The first received message (from `from` on) matching `predicate`.
     * @param {(m: Record<string, any>) => boolean} predicate
     */
    async next(predicate, timeoutMs = 5_000, from = 0) {
      const deadline = Date.now() + timeoutMs;
      for (;;) {
        const found = received.slice(from).find(predicate);
        if (found) return found;
        if (closed) throw new Error(`socket closed; received: ${JSON.stringify(received)}\nstderr: ${stderr}`);
        const left = deadline - Date.now();
        if (left <= 0) throw new Error(`timed out; received: ${JSON.stringify(received)}\nstderr: ${stderr}`);
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, left);
          waiters.push(() => {
            clearTimeout(timer);
            resolve(undefined);
          });
        });
      }
    },
    /** Messages of one turn, up to and including its execution_complete / execution_error. */
    async turn(/** @type {string} */ turnId, timeoutMs = 5_000) {
      await harness.next(
        (m) => m.type === 'sse_event' && m.turn === turnId && ['execution_complete', 'execution_error'].includes(m.data.type),
        timeoutMs,
      );
      return received.filter((m) => m.type === 'sse_event' && m.turn === turnId).map((m) => m.data);
    },
    /** Ask the bridge to stop (as clawlet does), kill it if it has not exited 3 s later. */
    async close() {
      if (child.exitCode === null && child.signalCode === null) {
        harness.send({ type: 'stop' });
        const timer = setTimeout(() => child.kill('SIGKILL'), 3_000);
        await exited;
        clearTimeout(timer);
      }
      await exited;
      conn?.destroy();
      await new Promise((resolve) => server.close(() => resolve(undefined)));
      fs.rmSync(dir, { recursive: true, force: true });
    },
  };
  await connected;
  return harness;
}
