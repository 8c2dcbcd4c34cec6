// The workbench state: one React context around one reducer (as the seed describes), plus
// the actions that talk to the API. The reducer is pure and exported for the unit tests.
import { createContext, useCallback, useContext, useEffect, useMemo, useReducer, useRef } from 'react'
import type { ReactNode } from 'react'
import { ApiError } from '../shared/api'
import { api, streamChat, streamDecision } from './api'
import { defaultLang, htmlLang } from '../shared/i18n'
import type { Lang, Vars } from '../shared/i18n'
import { translate } from './i18n'
import type { MessageKey } from './i18n'
import type {
  ApprovalCard,
  ChatEvent,
  ChatMessage,
  Decision,
  PendingItem,
  RawMessages,
  SessionHistory,
  SessionSummary,
  SessionTokens,
  Status,
  ToolCallView,
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
  /** sessions known to wait for an approval or an answer (from their streams and histories) */
  waiting: Record<string, boolean>
}

export type Action =
  | { type: 'sessions'; sessions: SessionSummary[] }
  | { type: 'session_added'; session: SessionSummary }
  | { type: 'session_renamed'; id: string; title: string }
  | { type: 'session_removed'; id: string }
  | { type: 'select'; id: string | null; history?: SessionHistory; pending?: PendingItem[] }
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
  /** a decision is being posted: its card is locked, the continuation will stream */
  | { type: 'decide_start'; approvalId: string; decision: Decision }
  /** the server took the decision (the continuation's stream is open) */
  | { type: 'decide_accepted'; approvalId: string }
  /** the server refused it: the card shows why (`status` says whether it can still be decided) */
  | {
      type: 'decide_failed'
      approvalId: string
      error: string
      status: 'pending' | 'decided' | 'gone'
      decision?: Decision
    }
  /** the session's paused turn was dropped (POST /cancel while waiting) */
  | { type: 'waiting_cancelled'; sessionId: string }

let counter = 0
export function newId(prefix = 'm'): string {
  counter += 1
  return `${prefix}${Date.now().toString(36)}${counter}`
}

export function assistantBubble(): ChatMessage {
  return { id: newId(), role: 'assistant', content: '', toolCalls: [], retrievals: [], streaming: true }
}

/** The tool a pending item pauses (a question is the agent's ask_user call). */
export function pendingTool(item: PendingItem): string {
  return item.kind === 'tool' ? item.tool : ASK_USER_TOOL
}

export const ASK_USER_TOOL = 'ask_user'

/** A tool's input as the server renders it (clawlet.events.render_tool_input): the single
 * argument's value, else JSON. */
export function renderToolInput(args: Record<string, unknown>): string {
  const values = Object.values(args)
  if (values.length === 1) return typeof values[0] === 'string' ? values[0] : JSON.stringify(values[0])
  return JSON.stringify(args)
}

function hasCard(messages: ChatMessage[], approvalId: string): boolean {
  return messages.some((m) => (m.approvals ?? []).some((c) => c.item.approval_id === approvalId))
}

/** The call with this call id that `usable` accepts; -1 if there is no id or no such call. */
function callById(calls: ToolCallView[], callId: string | undefined, usable: (call: ToolCallView) => boolean): number {
  if (!callId) return -1
  return calls.findIndex((call) => call.callId === callId && usable(call))
}

/** The awaiting call a pending item paused: the one with its call id, else the same tool,
 * preferably the same input; -1 if none. */
function awaitingCall(calls: ToolCallView[], item: PendingItem): number {
  const byId = callById(calls, item.call_id, (call) => !!call.awaiting)
  if (byId !== -1) return byId
  const tool = pendingTool(item)
  const input = item.kind === 'tool' ? item.input : item.question
  let fallback = -1
  for (let i = 0; i < calls.length; i++) {
    if (!calls[i].awaiting || calls[i].tool !== tool) continue
    if (calls[i].input === input) return i
    if (fallback === -1) fallback = i
  }
  return fallback
}

/** Mark the call a pending item paused: the one with its call id, else an unfinished call of
 * that tool, preferably with the same input, else the last one. */
function markAwaiting(calls: ToolCallView[], item: PendingItem): ToolCallView[] {
  const tool = pendingTool(item)
  const input = item.kind === 'tool' ? item.input : item.question
  const byId = callById(calls, item.call_id, (call) => !call.done && !call.awaiting)
  let index = -1
  for (let i = calls.length - 1; i >= 0 && byId === -1; i--) {
    if (calls[i].tool !== tool || calls[i].done || calls[i].awaiting) continue
    if (calls[i].input === input) {
      index = i
      break
    }
    if (index === -1) index = i
  }
  if (byId !== -1) index = byId
  if (index === -1) return calls
  const copy = calls.slice()
  copy[index] = { ...calls[index], awaiting: true }
  return copy
}

function withCard(message: ChatMessage, item: PendingItem): ChatMessage {
  const card: ApprovalCard = { item, status: 'pending' }
  return { ...message, toolCalls: markAwaiting(message.toolCalls, item), approvals: [...(message.approvals ?? []), card] }
}

/** Change one card (found by its approval id) wherever it is. */
function updateCard(
  messages: ChatMessage[],
  approvalId: string,
  change: (card: ApprovalCard, message: ChatMessage) => { card: ApprovalCard; message?: ChatMessage },
): ChatMessage[] {
  return messages.map((m) => {
    const index = (m.approvals ?? []).findIndex((c) => c.item.approval_id === approvalId)
    if (index === -1) return m
    const result = change(m.approvals![index], m)
    const base = result.message ?? m
    const cards = (base.approvals ?? []).slice()
    cards[index] = result.card
    return { ...base, approvals: cards }
  })
}

/** Show a stored transcript's pending items: the paused call (saved with an empty output) is
 * running again, and its card sits in the bubble of that call. */
function attachPending(messages: ChatMessage[], pending: PendingItem[]): ChatMessage[] {
  let out = messages
  for (const item of pending) {
    if (hasCard(out, item.approval_id)) continue
    const tool = pendingTool(item)
    let target = -1
    let call = -1
    for (let i = out.length - 1; i >= 0 && target === -1; i--) {
      if (out[i].role !== 'assistant') continue
      const calls = out[i].toolCalls
      const candidates = calls
        .map((c, index) => ({ c, index }))
        .filter(({ c }) => c.tool === tool && !c.output && !c.awaiting)
      const best =
        candidates.find(({ c }) => !!item.call_id && c.callId === item.call_id) ??
        candidates.filter(({ c }) => item.kind !== 'tool' || c.input === item.input).pop() ??
        candidates.pop()
      if (best) {
        target = i
        call = best.index
      }
    }
    if (target === -1) {
      const last = out.map((m) => m.role).lastIndexOf('assistant')
      if (last === -1 || out.slice(last).some((m) => m.role === 'user')) {
        out = [...out, { ...assistantBubble(), streaming: false }]
        target = out.length - 1
      } else target = last
    }
    const copy = out.slice()
    const message = copy[target]
    const calls = message.toolCalls.slice()
    if (call !== -1) calls[call] = { ...calls[call], done: false, awaiting: true }
    copy[target] = { ...message, toolCalls: calls, approvals: [...(message.approvals ?? []), { item, status: 'pending' }] }
    out = copy
  }
  return out
}

/** Turn a stored transcript into bubbles: each assistant segment keeps its tool calls; what a
 * waiting session waits for (`pending`, from GET .../approvals) becomes cards. */
export function historyToMessages(history: SessionHistory, pending: PendingItem[] = []): ChatMessage[] {
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
    if (message.interrupted) {
      // the stored note is for the model; the bubble says it in the UI's language
      out.push({ ...assistantBubble(), streaming: false, interrupted: true })
      continue
    }
    out.push({
      id: newId(),
      role: message.role,
      content: message.content,
      toolCalls: (message.tool_calls ?? []).map((call) => ({
        tool: call.tool,
        input: call.input,
        output: call.output,
        ...(call.call_id ? { callId: call.call_id } : {}),
        ...(call.is_error ? { isError: true } : {}),
        done: true,
      })),
      retrievals: [],
      streaming: false,
    })
  }
  return pending.length > 0 ? attachPending(out, pending) : out
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
          toolCalls: [
            ...m.toolCalls,
            { tool: event.tool, input: event.input, ...(event.call_id ? { callId: event.call_id } : {}), done: false },
          ],
        })),
      }
    case 'tool_end':
      return {
        ...state,
        messages: updateLastAssistant(state.messages, (m) => {
          const calls = m.toolCalls.slice()
          // the unfinished call with its call id; else (an older server) the last unfinished call
          // of that tool, one still awaiting a decision only if no other
          const byId = callById(calls, event.call_id, (call) => !call.done)
          let index = -1
          for (let i = calls.length - 1; i >= 0 && byId === -1; i--) {
            if (!calls[i].done && calls[i].tool === event.tool) {
              if (!calls[i].awaiting) {
                index = i
                break
              }
              if (index === -1) index = i
            }
          }
          if (byId !== -1) index = byId
          if (index === -1) {
            calls.push({
              tool: event.tool,
              input: '',
              ...(event.call_id ? { callId: event.call_id } : {}),
              output: event.output,
              isError: !!event.is_error,
              done: true,
            })
          } else {
            const { awaiting: _awaiting, ...call } = calls[index]
            calls[index] = { ...call, output: event.output, isError: !!event.is_error, done: true }
          }
          return { ...m, toolCalls: calls }
        }),
      }
    case 'approval_required':
    case 'question': {
      const { type, ...fields } = event
      const item = { ...fields, kind: type === 'question' ? 'question' : 'tool' } as PendingItem
      if (hasCard(state.messages, item.approval_id)) return state
      return { ...state, messages: updateLastAssistant(state.messages, (m) => withCard(m, item)) }
    }
    case 'waiting': {
      let messages = state.messages.map((m) => (m.streaming ? { ...m, streaming: false } : m))
      for (const item of event.pending ?? []) {
        if (!hasCard(messages, item.approval_id)) messages = updateLastAssistant(messages, (m) => withCard(m, item))
      }
      const waiting = { ...state.waiting, [event.session_id]: (event.pending ?? []).length > 0 }
      return { ...state, messages, streaming: false, waiting }
    }
    case 'new_response': {
      const closed = state.messages.map((m) => (m.streaming ? { ...m, streaming: false } : m))
      return { ...state, messages: [...closed, assistantBubble()] }
    }
    case 'done': {
      let messages = state.messages.map((m) => (m.streaming ? { ...m, streaming: false } : m))
      if (event.cancelled) messages = updateLastAssistant(messages, (m) => ({ ...m, cancelled: true, streaming: false }))
      const waiting = { ...state.waiting }
      if (event.session_id) delete waiting[event.session_id]
      return { ...state, messages, streaming: false, waiting }
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
    case 'sessions': {
      // the server says which sessions wait, also ones this page has not opened
      const waiting = { ...state.waiting }
      for (const s of action.sessions) if (s.waiting !== undefined) waiting[s.id] = s.waiting
      return { ...state, sessions: action.sessions, waiting }
    }
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
        messages: action.history ? historyToMessages(action.history, action.pending) : [],
        waiting:
          action.id && action.history
            ? { ...state.waiting, [action.id]: !!action.history.waiting && (action.pending ?? []).length > 0 }
            : state.waiting,
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
    case 'decide_start': {
      const messages = updateCard(state.messages, action.approvalId, (card, message) => {
        // the paused call runs now (with the edited arguments, if edited)
        const calls = message.toolCalls.slice()
        const index = awaitingCall(calls, card.item)
        if (index !== -1) {
          const { awaiting: _awaiting, ...call } = calls[index]
          const args = action.decision.decision === 'edit' ? action.decision.args : undefined
          calls[index] = args ? { ...call, input: renderToolInput(args) } : call
        }
        return {
          card: { ...card, status: 'sending', decision: action.decision, error: undefined },
          message: { ...message, toolCalls: calls, streaming: true, error: undefined, cancelled: undefined },
        }
      })
      const waiting = { ...state.waiting }
      if (state.currentId) delete waiting[state.currentId]
      return { ...state, messages, streaming: true, waiting }
    }
    case 'decide_accepted':
      return {
        ...state,
        messages: updateCard(state.messages, action.approvalId, (card) => ({ card: { ...card, status: 'decided' } })),
      }
    case 'decide_failed': {
      const messages = updateCard(state.messages, action.approvalId, (card, message) => {
        const status = action.status
        const calls =
          status === 'pending'
            ? markAwaiting(message.toolCalls, card.item)
            : message.toolCalls
        return {
          card: { ...card, status, error: action.error, decision: status === 'pending' ? undefined : action.decision ?? card.decision },
          message: { ...message, toolCalls: calls, streaming: false },
        }
      }).map((m) => (m.streaming ? { ...m, streaming: false } : m))
      const stillPending = messages.some((m) => (m.approvals ?? []).some((c) => c.status === 'pending'))
      const waiting = { ...state.waiting }
      if (state.currentId) {
        if (stillPending) waiting[state.currentId] = true
        else delete waiting[state.currentId]
      }
      return { ...state, messages, streaming: false, waiting }
    }
    case 'waiting_cancelled': {
      const waiting = { ...state.waiting }
      delete waiting[action.sessionId]
      if (state.currentId !== action.sessionId) return { ...state, waiting }
      const messages = state.messages.map((m) => {
        if (!(m.approvals ?? []).some((c) => c.status === 'pending')) return m
        return {
          ...m,
          approvals: m.approvals!.map((c): ApprovalCard => (c.status === 'pending' ? { ...c, status: 'cancelled' } : c)),
          toolCalls: m.toolCalls.map((c) => {
            if (!c.awaiting) return c
            const { awaiting: _awaiting, ...call } = c
            return { ...call, output: call.output ?? '', done: true }
          }),
          cancelled: true,
        }
      })
      return { ...state, messages, waiting }
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
    waiting: {},
  }
}

function isDecisionType(value: string): value is Decision['decision'] {
  return value === 'approve' || value === 'edit' || value === 'reject' || value === 'answer'
}

function messageOf(error: unknown): string {
  if (error instanceof ApiError) return error.message
  if (error instanceof Error) return error.message
  return String(error)
}

export interface Workbench {
  state: WorkbenchState
  dispatch: React.Dispatch<Action>
  t: (key: MessageKey, vars?: Vars) => string
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
    /** Decide a pending approval or question of the current session; the continuation streams. */
    decide: (approvalId: string, decision: Decision) => Promise<void>
    /** Drop what the current session waits for (the paused calls never run). */
    cancelWaiting: () => Promise<void>
  }
}

const WorkbenchContext = createContext<Workbench | null>(null)

export function WorkbenchProvider({ children }: { children: ReactNode }) {
  const [state, dispatch] = useReducer(reducer, undefined, () => initialState(loadPersisted()))
  const stateRef = useRef(state)
  stateRef.current = state
  const abortRef = useRef<AbortController | null>(null)
  // The session being created (New chat), so a message sent before it exists goes to it instead of
  // creating a second one or landing in the previous session.
  const creatingRef = useRef<Promise<SessionSummary> | null>(null)

  useEffect(() => {
    const persisted: Persisted = { theme: state.theme, lang: state.lang, widths: state.widths }
    localStorage.setItem(STORAGE_KEY, JSON.stringify(persisted))
    document.documentElement.dataset.theme = state.theme
    document.documentElement.lang = htmlLang(state.lang)
  }, [state.theme, state.lang, state.widths])

  const t = useCallback(
    (key: MessageKey, vars?: Vars) => translate(state.lang, key, vars),
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

    /** The session's transcript and, while it waits, what for (its cards). */
    const loadSession = async (id: string) => {
      const history = await api.history(id)
      let pending: PendingItem[] = []
      if (history.waiting) {
        try {
          pending = (await api.approvals(id)).pending
        } catch (error) {
          fail(error)
        }
      }
      dispatch({ type: 'select', id, history, pending })
    }

    const selectSession = async (id: string) => {
      if (stateRef.current.streaming) return
      try {
        await loadSession(id)
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

    const createSession = (): Promise<SessionSummary> => {
      if (!creatingRef.current) {
        creatingRef.current = api.createSession().finally(() => {
          creatingRef.current = null
        })
      }
      return creatingRef.current
    }

    const newSession = async () => {
      if (stateRef.current.streaming) return
      try {
        const session = await createSession()
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
      if (!id || creatingRef.current) {
        try {
          const session = await createSession()
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
        else if (error instanceof ApiError && error.code === 'session_waiting') {
          // waiting for a decision (e.g. made in another tab): show its cards instead
          dispatch({ type: 'stream_end' })
          try {
            await loadSession(id)
          } catch {
            // the notice below says what to do
          }
          notify({ kind: 'error', text: translate(stateRef.current.lang, 'sessionWaiting') })
        } else dispatch({ type: 'stream_failed', error: messageOf(error) })
      } finally {
        abortRef.current = null
      }
      if (stateRef.current.currentId === id) await refreshTokens(id)
      await refreshSessions()
    }

    const decide = async (approvalId: string, decision: Decision) => {
      const id = stateRef.current.currentId
      if (!id || stateRef.current.streaming) return
      dispatch({ type: 'decide_start', approvalId, decision })
      const controller = new AbortController()
      abortRef.current = controller
      let accepted = false
      try {
        await streamDecision(
          id,
          approvalId,
          decision,
          (event) => dispatch({ type: 'event', event }),
          controller.signal,
          () => {
            accepted = true
            dispatch({ type: 'decide_accepted', approvalId })
          },
        )
        dispatch({ type: 'stream_end' })
      } catch (error) {
        const lang = stateRef.current.lang
        if (controller.signal.aborted) {
          dispatch({ type: 'event', event: { type: 'done', content: '', session_id: id, cancelled: true } })
        } else if (error instanceof ApiError && error.code === 'approval_decided') {
          const previous = String(error.details?.decision ?? '')
          dispatch({
            type: 'decide_failed',
            approvalId,
            status: 'decided',
            error: translate(lang, 'alreadyDecided', { decision: previous || '?' }),
            decision: isDecisionType(previous) ? { decision: previous } : undefined,
          })
        } else if (error instanceof ApiError && error.status === 404) {
          dispatch({ type: 'decide_failed', approvalId, status: 'gone', error: translate(lang, 'approvalGone') })
        } else if (accepted) {
          // the continuation's stream broke after the decision was taken
          dispatch({ type: 'stream_failed', error: messageOf(error) })
        } else {
          // busy, an invalid decision, a network error: it can be decided again
          dispatch({ type: 'decide_failed', approvalId, status: 'pending', error: messageOf(error) })
        }
      } finally {
        abortRef.current = null
      }
      if (stateRef.current.currentId === id) await refreshTokens(id)
      await refreshSessions()
    }

    const cancelWaiting = async () => {
      const id = stateRef.current.currentId
      if (!id) return
      try {
        await api.cancel(id)
        dispatch({ type: 'waiting_cancelled', sessionId: id })
      } catch (error) {
        fail(error)
      }
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
      decide,
      cancelWaiting,
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
