// The clawlet /api client. The base is the page's own origin, so the workbench works
// from localhost and from another machine on the LAN alike. Every request and the chat stream go
// through auth.fetch (the bearer token when signed in; a 401 signs out).
import { ApiError, failure, jsonObject } from '../shared/api'
import { auth } from './auth'
import { readSSE } from './sse'
import type {
  ChatEvent,
  CompressResult,
  Decision,
  RawMessages,
  SessionApprovals,
  SessionHistory,
  SessionSummary,
  SessionTokens,
  SkillsResponse,
  Status,
  ToolApprovals,
} from './types'

export function apiBase(): string {
  if (typeof window === 'undefined') return '/api'
  const { protocol, host } = window.location
  return `${protocol}//${host}/api`
}

async function request<T>(method: string, path: string, body?: unknown): Promise<T> {
  const init: RequestInit = { method, headers: {} }
  if (body !== undefined) {
    init.headers = { 'content-type': 'application/json' }
    init.body = JSON.stringify(body)
  }
  const response = await auth.fetch(`${apiBase()}${path}`, init)
  if (!response.ok) throw await failure(response)
  return (await response.json()) as T
}

const enc = encodeURIComponent

export const api = {
  status: () => request<Status>('GET', '/status'),
  listSessions: () => request<SessionSummary[]>('GET', '/sessions'),
  createSession: (title = '') => request<SessionSummary>('POST', '/sessions', { title }),
  renameSession: (id: string, title: string) => request<SessionSummary>('PUT', `/sessions/${enc(id)}`, { title }),
  deleteSession: (id: string) => request<{ ok: boolean }>('DELETE', `/sessions/${enc(id)}`),
  history: (id: string) => request<SessionHistory>('GET', `/sessions/${enc(id)}/history`),
  rawMessages: (id: string) => request<RawMessages>('GET', `/sessions/${enc(id)}/messages`),
  cancel: (id: string) => request<{ cancelled: boolean }>('POST', `/sessions/${enc(id)}/cancel`),
  compress: (id: string) => request<CompressResult>('POST', `/sessions/${enc(id)}/compress`),
  readFile: (path: string) =>
    request<{ path: string; content: string; tokens: number }>('GET', `/files?path=${enc(path)}`),
  saveFile: (path: string, content: string) =>
    request<{ ok: boolean; path: string; tokens: number }>('POST', '/files', { path, content }),
  fileTokens: (paths: string[]) =>
    request<{ files: { path: string; tokens: number; exists: boolean }[]; total_tokens: number }>(
      'POST',
      '/tokens/files',
      { paths },
    ),
  sessionTokens: (id: string) => request<SessionTokens>('GET', `/tokens/session/${enc(id)}`),
  getRagMode: () => request<{ enabled: boolean }>('GET', '/config/rag-mode'),
  setRagMode: (enabled: boolean) => request<{ enabled: boolean }>('PUT', '/config/rag-mode', { enabled }),
  skills: () => request<SkillsResponse>('GET', '/skills'),
  approvals: (id: string) => request<SessionApprovals>('GET', `/sessions/${enc(id)}/approvals`),
  toolApprovals: () => request<ToolApprovals>('GET', '/config/tool-approvals'),
  setToolApprovals: (policies: ToolApprovals['configured']) =>
    request<ToolApprovals>('PUT', '/config/tool-approvals', { policies }),
}

/** POST a JSON body that answers with the chat's SSE stream; deliver each event as it arrives. */
async function streamEvents(
  path: string,
  body: unknown,
  onEvent: (event: ChatEvent) => void,
  signal?: AbortSignal,
  onOpen?: () => void,
): Promise<void> {
  const response = await auth.fetch(`${apiBase()}${path}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify(body),
    signal,
  })
  if (!response.ok) throw await failure(response)
  if (!response.body) throw new ApiError(0, 'no_body', 'the server sent no stream')
  onOpen?.()
  await readSSE(response.body, (msg) => {
    const event = parseChatEvent(msg.event, msg.data)
    if (event) onEvent(event)
  })
}

/** One SSE message of the chat stream as a ChatEvent (the data's `type`, else the event name);
 * null when the data is not a JSON object. */
export function parseChatEvent(name: string, data: string): ChatEvent | null {
  const fields = jsonObject(data)
  if (!fields) return null
  const type = typeof fields.type === 'string' ? fields.type : name
  return { ...fields, type } as ChatEvent
}

/** POST /api/chat and deliver each SSE event as it arrives. Resolves when the stream ends. */
export function streamChat(
  message: string,
  sessionId: string,
  onEvent: (event: ChatEvent) => void,
  signal?: AbortSignal,
): Promise<void> {
  return streamEvents('/chat', { message, session_id: sessionId, stream: true }, onEvent, signal)
}

/** Decide a pending approval or question (POST /api/sessions/{id}/approvals/{approval_id}); the
 * paused turn's continuation streams like /api/chat (the decided call's tool_end first). */
export function streamDecision(
  sessionId: string,
  approvalId: string,
  decision: Decision,
  onEvent: (event: ChatEvent) => void,
  signal?: AbortSignal,
  /** the server took the decision: its continuation's stream is open */
  onOpen?: () => void,
): Promise<void> {
  return streamEvents(
    `/sessions/${enc(sessionId)}/approvals/${enc(approvalId)}`,
    { ...decision, stream: true },
    onEvent,
    signal,
    onOpen,
  )
}
