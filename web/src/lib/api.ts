// The clawlet /api client. The base is the page's own origin, so the workbench works
// from localhost and from another machine on the LAN alike. Every request and the chat stream go
// through auth.fetch (the bearer token when signed in; a 401 signs out).
import { auth } from './auth'
import { readSSE } from './sse'
import type {
  ChatEvent,
  CompressResult,
  RawMessages,
  SessionHistory,
  SessionSummary,
  SessionTokens,
  SkillsResponse,
  Status,
} from './types'

export function apiBase(): string {
  if (typeof window === 'undefined') return '/api'
  const { protocol, host } = window.location
  return `${protocol}//${host}/api`
}

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
  ) {
    super(message)
    this.name = 'ApiError'
  }
}

async function failure(response: Response): Promise<ApiError> {
  let code = 'http_error'
  let message = `${response.status} ${response.statusText}`
  try {
    const body = (await response.json()) as { error?: { code?: string; message?: string } }
    if (body.error) {
      code = body.error.code ?? code
      message = body.error.message ?? message
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message)
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
}

/** POST /api/chat and deliver each SSE event as it arrives. Resolves when the stream ends. */
export async function streamChat(
  message: string,
  sessionId: string,
  onEvent: (event: ChatEvent) => void,
  signal?: AbortSignal,
): Promise<void> {
  const response = await auth.fetch(`${apiBase()}/chat`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream' },
    body: JSON.stringify({ message, session_id: sessionId, stream: true }),
    signal,
  })
  if (!response.ok) throw await failure(response)
  if (!response.body) throw new ApiError(0, 'no_body', 'the server sent no stream')
  await readSSE(response.body, (msg) => {
    let data: Record<string, unknown>
    try {
      data = JSON.parse(msg.data) as Record<string, unknown>
    } catch {
      return
    }
    const type = (data.type as string | undefined) ?? msg.event
    onEvent({ ...data, type } as ChatEvent)
  })
}
