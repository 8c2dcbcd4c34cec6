// The workbench's state and its reducer (pure: the unit tests drive it; lib/store.tsx holds it and
// the actions that talk to the API), and the preferences it keeps in localStorage.
import { defaultLang } from '../shared/i18n'
import type { Lang } from '../shared/i18n'
import type { PendingItem } from '../shared/pending'
import type { Store } from '../shared/store'
import {
  assistantBubble,
  awaitingCall,
  callById,
  hasCard,
  historyToMessages,
  markAwaiting,
  newId,
  renderToolInput,
  settled,
  updateCard,
  updateLastAssistant,
  withCard,
} from './chat'
import type {
  ApprovalCard,
  ChatEvent,
  ChatMessage,
  Decision,
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
      let messages = settled(state.messages)
      for (const item of event.pending ?? []) {
        if (!hasCard(messages, item.approval_id)) messages = updateLastAssistant(messages, (m) => withCard(m, item))
      }
      const waiting = { ...state.waiting, [event.session_id]: (event.pending ?? []).length > 0 }
      return { ...state, messages, streaming: false, waiting }
    }
    case 'new_response': {
      const closed = settled(state.messages)
      return { ...state, messages: [...closed, assistantBubble()] }
    }
    case 'done': {
      let messages = settled(state.messages)
      if (event.cancelled) messages = updateLastAssistant(messages, (m) => ({ ...m, cancelled: true, streaming: false }))
      return { ...state, messages, streaming: false, waiting: without(state.waiting, event.session_id) }
    }
    case 'title':
      return {
        ...state,
        sessions: state.sessions.map((s) => (s.id === event.session_id ? { ...s, title: event.title } : s)),
      }
    case 'error': {
      const messages = updateLastAssistant(state.messages, (m) => ({ ...m, error: event.error, streaming: false }))
      return { ...state, messages: settled(messages), streaming: false }
    }
    default:
      return state
  }
}

/** `waiting` without the session `id` (none when there is no id). */
function without(waiting: Record<string, boolean>, id: string | null | undefined): Record<string, boolean> {
  if (!id) return waiting
  const { [id]: _dropped, ...rest } = waiting
  return rest
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
        messages: settled(state.messages),
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
      return { ...state, messages, streaming: true, waiting: without(state.waiting, state.currentId) }
    }
    case 'decide_accepted':
      return {
        ...state,
        messages: updateCard(state.messages, action.approvalId, (card) => ({ card: { ...card, status: 'decided' } })),
      }
    case 'decide_failed': {
      const messages = settled(updateCard(state.messages, action.approvalId, (card, message) => {
        const status = action.status
        const calls =
          status === 'pending'
            ? markAwaiting(message.toolCalls, card.item)
            : message.toolCalls
        return {
          card: { ...card, status, error: action.error, decision: status === 'pending' ? undefined : action.decision ?? card.decision },
          message: { ...message, toolCalls: calls, streaming: false },
        }
      }))
      const stillPending = messages.some((m) => (m.approvals ?? []).some((c) => c.status === 'pending'))
      const waiting =
        state.currentId && stillPending ? { ...state.waiting, [state.currentId]: true } : without(state.waiting, state.currentId)
      return { ...state, messages, streaming: false, waiting }
    }
    case 'waiting_cancelled': {
      const waiting = without(state.waiting, action.sessionId)
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

export interface Persisted {
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

export type WorkbenchStore = Store<WorkbenchState, Action>
