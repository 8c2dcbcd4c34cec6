import { describe, expect, it, vi } from 'vitest'
import { connectEvents } from './events'
import type { Action } from './reducer'

const encoder = new TextEncoder()

/** One server event stream per call, written by the test; a 401 when `refuse` is set. */
function server() {
  const streams: ReadableStreamDefaultController<Uint8Array>[] = []
  const calls: Headers[] = []
  let refuse = false
  const fetch = vi.fn(async (_url: string, init: RequestInit) => {
    calls.push(new Headers(init.headers))
    if (refuse) return Response.json({ error: { code: 'unauthorized' } }, { status: 401 })
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        streams.push(controller)
        init.signal?.addEventListener('abort', () => controller.error(new DOMException('aborted', 'AbortError')))
      },
    })
    return new Response(body, { headers: { 'content-type': 'text/event-stream' } })
  })
  return {
    fetch,
    calls,
    send: (text: string) => streams[streams.length - 1].enqueue(encoder.encode(text)),
    drop: () => streams[streams.length - 1].close(),
    refuse: () => (refuse = true),
  }
}

const task = { id: 't1', agentId: 'main', title: 'hi', titleLocked: false, status: 'running', createdAt: 1, updatedAt: 2 }

describe('connectEvents (fetch, not EventSource)', () => {
  it('turns the seed events into store actions and skips heartbeats and unknown events', async () => {
    const s = server()
    const actions: Action[] = []
    const close = connectEvents((a) => actions.push(a), '/api/v1/events', 5, s.fetch)
    await vi.waitFor(() => expect(actions).toEqual([{ type: 'CONNECTION', connection: 'open' }]))
    s.send('retry: 5\n\n')
    s.send(`event: task.updated\ndata: ${JSON.stringify(task)}\n\n`)
    s.send('event: heartbeat\ndata: {"timestamp":1}\n\nevent: other\ndata: {}\n\n')
    s.send('event: message.delta\ndata: {"taskId":"t1","content":"你好"}\n\n')
    s.send('event: task.deleted\ndata: {"id":"t1","agentId":"main"}\n\n')
    await vi.waitFor(() => expect(actions).toHaveLength(4))
    expect(actions.slice(1)).toEqual([
      { type: 'UPDATE_TASK', task },
      { type: 'DELTA', taskId: 't1', content: '你好' },
      { type: 'REMOVE_TASK', id: 't1', agentId: 'main' },
    ])
    close()
  })

  it('says closed on a drop and open again after reconnecting (the store then resyncs)', async () => {
    const s = server()
    const actions: Action[] = []
    const close = connectEvents((a) => actions.push(a), '/api/v1/events', 5, s.fetch)
    await vi.waitFor(() => expect(actions).toHaveLength(1))
    s.drop()
    await vi.waitFor(() => expect(actions).toHaveLength(3))
    expect(actions.map((a) => (a.type === 'CONNECTION' ? a.connection : a.type))).toEqual(['open', 'closed', 'open'])
    expect(s.calls[1].get('accept')).toBe('text/event-stream')
    close()
  })

  it('stops reconnecting on a 401 (signed out)', async () => {
    const s = server()
    const actions: Action[] = []
    connectEvents((a) => actions.push(a), '/api/v1/events', 5, s.fetch)
    await vi.waitFor(() => expect(actions).toHaveLength(1))
    s.refuse()
    s.drop()
    await vi.waitFor(() => expect(s.calls).toHaveLength(2))
    await new Promise((resolve) => setTimeout(resolve, 40))
    expect(s.calls).toHaveLength(2)
    expect(actions.map((a) => (a.type === 'CONNECTION' ? a.connection : a.type))).toEqual(['open', 'closed', 'closed'])
  })
})
