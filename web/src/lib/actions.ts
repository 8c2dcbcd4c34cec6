// The workbench's actions: what the UI asks of the API, each dispatching what came back into the
// store (lib/store.tsx). Chat and decisions stream their events into the reducer as they arrive.
import { ApiError } from '../shared/api'
import { api, streamChat, streamDecision } from './api'
import { translate } from './i18n'
import type { Notice, WorkbenchStore } from './reducer'
import type { PendingItem } from '../shared/pending'
import type { Decision, SessionSummary } from './types'

export interface WorkbenchActions {
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

function isDecisionType(value: string): value is Decision['decision'] {
  return value === 'approve' || value === 'edit' || value === 'reject' || value === 'answer'
}

export function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}

export function createActions(store: WorkbenchStore): WorkbenchActions {
  const { dispatch } = store
  const state = () => store.getState()
  let aborting: AbortController | null = null
  // The session being created (New chat), so a message sent before it exists goes to it instead of
  // creating a second one or landing in the previous session.
  let creating: Promise<SessionSummary> | null = null

  const notify = (notice: Notice | null) => dispatch({ type: 'notice', notice })
  const fail = (error: unknown) => notify({ kind: 'error', text: messageOf(error) })

  const refreshTokens = async (sessionId?: string) => {
    const id = sessionId ?? state().currentId
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
    if (state().streaming) return
    try {
      await loadSession(id)
      await refreshTokens(id)
      if (state().view === 'raw') await loadRaw(id)
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
    if (!creating) {
      creating = api.createSession().finally(() => {
        creating = null
      })
    }
    return creating
  }

  const newSession = async () => {
    if (state().streaming) return
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
    if (!message || state().streaming) return
    let id = state().currentId
    if (!id || creating) {
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
    aborting = controller
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
        notify({ kind: 'error', text: translate(state().lang, 'sessionWaiting') })
      } else dispatch({ type: 'stream_failed', error: messageOf(error) })
    } finally {
      aborting = null
    }
    if (state().currentId === id) await refreshTokens(id)
    await refreshSessions()
  }

  const decide = async (approvalId: string, decision: Decision) => {
    const id = state().currentId
    if (!id || state().streaming) return
    dispatch({ type: 'decide_start', approvalId, decision })
    const controller = new AbortController()
    aborting = controller
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
      const lang = state().lang
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
      aborting = null
    }
    if (state().currentId === id) await refreshTokens(id)
    await refreshSessions()
  }

  const cancelWaiting = async () => {
    const id = state().currentId
    if (!id) return
    try {
      await api.cancel(id)
      dispatch({ type: 'waiting_cancelled', sessionId: id })
    } catch (error) {
      fail(error)
    }
  }

  const stop = async () => {
    const id = state().currentId
    if (id) {
      try {
        await api.cancel(id)
      } catch {
        // the run may already be over
      }
    }
    aborting?.abort()
  }

  const actions: WorkbenchActions = {
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
      const id = state().currentId
      if (!id) return
      dispatch({ type: 'compressing', value: true })
      try {
        const result = await api.compress(id)
        const history = await api.history(id)
        dispatch({ type: 'select', id, history })
        notify({
          kind: 'info',
          text: translate(state().lang, 'compressed', {
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
      const id = state().currentId
      if (!show || !id) return dispatch({ type: 'view', view: 'chat' })
      await loadRaw(id)
    },
    refreshTokens,
    notify,
    decide,
    cancelWaiting,
  }
  return actions
}
