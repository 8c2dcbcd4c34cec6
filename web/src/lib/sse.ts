// A Server-Sent Events parser for POST responses (EventSource can only GET).
// Bytes may arrive split anywhere: inside a line, inside a multi-byte UTF-8 character,
// between the \r and \n of a CRLF. The parser buffers until a blank line ends an event.

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

  constructor(private readonly onMessage: (message: SSEMessage) => void) {}

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
    else if (field === 'id') this.lastId = value
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
): Promise<void> {
  const parser = new SSEParser(onMessage)
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
