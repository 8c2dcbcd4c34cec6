#!/usr/bin/env node
// Entry point: `node bridge/src/main.mjs --socket <path>`.
//
// clawlet listens on a per-session Unix domain socket and starts this process, which connects to it
// and speaks JSON lines (src/ipc.mjs) until `stop` or until the socket closes (clawlet went away:
// the bridge stops its gateway and exits). Logs go to stderr; stdout is unused. Exit codes: 0 after
// `stop` or EOF, 1 after a fatal error (failed start, lost gateway), 2 for bad arguments.

import net from 'node:net';
import process from 'node:process';

import { Bridge } from './bridge.mjs';
import { LineDecoder, encodeMessage, parseMessage, preview } from './ipc.mjs';

/** @param {string[]} argv */
export function parseArgs(argv) {
  const index = argv.indexOf('--socket');
  const socketPath = index >= 0 ? argv[index + 1] : process.env.CLAWLET_BRIDGE_SOCKET;
  return { socketPath: socketPath || '' };
}

function main() {
  const { socketPath } = parseArgs(process.argv.slice(2));
  if (!socketPath) {
    process.stderr.write('usage: node main.mjs --socket <unix socket path>\n');
    process.exit(2);
  }
  const log = (/** @type {string} */ line) => process.stderr.write(`[openclaw-bridge ${process.pid}] ${line}\n`);
  const socket = net.createConnection(socketPath);
  let exiting = false;

  const exit = (/** @type {number} */ code) => {
    if (exiting) return;
    exiting = true;
    socket.end(() => process.exit(code));
    setTimeout(() => process.exit(code), 2_000).unref();
  };
  const bridge = new Bridge({
    send: (message) => {
      if (!socket.destroyed && socket.writable) socket.write(encodeMessage(message));
    },
    exit,
    log,
  });

  const decoder = new LineDecoder(
    (line) => {
      const parsed = parseMessage(line);
      if ('error' in parsed) {
        bridge.error(`bad message: ${parsed.error}: ${preview(line)}`, { code: 'BAD_MESSAGE' });
        return;
      }
      Promise.resolve(bridge.handle(parsed.message)).catch((err) => {
        log(`handling ${parsed.message.type} failed: ${err instanceof Error ? err.stack : err}`);
        bridge.error(`handling ${parsed.message.type} failed: ${err instanceof Error ? err.message : err}`);
      });
    },
    { onOverflow: (bytes) => bridge.error(`bad message: a line longer than the limit (${bytes}+ bytes) was dropped`, { code: 'BAD_MESSAGE' }) },
  );

  socket.on('connect', () => log(`connected to ${socketPath}`));
  socket.on('data', (chunk) => decoder.push(chunk));
  socket.on('end', () => {
    decoder.end();
    void bridge.shutdown(0, 'clawlet closed the socket');
  });
  socket.on('error', (err) => {
    log(`socket error: ${err.message}`);
    if (bridge.state === 'new') process.exit(1); // never connected: nothing to clean up
    void bridge.shutdown(1, `socket error: ${err.message}`);
  });

  for (const signal of /** @type {const} */ (['SIGTERM', 'SIGINT'])) {
    process.on(signal, () => void bridge.shutdown(0, `received ${signal}`));
  }
  process.on('exit', () => bridge.killNow());
  process.on('uncaughtException', (err) => {
    log(`uncaught exception: ${err.stack ?? err}`);
    bridge.error(`the OpenClaw bridge crashed: ${err.message}`, { fatal: true, code: 'CRASH' });
    bridge.killNow();
    process.exit(1);
  });
}

main();
