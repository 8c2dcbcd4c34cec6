// The workbench state: one React context around one reducer (as the seed describes), plus
// the actions that talk to the API. The reducer is pure and exported for the unit tests.
import { createContext, useCallback, useContext, useEffect, useMemo, useReducer, useRef } from 'react'
import type { ReactNode } from 'react'
import { api, ApiError, streamChat } from './api'
import { defaultLang, translate } from './i18n'
import type { Lang, MessageKey } from './i18n'
import type {
  ChatEvent,
  ChatMessage,
  RawMessages,
  SessionHistory,
  SessionSummary,
  SessionTokens,
  Status,
} from './types'

export type Theme = 'light' | 'dark'

export interface Notice {
  kind: 'info' | 'error'
  text: string
}

export interface WorkbenchState {
  sessions: SessionSummary[]
  currentId: string | null
  messages: ChatMessage[]
  streaming: boolean
  view: 'chat' | 'raw'
  raw: RawMessages | null
  status: Status | null
  ragMode: boolean
  tokens: SessionTokens | null
  compressing: boolean
  notice: Notice | null
  theme: Theme
  lang: Lang
  widths: { left: number; right: number }
}

export type Action =
  | { type: 'sessions'; sessions: SessionSummary[] }
  | { type: 'session_added'; session: SessionSummary }
  | { type: 'session_renamed'; id: string; title: string }
  | { type: 'session_removed'; id: string }
  | { type: 'select'; id: string | null; history?: SessionHistory }
  | { type: 'send'; text: string }
  | { type: 'event'; event: ChatEvent }
  | { type: 'stream_end' }
  | { type: 'stream_failed'; error: string }
  | { type: 'view'; view: 'chat' | 'raw'; raw?: RawMessages | null }
  | { type: 'status'; status: Status }
  | { type: 'rag'; enabled: boolean }
  | { type: 'tokens'; tokens: SessionTokens | null }
  | { type: 'compressing'; value: boolean }
  | { type: 'notice'; notice: Notice | null }
  | { type: 'theme'; theme: Theme }
  | { type: 'lang'; lang: Lang }
  | { type: 'widths'; left?: number; right?: number }

let counter = 0
export function newId(prefix = 'm'): string {
  counter += 1
  return `${prefix}${Date.now().toString(36)}${counter}`
}

export function assistantBubble(): ChatMessage {
  return { id: newId(), role: 'assistant', content: '', toolCalls: [], retrievals: [], streaming: true }
}

/** Turn a stored transcript into bubbles: each assistant segment keeps its tool calls. */
export function historyToMessages(history: SessionHistory): ChatMessage[] {
  const out: ChatMessage[] = []
  if (history.compressed_context) {
    out.push({
      id: newId('s'),
      role: 'summary',
      content: history.compressed_context,
      toolCalls: [],
      retrievals: [],
      streaming: false,
    })
  }
  for (const message of history.messages) {
    if (message.role !== 'user' && message.role !== 'assistant') continue
    out.push({
      id: newId(),
      role: message.role,
      content: message.content,
      toolCalls: (message.tool_calls ?? []).map((call) => ({
        tool: call.tool,
        input: call.input,
        output: call.output,
        done: true,
      })),
      retrievals: [],
      streaming: false,
    })
  }
  return out
}

function updateLastAssistant(messages: ChatMessage[], change: (m: ChatMessage) => ChatMessage): ChatMessage[] {
  for (let i = messages.length - 1; i >= 0; i--) {
    if (messages[i].role === 'assistant') {
      const copy = messages.slice()
      copy[i] = change(messages[i])
      return copy
    }
    if (messages[i].role === 'user') break
  }
  // no assistant bubble since the last user message: open one
  return [...messages, change(assistantBubble())]
}

function applyEvent(state: WorkbenchState, event: ChatEvent): WorkbenchState {
  switch (event.type) {
    case 'retrieval':
      return {
        ...state,
        messages: updateLastAssistant(state.messages, (m) => ({
          ...m,
          retrievals: [...m.retrievals, { query: event.query, results: event.results ?? [] }],
        })),
      }
    case 'token':
      return {
        ...state,
        messages: updateLastAssistant(state.messages, (m) => ({ ...m, content: m.content + event.content })),
      }
    case 'tool_start':
      return {
        ...state,
        messages: updateLastAssistant(state.messages, (m) => ({
          ...m,
          toolCalls: [...m.toolCalls, { tool: event.tool, input: event.input, done: false }],
        })),
      }
    case 'tool_end':
      return {
        ...state,
        messages: updateLastAssistant(state.messages, (m) => {
          const calls = m.toolCalls.slice()
          let index = -1
          for (let i = calls.length - 1; i >= 0; i--) {
            if (!calls[i].done && calls[i].tool === event.tool) {
              index = i
              break
            }
          }
          if (index === -1) {
            calls.push({ tool: event.tool, input: '', output: event.output, isError: !!event.is_error, done: true })
          } else {
            calls[index] = { ...calls[index], output: event.output, isError: !!event.is_error, done: true }
          }
          return { ...m, toolCalls: calls }
        }),
      }
    case 'new_response': {
      const closed = state.messages.map((m) => (m.streaming ? { ...m, streaming: false } : m))
      return { ...state, messages: [...closed, assistantBubble()] }
    }
    case 'done': {
      let messages = state.messages.map((m) => (m.streaming ? { ...m, streaming: false } : m))
      if (event.cancelled) messages = updateLastAssistant(messages, (m) => ({ ...m, cancelled: true, streaming: false }))
      return { ...state, messages, streaming: false }
    }
    case 'title':
      return {
        ...state,
        sessions: state.sessions.map((s) => (s.id === event.session_id ? { ...s, title: event.title } : s)),
      }
    case 'error': {
      const messages = updateLastAssistant(state.messages, (m) => ({ ...m, error: event.error, streaming: false }))
      return { ...state, messages: messages.map((m) => (m.streaming ? { ...m, streaming: false } : m)), streaming: false }
    }
    default:
      return state
  }
}

export function reducer(state: WorkbenchState, action: Action): WorkbenchState {
  switch (action.type) {
    case 'sessions':
      return { ...state, sessions: action.sessions }
    case 'session_added':
      return { ...state, sessions: [action.session, ...state.sessions.filter((s) => s.id !== action.session.id)] }
    case 'session_renamed':
      return {
        ...state,
        sessions: state.sessions.map((s) => (s.id === action.id ? { ...s, title: action.title } : s)),
      }
    case 'session_removed': {
      const selected = state.currentId === action.id
      return {
        ...state,
        sessions: state.sessions.filter((s) => s.id !== action.id),
        currentId: selected ? null : state.currentId,
        messages: selected ? [] : state.messages,
        tokens: selected ? null : state.tokens,
        view: selected ? 'chat' : state.view,
      }
    }
    case 'select':
      return {
        ...state,
        currentId: action.id,
        messages: action.history ? historyToMessages(action.history) : [],
        streaming: false,
        view: state.view === 'raw' && action.id ? state.view : 'chat',
        tokens: null,
      }
    case 'send': {
      const user: ChatMessage = {
        id: newId('u'),
        role: 'user',
        content: action.text,
        toolCalls: [],
        retrievals: [],
        streaming: false,
      }
      const sessions = state.sessions.slice()
      const index = sessions.findIndex((s) => s.id === state.currentId)
      if (index > 0) sessions.unshift(...sessions.splice(index, 1)) // newest first
      return {
        ...state,
        sessions,
        messages: [...state.messages, user, assistantBubble()],
        streaming: true,
        view: 'chat',
      }
    }
    case 'event':
      return applyEvent(state, action.event)
    case 'stream_end':
      return {
        ...state,
        streaming: false,
        messages: state.messages.map((m) => (m.streaming ? { ...m, streaming: false } : m)),
      }
    case 'stream_failed':
      return applyEvent(state, { type: 'error', error: action.error })
    case 'view':
      return { ...state, view: action.view, raw: action.raw === undefined ? state.raw : action.raw }
    case 'status':
      return { ...state, status: action.status, ragMode: action.status.rag_mode }
    case 'rag':
      return { ...state, ragMode: action.enabled }
    case 'tokens':
      return { ...state, tokens: action.tokens }
    case 'compressing':
      return { ...state, compressing: action.value }
    case 'notice':
      return { ...state, notice: action.notice }
    case 'theme':
      return { ...state, theme: action.theme }
    case 'lang':
      return { ...state, lang: action.lang }
    case 'widths':
      return {
        ...state,
        widths: { left: action.left ?? state.widths.left, right: action.right ?? state.widths.right },
      }
    default:
      return state
  }
}

export const STORAGE_KEY = 'clawlet.workbench'

interface Persisted {
  theme?: Theme
  lang?: Lang
  widths?: { left: number; right: number }
}

export function loadPersisted(): Persisted {
  try {
    return JSON.parse(localStorage.getItem(STORAGE_KEY) ?? '{}') as Persisted
  } catch {
    return {}
  }
}

export function initialState(persisted: Persisted = {}): WorkbenchState {
  const prefersDark =
    typeof window !== 'undefined' && window.matchMedia?.('(prefers-color-scheme: dark)').matches
  return {
    sessions: [],
    currentId: null,
    messages: [],
    streaming: false,
    view: 'chat',
    raw: null,
    status: null,
    ragMode: false,
    tokens: null,
    compressing: false,
    notice: null,
    theme: persisted.theme ?? (prefersDark ? 'dark' : 'light'),
    lang: persisted.lang ?? defaultLang(),
    widths: persisted.widths ?? { left: 260, right: 440 },
  }
}

function messageOf(error: unknown): string {
  if (error instanceof ApiError) return error.message
  if (error instanceof Error) return error.message
  return String(error)
}

export interface Workbench {
  state: WorkbenchState
  dispatch: React.Dispatch<Action>
  t: (key: MessageKey, vars?: Record<string, string | number>) => string
  actions: {
    refreshSessions: () => Promise<void>
    newSession: () => Promise<void>
    selectSession: (id: string) => Promise<void>
    renameSession: (id: string, title: string) => Promise<void>
    deleteSession: (id: string) => Promise<void>
    send: (text: string) => Promise<void>
    stop: () => Promise<void>
    setRag: (enabled: boolean) => Promise<void>
    compress: () => Promise<void>
    showRaw: (show: boolean) => Promise<void>
    refreshTokens: (sessionId?: string) => Promise<void>
    notify: (notice: Notice | null) => void
  }
}

const WorkbenchContext = createContext<Workbench | null>(null)

export function WorkbenchProvider({ children }: { children: ReactNode }) {
  const [state, dispatch] = useReducer(reducer, undefined, () => initialState(loadPersisted()))
  const stateRef = useRef(state)
  stateRef.current = state
  const abortRef = useRef<AbortController | null>(null)

  useEffect(() => {
    const persisted: Persisted = { theme: state.theme, lang: state.lang, widths: state.widths }
    localStorage.setItem(STORAGE_KEY, JSON.stringify(persisted))
    document.documentElement.dataset.theme = state.theme
    document.documentElement.lang = state.lang === 'zh' ? 'zh-CN' : 'en'
  }, [state.theme, state.lang, state.widths])

  const t = useCallback(
    (key: MessageKey, vars?: Record<string, string | number>) => translate(state.lang, key, vars),
    [state.lang],
  )

  const actions = useMemo<Workbench['actions']>(() => {
    const notify = (notice: Notice | null) => dispatch({ type: 'notice', notice })
    const fail = (error: unknown) => notify({ kind: 'error', text: messageOf(error) })

    const refreshTokens = async (sessionId?: string) => {
      const id = sessionId ?? stateRef.current.currentId
      if (!id) return dispatch({ type: 'tokens', tokens: null })
      try {
        dispatch({ type: 'tokens', tokens: await api.sessionTokens(id) })
      } catch {
        dispatch({ type: 'tokens', tokens: null })
      }
    }

    const loadRaw = async (id: string) => {
      try {
        dispatch({ type: 'view', view: 'raw', raw: await api.rawMessages(id) })
      } catch (error) {
        fail(error)
      }
    }

    const selectSession = async (id: string) => {
      if (stateRef.current.streaming) return
      try {
        const history = await api.history(id)
        dispatch({ type: 'select', id, history })
        await refreshTokens(id)
        if (stateRef.current.view === 'raw') await loadRaw(id)
      } catch (error) {
        fail(error)
      }
    }

    const refreshSessions = async () => {
      try {
        dispatch({ type: 'sessions', sessions: await api.listSessions() })
      } catch (error) {
        fail(error)
      }
    }

    const newSession = async () => {
      if (stateRef.current.streaming) return
      try {
        const session = await api.createSession()
        dispatch({ type: 'session_added', session })
        dispatch({ type: 'select', id: session.id })
        dispatch({ type: 'view', view: 'chat' })
        await refreshTokens(session.id)
      } catch (error) {
        fail(error)
      }
    }

    const send = async (text: string) => {
      const message = text.trim() ? text : ''
      if (!message || stateRef.current.streaming) return
      let id = stateRef.current.currentId
      if (!id) {
        try {
          const session = await api.createSession()
          dispatch({ type: 'session_added', session })
          dispatch({ type: 'select', id: session.id })
          id = session.id
        } catch (error) {
          fail(error)
          return
        }
      }
      dispatch({ type: 'send', text: message })
      const controller = new AbortController()
      abortRef.current = controller
      try {
        await streamChat(message, id, (event) => dispatch({ type: 'event', event }), controller.signal)
        dispatch({ type: 'stream_end' })
      } catch (error) {
        if (controller.signal.aborted) dispatch({ type: 'event', event: { type: 'done', content: '', session_id: id, cancelled: true } })
        else dispatch({ type: 'stream_failed', error: messageOf(error) })
      } finally {
        abortRef.current = null
      }
      if (stateRef.current.currentId === id) await refreshTokens(id)
      await refreshSessions()
    }

    const stop = async () => {
      const id = stateRef.current.currentId
      if (id) {
        try {
          await api.cancel(id)
        } catch {
          // the run may already be over
        }
      }
      abortRef.current?.abort()
    }

    return {
      refreshSessions,
      newSession,
      selectSession,
      renameSession: async (id, title) => {
        try {
          const session = await api.renameSession(id, title)
          dispatch({ type: 'session_renamed', id, title: session.title })
        } catch (error) {
          fail(error)
        }
      },
      deleteSession: async (id) => {
        try {
          await api.deleteSession(id)
          dispatch({ type: 'session_removed', id })
        } catch (error) {
          fail(error)
        }
      },
      send,
      stop,
      setRag: async (enabled) => {
        try {
          dispatch({ type: 'rag', enabled: (await api.setRagMode(enabled)).enabled })
          await refreshTokens()
        } catch (error) {
          fail(error)
        }
      },
      compress: async () => {
        const id = stateRef.current.currentId
        if (!id) return
        dispatch({ type: 'compressing', value: true })
        try {
          const result = await api.compress(id)
          const history = await api.history(id)
          dispatch({ type: 'select', id, history })
          notify({
            kind: 'info',
            text: translate(stateRef.current.lang, 'compressed', {
              archived: result.archived_count,
              remaining: result.remaining_count,
            }),
          })
          await refreshTokens(id)
        } catch (error) {
          fail(error)
        } finally {
          dispatch({ type: 'compressing', value: false })
        }
      },
      showRaw: async (show) => {
        const id = stateRef.current.currentId
        if (!show || !id) return dispatch({ type: 'view', view: 'chat' })
        await loadRaw(id)
      },
      refreshTokens,
      notify,
    }
  }, [])

  useEffect(() => {
    api
      .status()
      .then((status) => dispatch({ type: 'status', status }))
      .catch((error: unknown) => dispatch({ type: 'notice', notice: { kind: 'error', text: messageOf(error) } }))
    void actions.refreshSessions()
  }, [actions])

  const value = useMemo(() => ({ state, dispatch, t, actions }), [state, t, actions])
  return <WorkbenchContext.Provider value={value}>{children}</WorkbenchContext.Provider>
}

export function useWorkbench(): Workbench {
  const value = useContext(WorkbenchContext)
  if (!value) throw new Error('useWorkbench outside WorkbenchProvider')
  return value
}
