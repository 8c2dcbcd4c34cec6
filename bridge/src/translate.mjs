// Event translation (seed 001 §4.6), in two steps:
//
// 1. `RunTranslator` turns the Gateway protocol's events of one run (`chat` and `agent` events,
//    see shared/design/PROTOCOLS.md §1) into the seed's OpenClaw runtime events
//    (`token`, `tool_use`, `tool_result`, `thinking`, `done`, `error`);
// 2. `translateEvent` is the seed's table: OpenClaw runtime event → clawlet exec-plane SSE event.
//
//   OpenClaw (gateway)                      runtime event   SSE event
//   chat delta (deltaText: new text only)   token           text_chunk {content}
//   agent tool phase "start"                tool_use        tool_call_start {tool_name, tool_input, call_id}
//   agent tool phase "result"               tool_result     tool_call_complete {tool_name, result, call_id, is_error}
//   (no gateway event yet)                  skill_invoke    skill_call_start {skill_name, arguments}
//   (no gateway event yet)                  skill_result    skill_call_complete {skill_name, result}
//   agent stream "thinking" (delta)         thinking        thinking {content, stage: "openclaw"}
//   chat final                              done            execution_complete {content}
//   chat aborted                            done+cancelled  execution_complete {content, cancelled: true}
//   chat error                              error           execution_error {error}
//
// `call_id`, `is_error` and `cancelled` are the same additions clawlet's exec plane makes to the
// seed's field names (src/clawlet/controlplane/seed_events.py).

export const THINKING_STAGE = 'openclaw';

/**
 * The seed's table: one OpenClaw runtime event → one SSE event, or null for anything else.
 * @param {Record<string, any>} event
 * @returns {Record<string, any> | null}
 */
export function translateEvent(event) {
  switch (event?.type) {
    case 'token':
      return { type: 'text_chunk', content: event.content };
    case 'tool_use':
      return { type: 'tool_call_start', tool_name: event.name, tool_input: event.input, call_id: event.id ?? '' };
    case 'tool_result':
      return {
        type: 'tool_call_complete',
        tool_name: event.name,
        result: event.output,
        call_id: event.id ?? '',
        is_error: Boolean(event.isError),
      };
    case 'skill_invoke':
      return { type: 'skill_call_start', skill_name: event.skill, arguments: event.args };
    case 'skill_result':
      return { type: 'skill_call_complete', skill_name: event.skill, result: event.output };
    case 'thinking':
      return { type: 'thinking', content: event.content, stage: THINKING_STAGE };
    case 'done':
      return event.cancelled
        ? { type: 'execution_complete', content: event.response, cancelled: true }
        : { type: 'execution_complete', content: event.response };
    case 'error':
      return { type: 'execution_error', error: event.message };
    default:
      return null;
  }
}

/**
 * The text of a chat message: `{content: [{type: "text", text}]}`, `{content: "…"}` or `{text}`.
 * @param {unknown} message
 */
export function messageText(message) {
  if (typeof message === 'string') return message;
  if (!message || typeof message !== 'object') return '';
  const { content, text } = /** @type {Record<string, any>} */ (message);
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    return content
      .filter((part) => part && typeof part === 'object' && part.type === 'text' && typeof part.text === 'string')
      .map((part) => part.text)
      .join('');
  }
  return typeof text === 'string' ? text : '';
}

/**
 * A tool result as text: OpenClaw sends `{content: [{type: "text", text}], details}`, clawlet's
 * gateway the same shape (older: a plain string).
 * @param {unknown} result
 */
export function resultText(result) {
  if (result === undefined || result === null) return '';
  if (typeof result === 'string') return result;
  const text = messageText(result);
  if (text) return text;
  try {
    return JSON.stringify(result);
  } catch {
    return String(result);
  }
}

/** Follows one run (`runId`) through its gateway events. */
export class RunTranslator {
  /** @param {string} runId */
  constructor(runId) {
    this.runId = runId;
    /** The text sent on as `token`s so far. */
    this.sent = '';
    /** The gateway rewrote text already sent (`replace`): only `done` carries the right text. */
    this.diverged = false;
    this.finished = false;
    /** @type {Record<string, any> | null} the final's usage, if it had one */
    this.usage = null;
    /** Output tokens from `agent` events of stream "usage" (all real OpenClaw 2026.9 sends). */
    this.outputTokens = 0;
    /** @type {Map<string, string>} toolCallId → tool name */
    this.tools = new Map();
    this.thinking = '';
  }

  /**
   * A `chat` event's payload → runtime events.
   * @param {Record<string, any>} payload
   * @returns {Record<string, any>[]}
   */
  chat(payload) {
    if (this.finished || !payload || payload.runId !== this.runId) return [];
    switch (payload.state) {
      case 'delta':
        return this.#delta(payload);
      case 'final': {
        this.finished = true;
        if (payload.usage && typeof payload.usage === 'object') this.usage = payload.usage;
        const text = messageText(payload.message);
        return [...this.#catchUp(text), { type: 'done', response: text || this.sent }];
      }
      case 'aborted': {
        this.finished = true;
        const text = messageText(payload.message);
        return [...this.#catchUp(text), { type: 'done', response: text || this.sent, cancelled: true }];
      }
      case 'error': {
        this.finished = true;
        const message = typeof payload.errorMessage === 'string' && payload.errorMessage ? payload.errorMessage : 'the OpenClaw run failed';
        return [{ type: 'error', message, kind: payload.errorKind }];
      }
      default:
        return []; // "status" (preparing_workspace, starting_model …) and states to come
    }
  }

  /**
   * An `agent` event's payload → runtime events (tool activity, thinking).
   * @param {Record<string, any>} payload
   * @returns {Record<string, any>[]}
   */
  agent(payload) {
    if (this.finished || !payload || payload.runId !== this.runId) return [];
    const data = payload.data && typeof payload.data === 'object' ? payload.data : {};
    if (payload.stream === 'tool') {
      const id = typeof data.toolCallId === 'string' ? data.toolCallId : '';
      if (data.phase === 'start') {
        const name = String(data.name ?? 'tool');
        this.tools.set(id, name);
        return [{ type: 'tool_use', name, input: data.args ?? {}, id }];
      }
      if (data.phase === 'result') {
        const name = String(data.name ?? this.tools.get(id) ?? 'tool');
        return [{ type: 'tool_result', name, output: resultText(data.result), id, isError: Boolean(data.isError) }];
      }
      return []; // "update": partial output, not part of the seed's vocabulary
    }
    if (payload.stream === 'usage') {
      if (typeof data.outputTokens === 'number' && Number.isFinite(data.outputTokens)) {
        this.outputTokens = Math.max(this.outputTokens, data.outputTokens);
      }
      return [];
    }
    if (payload.stream === 'thinking') {
      let delta = typeof data.delta === 'string' ? data.delta : '';
      if (!delta && typeof data.text === 'string' && data.text.startsWith(this.thinking)) {
        delta = data.text.slice(this.thinking.length);
      }
      if (typeof data.text === 'string') this.thinking = data.text;
      else this.thinking += delta;
      return delta ? [{ type: 'thinking', content: delta }] : [];
    }
    return [];
  }

  /** @param {Record<string, any>} payload */
  #delta(payload) {
    let chunk = '';
    if (typeof payload.deltaText === 'string' && !payload.replace) {
      chunk = payload.deltaText; // protocol v4: only the new text
    } else {
      // v4 `replace: true` (deltaText is the whole text) or a v3 server (cumulative `message`)
      const full = typeof payload.deltaText === 'string' ? payload.deltaText : messageText(payload.message);
      if (full.startsWith(this.sent)) chunk = full.slice(this.sent.length);
      else this.diverged = true;
    }
    if (!chunk) return [];
    this.sent += chunk;
    return [{ type: 'token', content: chunk }];
  }

  /** Text the final message has beyond what was streamed (a server that skipped a last delta). */
  #catchUp(/** @type {string} */ text) {
    if (this.diverged || !text || text.length <= this.sent.length || !text.startsWith(this.sent)) return [];
    const chunk = text.slice(this.sent.length);
    this.sent = text;
    return [{ type: 'token', content: chunk }];
  }
}
