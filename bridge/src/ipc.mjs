// JSON-lines framing of the bridge's IPC with clawlet (seed 001 §4.5): one JSON object per line,
// UTF-8, "\n"-terminated, over the Unix domain socket clawlet listens on.
//
// Python → bridge: start, user_message, cancel, stop, response.
// Bridge → Python: ready, sse_event, request, fire_and_forget, error.
//
// A line that is not JSON, not an object, or has an unknown `type` is reported back as an `error`
// message and skipped; it never ends the bridge. A line longer than `maxLineBytes` is dropped whole
// (the decoder resynchronises at the next newline).

/** The longest line accepted (the exec plane's own frame limit). */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;

/** Message types clawlet sends to the bridge. */
export const PYTHON_TO_BRIDGE = Object.freeze(['start', 'user_message', 'cancel', 'stop', 'response']);

/** Message types the bridge sends to clawlet. */
export const BRIDGE_TO_PYTHON = Object.freeze(['ready', 'sse_event', 'request', 'fire_and_forget', 'error']);

/** Splits a byte stream into lines; multi-byte characters may be split across chunks. */
export class LineDecoder {
  /** @type {Buffer[]} */
  #parts = [];
  #size = 0;
  #skipping = false;

  /**
   * @param {(line: string) => void} onLine called with each non-blank line (without the newline)
   * @param {{maxLineBytes?: number, onOverflow?: (bytes: number) => void}} [options]
   */
  constructor(onLine, options = {}) {
    this.onLine = onLine;
    this.maxLineBytes = options.maxLineBytes ?? MAX_LINE_BYTES;
    this.onOverflow = options.onOverflow;
  }

  /** @param {Buffer | Uint8Array | string} chunk */
  push(chunk) {
    const data = typeof chunk === 'string' ? Buffer.from(chunk, 'utf8') : Buffer.from(chunk);
    let start = 0;
    for (;;) {
      const newline = data.indexOf(10, start);
      if (newline === -1) {
        this.#append(data.subarray(start));
        return;
      }
      this.#append(data.subarray(start, newline));
      this.#emit();
      start = newline + 1;
    }
  }

  /** The stream ended: a last line without a newline still counts. */
  end() {
    if (this.#size > 0 || this.#skipping) this.#emit();
  }

  /** @param {Buffer} part */
  #append(part) {
    if (this.#skipping || part.length === 0) return;
    if (this.#size + part.length > this.maxLineBytes) {
      const bytes = this.#size + part.length;
      this.#parts = [];
      this.#size = 0;
      this.#skipping = true;
      this.onOverflow?.(bytes);
      return;
    }
    this.#parts.push(part);
    this.#size += part.length;
  }

  #emit() {
    if (this.#skipping) {
      this.#skipping = false;
      return;
    }
    const line = Buffer.concat(this.#parts, this.#size).toString('utf8');
    this.#parts = [];
    this.#size = 0;
    if (line.trim()) this.onLine(line);
  }
}

/**
 * One message as a line. JSON.stringify escapes every control character inside strings, so the
 * only newline is the terminator.
 * @param {Record<string, unknown>} message
 */
export function encodeMessage(message) {
  return `${JSON.stringify(message)}\n`;
}

/**
 * Parse one line into a message of a known type.
 * @param {string} line
 * @param {readonly string[]} [known]
 * @returns {{message: Record<string, any>} | {error: string}}
 */
export function parseMessage(line, known = PYTHON_TO_BRIDGE) {
  let value;
  try {
    value = JSON.parse(line);
  } catch (err) {
    return { error: `not JSON: ${err instanceof Error ? err.message : String(err)}` };
  }
  if (value === null || typeof value !== 'object' || Array.isArray(value)) {
    return { error: 'a message must be a JSON object' };
  }
  if (typeof value.type !== 'string') return { error: "a message needs a string 'type'" };
  if (!known.includes(value.type)) {
    return { error: `unknown message type ${JSON.stringify(value.type)} (expected one of ${known.join(', ')})` };
  }
  return { message: value };
}

/**
 * A short, single-line preview of a bad line for an error message.
 * @param {string} line
 */
export function preview(line, max = 120) {
  const flat = line.replace(/\s+/g, ' ');
  return flat.length > max ? `${flat.slice(0, max)}…` : flat;
}
