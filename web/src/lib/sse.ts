// Server-Sent Events over fetch, for both UIs: EventSource can only GET and cannot send an
// Authorization header, so the workbench's POST /api/chat and the inbox's /api/v1/events are both
// read with fetch and parsed here. Bytes may arrive split anywhere: inside a line, inside a
// multi-byte UTF-8 character, between the \r and \n of a CRLF. The parser buffers until a blank
// line ends an event.

export interface SSEMessage {
  event: string
  data: string
  id?: string
}

export class SSEParser {
  private decoder = new TextDecoder('utf-8')
  private buffer = ''
  private eventType = ''
  private dataLines: string[] = []
  private lastId: string | undefined
  private pendingCR = false

  constructor(
    private readonly onMessage: (message: SSEMessage) => void,
    /** The server's `retry: <ms>` (how long to wait before reconnecting), as EventSource reads it. */
    private readonly onRetry?: (ms: number) => void,
  ) {}

  /** Feed a chunk of bytes (or already-decoded text). */
  feed(chunk: Uint8Array | string): void {
    let text = typeof chunk === 'string' ? chunk : this.decoder.decode(chunk, { stream: true })
    if (this.pendingCR) {
      // the previous chunk ended with \r: a \n here belongs to the same line break
      if (text.startsWith('\n')) text = text.slice(1)
      this.pendingCR = false
    }
    this.buffer += text
    this.drain()
  }

  /** Flush at end of stream: a final event without its blank line is still delivered. */
  end(): void {
    this.buffer += this.decoder.decode()
    this.drain()
    if (this.buffer.length > 0) {
      this.line(this.buffer)
      this.buffer = ''
    }
    this.dispatch()
  }

  private drain(): void {
    for (;;) {
      const match = /\r\n|\r|\n/.exec(this.buffer)
      if (!match) return
      if (match[0] === '\r' && match.index === this.buffer.length - 1) {
        // a lone \r at the end might be the first half of \r\n: consume it, remember it
        this.pendingCR = true
      }
      const line = this.buffer.slice(0, match.index)
      this.buffer = this.buffer.slice(match.index + match[0].length)
      this.line(line)
    }
  }

  private line(line: string): void {
    if (line === '') {
      this.dispatch()
      return
    }
    if (line.startsWith(':')) return // a comment, e.g. ": keep-alive"
    const colon = line.indexOf(':')
    const field = colon === -1 ? line : line.slice(0, colon)
    let value = colon === -1 ? '' : line.slice(colon + 1)
    if (value.startsWith(' ')) value = value.slice(1)
    if (field === 'event') this.eventType = value
    else if (field === 'data') this.dataLines.push(value)
    else if (field === 'id') {
      if (!value.includes('\0')) this.lastId = value
    } else if (field === 'retry' && /^\d+$/.test(value)) this.onRetry?.(Number(value))
  }

  private dispatch(): void {
    if (this.dataLines.length === 0) {
      this.eventType = ''
      return
    }
    const message: SSEMessage = { event: this.eventType || 'message', data: this.dataLines.join('\n') }
    if (this.lastId !== undefined) message.id = this.lastId
    this.eventType = ''
    this.dataLines = []
    this.onMessage(message)
  }
}

/** Read a whole byte stream, calling onMessage for each event as it completes. */
export async function readSSE(
  stream: ReadableStream<Uint8Array>,
  onMessage: (message: SSEMessage) => void,
  onRetry?: (ms: number) => void,
): Promise<void> {
  const parser = new SSEParser(onMessage, onRetry)
  const reader = stream.getReader()
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done) break
      if (value) parser.feed(value)
    }
    parser.end()
  } finally {
    reader.releaseLock()
  }
}

export type FetchLike = (url: string, init: RequestInit) => Promise<Response>

export interface EventStreamOptions {
  /** How to fetch (e.g. one that adds the bearer token); the global fetch by default. */
  fetch?: FetchLike
  /** Wait before reconnecting after a drop; the server's `retry:` field replaces it. */
  retryMs?: number
  /** The stream is open (an OK text/event-stream answer): EventSource's `open`. */
  onOpen?: () => void
  onMessage: (message: SSEMessage) => void
  /** The connection failed or ended: EventSource's `error`. A new attempt follows unless `fatal`
   * said not to (then `onClose` still runs once). */
  onClose?: () => void
  /** An HTTP answer after which reconnecting is pointless (e.g. 401: signed out). By default
   * every failure is retried, as the inbox did with EventSource. */
  fatal?: (response: Response) => boolean
}

export const DEFAULT_RETRY_MS = 3000

/** A GET event stream read with fetch and kept open like EventSource: on a drop (network error,
 * end of stream, HTTP error, not an event stream) it reconnects after the retry delay, sending
 * `Last-Event-ID` when the server gave ids. Returns a function that closes it for good. */
export function openEventStream(url: string, options: EventStreamOptions): () => void {
  const doFetch: FetchLike = options.fetch ?? ((input, init) => fetch(input, init))
  let retryMs = options.retryMs ?? DEFAULT_RETRY_MS
  let lastEventId = ''
  let controller: AbortController | null = null
  let timer: ReturnType<typeof setTimeout> | undefined
  let stopped = false

  const dropped = () => {
    if (stopped) return
    options.onClose?.()
    clearTimeout(timer)
    timer = setTimeout(() => void connect(), retryMs)
  }

  const connect = async () => {
    if (stopped) return
    const abort = new AbortController()
    controller = abort
    const headers: Record<string, string> = { accept: 'text/event-stream' }
    if (lastEventId) headers['last-event-id'] = lastEventId
    let response: Response
    try {
      response = await doFetch(url, { method: 'GET', headers, cache: 'no-store', signal: abort.signal })
    } catch {
      dropped()
      return
    }
    const type = response.headers.get('content-type') ?? ''
    if (stopped || !response.ok || !response.body || !type.toLowerCase().startsWith('text/event-stream')) {
      response.body?.cancel().catch(() => undefined)
      if (stopped) return
      if (!response.ok && options.fatal?.(response)) {
        stopped = true
        options.onClose?.()
        return
      }
      dropped()
      return
    }
    options.onOpen?.()
    try {
      await readSSE(
        response.body,
        (message) => {
          if (message.id !== undefined) lastEventId = message.id
          if (!stopped) options.onMessage(message)
        },
        (ms) => {
          retryMs = ms
        },
      )
    } catch {
      // the connection broke (or was closed by us): same as its end
    }
    dropped()
  }

  void connect()
  return () => {
    stopped = true
    clearTimeout(timer)
    controller?.abort()
  }
}
