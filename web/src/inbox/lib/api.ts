// The inbox's client for clawlet's /api/v1. Errors become ApiError with the server's code and
// message ({"error": {"code", "message", "details"}}); a network failure has code "network".
// Requests go through auth.fetch: the bearer token when signed in; a 401 signs out.
import { ApiError, failure } from '../../shared/api'
import { auth } from '../../lib/auth'
import type { Agent, Decision, Message, Model, Task, TaskStatus } from './types'

/** Where answers came from: the server, the service worker's offline cache, or nowhere. */
export type Reachability = 'online' | 'cached' | 'unreachable'
type Listener = (state: Reachability) => void
let listener: Listener | null = null
export function onReachability(fn: Listener | null): void {
  listener = fn
}

export const API_BASE = '/api/v1'

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, headers: { accept: 'application/json' } }
  if (body !== undefined) {
    init.headers = { accept: 'application/json', 'content-type': 'application/json' }
    init.body = JSON.stringify(body)
  }
  let response: Response
  try {
    response = await auth.fetch(`${API_BASE}${path}`, init)
  } catch (error) {
    listener?.('unreachable')
    throw new ApiError(0, 'network', error instanceof Error ? error.message : String(error))
  }
  // the service worker marks answers it took from its cache because the network failed
  listener?.(response.headers.get('x-clawlet-offline') ? 'cached' : 'online')
  if (!response.ok) throw await failure(response)
  if (response.status === 204) return undefined as T
  return (await response.json()) as T
}

/** Drop the answers the service worker saved for offline use (on sign-out: they belong to
 * whoever was signed in). The worker's cache names start with `inbox-api-`. */
export async function forgetSavedAnswers(): Promise<void> {
  if (typeof caches === 'undefined') return
  try {
    const names = await caches.keys()
    await Promise.all(names.filter((name) => name.startsWith('inbox-api-')).map((name) => caches.delete(name)))
  } catch {
    // no cache storage here (e.g. an insecure origin): nothing was saved either
  }
}

const enc = encodeURIComponent

export interface TaskQuery {
  agentId?: string
  status?: TaskStatus[]
  limit?: number
  q?: string
}

function query(params: TaskQuery): string {
  const parts: string[] = []
  if (params.agentId) parts.push(`agentId=${enc(params.agentId)}`)
  if (params.status?.length) parts.push(`status=${params.status.join(',')}`)
  if (params.limit) parts.push(`limit=${params.limit}`)
  if (params.q) parts.push(`q=${enc(params.q)}`)
  return parts.length ? `?${parts.join('&')}` : ''
}

export interface NewAgent {
  id: string
  name: string
  description?: string
  model?: string
}

export const api = {
  agents: () => request<Agent[]>('GET', '/agents'),
  createAgent: (agent: NewAgent) => request<Agent>('POST', '/agents', agent),
  models: () => request<Model[]>('GET', '/openclaw/models'),
  tasks: (params: TaskQuery = {}) => request<Task[]>('GET', `/tasks${query(params)}`),
  task: (id: string) => request<Task>('GET', `/tasks/${enc(id)}`),
  createTask: (content: string, agentId: string) => request<Task>('POST', '/tasks', { content, agentId }),
  renameTask: (id: string, title: string) => request<Task>('PATCH', `/tasks/${enc(id)}`, { title }),
  cancelTask: (id: string) => request<Task>('POST', `/tasks/${enc(id)}/cancel`),
  deleteTask: (id: string) => request<void>('DELETE', `/tasks/${enc(id)}`),
  messages: (id: string) => request<Message[]>('GET', `/tasks/${enc(id)}/messages`),
  sendMessage: (id: string, content: string) => request<{ ok: boolean }>('POST', `/tasks/${enc(id)}/messages`, { content }),
  /** Decide what a waiting task waits for: approve / edit / reject a tool call, answer / reject a question. */
  decide: (id: string, approvalId: string, decision: Decision) =>
    request<{ ok: boolean }>('POST', `/tasks/${enc(id)}/approvals/${enc(approvalId)}`, decision),
}

/** The agent id rule, the same as the server's. */
export const AGENT_ID_PATTERN = /^[a-z0-9][a-z0-9-]*$/
export const AGENT_ID_MAX = 64
export const AGENT_NAME_MAX = 100
export const AGENT_DESCRIPTION_MAX = 500
export const TITLE_MAX = 200
