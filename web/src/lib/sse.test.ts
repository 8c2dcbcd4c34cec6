import { describe, expect, it } from 'vitest'
import { readSSE, SSEParser } from './sse'
import type { SSEMessage } from './sse'

const encoder = new TextEncoder()

function parseChunks(chunks: (string | Uint8Array)[]): SSEMessage[] {
  const out: SSEMessage[] = []
  const parser = new SSEParser((m) => out.push(m))
  for (const chunk of chunks) parser.feed(typeof chunk === 'string' ? encoder.encode(chunk) : chunk)
  parser.end()
  return out
}

const frame = (type: string, data: object) => `event: ${type}\ndata: ${JSON.stringify({ type, ...data })}\n\n`

describe('SSEParser', () => {
  it('parses one event per chunk', () => {
    const events = parseChunks([frame('token', { content: 'hi' })])
    expect(events).toEqual([{ event: 'token', data: '{"type":"token","content":"hi"}' }])
  })

  it('joins an event split across chunks at every position', () => {
    const text = frame('token', { content: 'hello' }) + frame('done', { content: 'hello', session_id: 's' })
    for (let cut = 1; cut < text.length; cut++) {
      const events = parseChunks([text.slice(0, cut), text.slice(cut)])
      expect(events.map((e) => e.event)).toEqual(['token', 'done'])
      expect(JSON.parse(events[0].data).content).toBe('hello')
    }
  })

  it('decodes multi-byte UTF-8 (Chinese) split inside a character', () => {
    const bytes = encoder.encode(frame('token', { content: '你好，世界' }))
    const at = bytes.indexOf(0xe4) + 1 // inside the 3-byte sequence of 你
    const events = parseChunks([bytes.slice(0, at), bytes.slice(at, at + 1), bytes.slice(at + 1)])
    expect(JSON.parse(events[0].data).content).toBe('你好，世界')
  })

  it('splits byte by byte', () => {
    const bytes = encoder.encode(frame('token', { content: '天气 sunny ☀️' }))
    const events = parseChunks(Array.from(bytes, (b) => new Uint8Array([b])))
    expect(events).toHaveLength(1)
    expect(JSON.parse(events[0].data).content).toBe('天气 sunny ☀️')
  })

  it('accepts CRLF and lone CR line endings, also with \\r and \\n in different chunks', () => {
    const crlf = 'event: token\r\ndata: {"content":"a"}\r\n\r\n'
    expect(parseChunks([crlf])).toEqual([{ event: 'token', data: '{"content":"a"}' }])
    for (let cut = 1; cut < crlf.length; cut++) {
      const events = parseChunks([crlf.slice(0, cut), crlf.slice(cut)])
      expect(events).toEqual([{ event: 'token', data: '{"content":"a"}' }])
    }
    expect(parseChunks(['event: x\rdata: 1\r\r'])).toEqual([{ event: 'x', data: '1' }])
  })

  it('ignores comments and keep-alives', () => {
    const events = parseChunks([': keep-alive\n\n', frame('token', { content: 'x' }), ': keep-alive\n\n'])
    expect(events.map((e) => e.event)).toEqual(['token'])
  })

  it('delivers several events from one chunk, in order', () => {
    const text = frame('tool_start', { tool: 'terminal', input: 'echo hi' }) +
      frame('tool_end', { tool: 'terminal', output: 'hi' }) + frame('new_response', {})
    expect(parseChunks([text]).map((e) => e.event)).toEqual(['tool_start', 'tool_end', 'new_response'])
  })

  it('joins multi-line data and defaults the event name to message', () => {
    expect(parseChunks(['data: a\ndata: b\n\n'])).toEqual([{ event: 'message', data: 'a\nb' }])
  })

  it('flushes a final event without its blank line at end of stream', () => {
    expect(parseChunks(['event: done\ndata: {}'])).toEqual([{ event: 'done', data: '{}' }])
  })

  it('reads a ReadableStream chunk by chunk', async () => {
    const pieces = ['event: tok', 'en\ndata: {"content":"你', '好"}\n', '\n']
    const bytes = pieces.map((p) => encoder.encode(p))
    const stream = new ReadableStream<Uint8Array>({
      start(controller) {
        for (const b of bytes) controller.enqueue(b)
        controller.close()
      },
    })
    const out: SSEMessage[] = []
    await readSSE(stream, (m) => out.push(m))
    expect(out).toEqual([{ event: 'token', data: '{"content":"你好"}' }])
  })
})
