import { describe, expect, it, vi } from 'vitest'
import { openEventStream, readSSE, SSEParser } from './sse'
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

describe('SSEParser fields for reconnecting', () => {
  it('reports retry (digits only) and keeps the last id across events', () => {
    const retries: number[] = []
    const out: SSEMessage[] = []
    const parser = new SSEParser((m) => out.push(m), (ms) => retries.push(ms))
    parser.feed('retry: 3000\n\nretry: soon\n\nid: 7\nevent: a\ndata: 1\n\nevent: b\ndata: 2\n\nid\ndata: 3\n\n')
    parser.end()
    expect(retries).toEqual([3000])
    expect(out).toEqual([
      { event: 'a', data: '1', id: '7' },
      { event: 'b', data: '2', id: '7' },
      { event: 'message', data: '3', id: '' },
    ])
  })
})

/** A fetch whose answers the test scripts: each call takes the next answer (or waits for one). */
function scriptedFetch() {
  const encoder = new TextEncoder()
  const calls: { url: string; headers: Headers; signal?: AbortSignal | null }[] = []
  const streams: ReadableStreamDefaultController<Uint8Array>[] = []
  const answers: ((init: RequestInit) => Response | Promise<Response>)[] = []
  const fetch = vi.fn(async (url: string, init: RequestInit) => {
    calls.push({ url, headers: new Headers(init.headers), signal: init.signal })
    const answer = answers.shift()
    if (!answer) throw new TypeError('Failed to fetch')
    return answer(init)
  })
  const stream = () => {
    answers.push((init) => {
      const body = new ReadableStream<Uint8Array>({
        start: (controller) => {
          streams.push(controller)
          // as a real fetch: aborting breaks the body
          init.signal?.addEventListener('abort', () => controller.error(new DOMException('aborted', 'AbortError')))
        },
      })
      return new Response(body, { headers: { 'content-type': 'text/event-stream; charset=utf-8' } })
    })
  }
  const send = (text: string, index = streams.length - 1) => streams[index].enqueue(encoder.encode(text))
  const end = (index = streams.length - 1) => streams[index].close()
  const fail = (index = streams.length - 1) => streams[index].error(new TypeError('network error'))
  return { fetch, calls, answers, stream, send, end, fail }
}

function recorder() {
  const log: string[] = []
  return {
    log,
    onOpen: () => log.push('open'),
    onClose: () => log.push('closed'),
    onMessage: (m: SSEMessage) => log.push(`${m.event}:${m.data}`),
  }
}

describe('openEventStream', () => {
  it('opens, delivers events as they arrive and reconnects after the stream ends', async () => {
    const server = scriptedFetch()
    const events = recorder()
    server.stream()
    server.stream()
    const close = openEventStream('/api/v1/events', { ...events, fetch: server.fetch, retryMs: 5 })
    await vi.waitFor(() => expect(events.log).toEqual(['open']))
    expect(server.calls[0].headers.get('accept')).toBe('text/event-stream')
    expect(server.calls[0].headers.has('last-event-id')).toBe(false)
    server.send('event: task.created\ndata: {"id":')
    server.send('"t1"}\n\n')
    await vi.waitFor(() => expect(events.log).toEqual(['open', 'task.created:{"id":"t1"}']))
    server.end(0)
    await vi.waitFor(() => expect(events.log).toEqual(['open', 'task.created:{"id":"t1"}', 'closed', 'open']))
    expect(server.calls).toHaveLength(2)
    close()
    expect(server.calls[1].signal?.aborted).toBe(true)
  })

  it('sends Last-Event-ID on reconnect when the server gave ids, and follows its retry', async () => {
    const server = scriptedFetch()
    const events = recorder()
    server.stream()
    server.stream()
    const close = openEventStream('/events', { ...events, fetch: server.fetch, retryMs: 60_000 })
    await vi.waitFor(() => expect(events.log).toEqual(['open']))
    server.send('retry: 5\n\nid: 41\nevent: x\ndata: 1\n\n')
    await vi.waitFor(() => expect(events.log).toContain('x:1'))
    server.fail(0) // a broken connection counts as a drop, like its end
    await vi.waitFor(() => expect(server.calls).toHaveLength(2)) // 5 ms, not 60 s
    expect(server.calls[1].headers.get('last-event-id')).toBe('41')
    close()
  })

  it('keeps retrying a network failure or an HTTP error, as EventSource did for the inbox', async () => {
    const server = scriptedFetch()
    const events = recorder()
    server.answers.push(() => Response.json({ error: 'busy' }, { status: 503 }))
    server.answers.push(() => new Response('<html>', { headers: { 'content-type': 'text/html' } }))
    // the third call finds no answer: a network failure
    const close = openEventStream('/events', { ...events, fetch: server.fetch, retryMs: 5 })
    await vi.waitFor(() => expect(server.calls.length).toBeGreaterThanOrEqual(4))
    expect(events.log.slice(0, 3)).toEqual(['closed', 'closed', 'closed'])
    expect(events.log).not.toContain('open')
    server.stream()
    await vi.waitFor(() => expect(events.log.at(-1)).toBe('open'))
    close()
  })

  it('gives up on an answer `fatal` names (a 401: signed out), closing once', async () => {
    const server = scriptedFetch()
    const events = recorder()
    server.answers.push(() => Response.json({ error: { code: 'unauthorized' } }, { status: 401 }))
    server.stream()
    openEventStream('/events', { ...events, fetch: server.fetch, retryMs: 1, fatal: (r) => r.status === 401 })
    await vi.waitFor(() => expect(events.log).toEqual(['closed']))
    await new Promise((resolve) => setTimeout(resolve, 30))
    expect(server.calls).toHaveLength(1)
  })

  it('close() stops for good: no event, no close and no reconnect afterwards', async () => {
    const server = scriptedFetch()
    const events = recorder()
    server.stream()
    server.stream()
    const close = openEventStream('/events', { ...events, fetch: server.fetch, retryMs: 1 })
    await vi.waitFor(() => expect(events.log).toEqual(['open']))
    close()
    await new Promise((resolve) => setTimeout(resolve, 30))
    expect(events.log).toEqual(['open'])
    expect(server.calls).toHaveLength(1)
    expect(server.calls[0].signal?.aborted).toBe(true)
  })
})
