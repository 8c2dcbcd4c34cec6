// The global SSE connection (seed §8.2): one EventSource on /api/v1/events feeding the store.
// On a drop it closes and opens a new connection 3 s later (the server's `retry: 3000` too), and
// the store reloads what pages show once it is back, since events may have been missed.
import type { Action } from './reducer'
import type { ClientMessage, DeletedEvent, DeltaEvent, Task } from './types'

export const EVENTS_URL = '/api/v1/events'
export const RECONNECT_MS = 3000

export const EVENT_NAMES = ['task.created', 'task.updated', 'message.created', 'message.delta', 'task.deleted'] as const
export type EventName = (typeof EVENT_NAMES)[number]

/** The store action for one SSE event, or null (heartbeats, unknown or malformed events). */
export function eventToAction(name: string, raw: string): Action | null {
  let data: unknown
  try {
    data = JSON.parse(raw)
  } catch {
    return null
  }
  if (!data || typeof data !== 'object') return null
  switch (name) {
    case 'task.created':
      return { type: 'ADD_TASK', task: data as Task, created: true }
    case 'task.updated':
      return { type: 'UPDATE_TASK', task: data as Task }
    case 'message.created':
      return { type: 'ADD_MESSAGE', message: data as ClientMessage }
    case 'message.delta': {
      const delta = data as DeltaEvent
      return typeof delta.taskId === 'string' ? { type: 'DELTA', taskId: delta.taskId, content: String(delta.content ?? '') } : null
    }
    case 'task.deleted': {
      const deleted = data as DeletedEvent
      return typeof deleted.id === 'string' ? { type: 'REMOVE_TASK', id: deleted.id, agentId: deleted.agentId } : null
    }
    default:
      return null
  }
}

/** Open the connection; returns a function that closes it for good. */
export function connectEvents(dispatch: (action: Action) => void, url = EVENTS_URL, retryMs = RECONNECT_MS): () => void {
  let source: EventSource | null = null
  let timer: ReturnType<typeof setTimeout> | undefined
  let stopped = false

  const open = () => {
    if (stopped) return
    source = new EventSource(url)
    source.onopen = () => dispatch({ type: 'CONNECTION', connection: 'open' })
    for (const name of EVENT_NAMES) {
      source.addEventListener(name, (event) => {
        const action = eventToAction(name, (event as MessageEvent<string>).data)
        if (action) dispatch(action)
      })
    }
    source.onerror = () => {
      // the browser would retry by itself, but not after an HTTP error: retry here, always
      source?.close()
      source = null
      dispatch({ type: 'CONNECTION', connection: 'closed' })
      clearTimeout(timer)
      timer = setTimeout(open, retryMs)
    }
  }

  open()
  return () => {
    stopped = true
    clearTimeout(timer)
    source?.close()
  }
}
