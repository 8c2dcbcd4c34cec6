// The global SSE connection (seed §8.2): one stream on /api/v1/events feeding the store. It is read
// with fetch (lib/sse's openEventStream), not EventSource, so it carries the bearer token. As the
// EventSource before it: on a drop it reconnects 3 s later (the server's `retry: 3000` too), and
// the store reloads what pages show once it is back, since events may have been missed. A 401
// ends it for good (auth.fetch has signed out).
import { auth } from '../../lib/auth'
import { jsonObject } from '../../shared/api'
import { openEventStream } from '../../lib/sse'
import type { FetchLike } from '../../lib/sse'
import type { Action } from './reducer'
import type { ClientMessage, DeletedEvent, DeltaEvent, Task } from './types'

export const EVENTS_URL = '/api/v1/events'
export const RECONNECT_MS = 3000

export const EVENT_NAMES = ['task.created', 'task.updated', 'message.created', 'message.delta', 'task.deleted'] as const
export type EventName = (typeof EVENT_NAMES)[number]

/** The store action for one SSE event, or null (heartbeats, unknown or malformed events). */
export function eventToAction(name: string, raw: string): Action | null {
  const data: unknown = jsonObject(raw)
  if (!data) return null
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
export function connectEvents(
  dispatch: (action: Action) => void,
  url = EVENTS_URL,
  retryMs = RECONNECT_MS,
  fetch: FetchLike = (input, init) => auth.fetch(input, init),
): () => void {
  return openEventStream(url, {
    fetch,
    retryMs,
    onOpen: () => dispatch({ type: 'CONNECTION', connection: 'open' }),
    onMessage: (message) => {
      const action = eventToAction(message.event, message.data)
      if (action) dispatch(action)
    },
    onClose: () => dispatch({ type: 'CONNECTION', connection: 'closed' }),
    fatal: (response) => response.status === 401,
  })
}
