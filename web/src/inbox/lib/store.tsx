// The inbox store: the reducer's state (seed §8.1) in the shared store (src/shared/store.ts) and
// one React context, the global SSE connection (§8.2), the API actions with optimistic user
// messages (§8.3), notifications and preferences.
import { createContext, useCallback, useContext, useEffect, useMemo, useRef, useState } from 'react'
import type { ReactNode } from 'react'
import { useNavigate } from 'react-router-dom'
import { ApiError } from '../../shared/api'
import { api, onReachability } from './api'
import type { NewAgent } from './api'
import { connectEvents } from './events'
import { defaultLang, htmlLang } from '../../shared/i18n'
import type { Lang, Vars } from '../../shared/i18n'
import { errorText, translate } from './i18n'
import type { MessageKey, Translate } from './i18n'
import { useLatest } from '../../shared/hooks'
import { createStore, useSelector } from '../../shared/store'
import { pageHidden, permission, requestPermission, showNotification } from './notify'
import type { Permission } from './notify'
import { finishedRun, initialState, optimisticMessage, reducer } from './reducer'
import type { Action, InboxState, Notice } from './reducer'
import type { Agent, ClientMessage, Decision, Pending, Task, TaskStatus } from './types'

export const STORAGE_KEY = 'clawlet-inbox'
/** How many tasks a list asks for (the server allows up to 500). */
export const LIST_LIMIT = 200

interface Persisted {
  lang?: Lang
  notify?: boolean
}

function loadPersisted(): Persisted {
  try {
    return JSON.parse(localStorage.getItem(STORAGE_KEY) ?? '{}') as Persisted
  } catch {
    return {}
  }
}

export interface InboxActions {
  loadAgents(): Promise<void>
  loadModels(): Promise<void>
  loadTasks(agentId?: string): Promise<void>
  loadTask(taskId: string): Promise<Task>
  loadMessages(taskId: string): Promise<void>
  createAgent(agent: NewAgent): Promise<Agent>
  createTask(agentId: string, content: string): Promise<Task>
  sendMessage(taskId: string, content: string): Promise<void>
  /** Decide what a waiting task waits for; an answer shows at once as the user's message.
   * Resolves false (and says why) when the server refused it. */
  decide(taskId: string, item: Pending, decision: Decision): Promise<boolean>
  retryMessage(message: ClientMessage): Promise<void>
  renameTask(taskId: string, title: string): Promise<void>
  cancelTask(taskId: string): Promise<void>
  deleteTask(taskId: string): Promise<void>
  toggleNotifications(): Promise<void>
  /** Show an API failure as a notice, in words. */
  fail(error: unknown): void
  say(key: MessageKey, vars?: Vars): void
}

interface InboxContextValue {
  state: InboxState
  dispatch: (action: Action) => void
  t: Translate
  actions: InboxActions
  notify: { enabled: boolean; permission: Permission }
}

const InboxContext = createContext<InboxContextValue | null>(null)

export function InboxProvider({ children, events = true }: { children: ReactNode; events?: boolean }) {
  const persisted = useMemo(() => loadPersisted(), [])
  const store = useMemo(() => createStore(reducer, initialState(persisted.lang ?? defaultLang())), [persisted])
  const { dispatch } = store
  // the pages show most of the state: every change re-renders them
  const state = useSelector(store, (current) => current)
  const navigate = useNavigate()
  const [notifyEnabled, setNotifyEnabled] = useState(persisted.notify ?? true)
  const [notifyPermission, setNotifyPermission] = useState<Permission>(permission)

  const t = useCallback<Translate>((key, vars) => translate(state.lang, key, vars), [state.lang])
  const tRef = useLatest(t)

  // language and preferences
  useEffect(() => {
    localStorage.setItem(STORAGE_KEY, JSON.stringify({ lang: state.lang, notify: notifyEnabled } satisfies Persisted))
    document.documentElement.lang = htmlLang(state.lang)
    document.title = translate(state.lang, 'appTitle')
  }, [state.lang, notifyEnabled])

  // the global SSE connection, and whether answers come from the network
  useEffect(() => (events ? connectEvents(dispatch) : undefined), [events, dispatch])
  useEffect(() => {
    onReachability((reach) => dispatch({ type: 'OFFLINE', offline: reach !== 'online' }))
    const offline = () => dispatch({ type: 'OFFLINE', offline: true })
    window.addEventListener('offline', offline)
    if (!navigator.onLine) offline()
    return () => {
      onReachability(null)
      window.removeEventListener('offline', offline)
    }
  }, [dispatch])

  // an info notice goes away by itself
  useEffect(() => {
    if (state.notice?.kind !== 'info') return
    const timer = setTimeout(() => dispatch({ type: 'NOTICE', notice: null }), 3500)
    return () => clearTimeout(timer)
  }, [state.notice, dispatch])

  // a notification when a run ends while the page is hidden
  const statuses = useRef<Map<string, TaskStatus>>(new Map())
  useEffect(() => {
    const before = statuses.current
    const after = new Map<string, TaskStatus>()
    for (const task of state.tasks) {
      after.set(task.id, task.status)
      if (!finishedRun(before.get(task.id), task.status)) continue
      if (!notifyEnabled || !pageHidden()) continue
      const key: MessageKey =
        task.status === 'completed' ? 'notifyDone' : task.status === 'failed' ? 'notifyFailed' : 'notifyWaiting'
      const url = `/inbox/agents/${encodeURIComponent(task.agentId)}/tasks/${encodeURIComponent(task.id)}`
      void showNotification(t(key), task.title, url, task.id, (target) => navigate(target.replace(/^\/inbox/, '')))
    }
    statuses.current = after
  }, [state.tasks, notifyEnabled, t, navigate])

  const actions = useMemo<InboxActions>(() => {
    const fail = (error: unknown) => dispatch({ type: 'NOTICE', notice: { kind: 'error', text: errorText(tRef.current, error) } })
    const say = (key: MessageKey, vars?: Vars) =>
      dispatch({ type: 'NOTICE', notice: { kind: 'info', text: tRef.current(key, vars) } })

    const loadMessages = async (taskId: string) => {
      const messages = await api.messages(taskId)
      dispatch({ type: 'SET_MESSAGES', taskId, messages })
    }
    const loadTask = async (taskId: string) => {
      try {
        const task = await api.task(taskId)
        dispatch({ type: 'UPDATE_TASK', task })
        return task
      } catch (error) {
        if (error instanceof ApiError && error.code === 'task_not_found') dispatch({ type: 'REMOVE_TASK', id: taskId })
        throw error
      }
    }
    const send = async (taskId: string, content: string) => {
      const message = optimisticMessage(taskId, content)
      dispatch({ type: 'ADD_MESSAGE', message })
      try {
        await api.sendMessage(taskId, content)
      } catch (error) {
        dispatch({ type: 'SEND_FAILED', taskId, id: message.id, error: errorText(tRef.current, error) })
        fail(error)
        return
      }
      // the server's copy replaces the optimistic one as soon as it is here (SSE or this reload)
      void Promise.all([loadMessages(taskId), loadTask(taskId)]).catch(() => undefined)
    }

    return {
      fail,
      say,
      loadAgents: async () => dispatch({ type: 'SET_AGENTS', agents: await api.agents() }),
      loadModels: async () => {
        try {
          dispatch({ type: 'SET_MODELS', models: await api.models() })
        } catch {
          dispatch({ type: 'SET_MODELS', models: [] })
        }
      },
      loadTasks: async (agentId?: string) => {
        const seq = store.getState().seq
        const tasks = await api.tasks({ agentId, limit: LIST_LIMIT })
        dispatch({ type: 'SET_TASKS', tasks, agentId, seq })
      },
      loadTask,
      loadMessages,
      createAgent: async (agent: NewAgent) => {
        const created = await api.createAgent(agent)
        dispatch({ type: 'ADD_AGENT', agent: created })
        return created
      },
      createTask: async (agentId: string, content: string) => {
        const task = await api.createTask(content, agentId)
        dispatch({ type: 'ADD_TASK', task, created: true })
        return task
      },
      sendMessage: send,
      decide: async (taskId: string, item: Pending, decision: Decision) => {
        // an answer is saved verbatim as the user's message, so it can show at once; approve, edit
        // and reject are saved as "✅ Approved" / "✏️ …" / "🚫 Rejected: …" and arrive from the server
        const { message } = decision
        const shown = decision.decision === 'answer' && message ? optimisticMessage(taskId, message) : null
        if (shown) dispatch({ type: 'ADD_MESSAGE', message: shown })
        let ok = true
        try {
          await api.decide(taskId, item.approvalId, decision)
        } catch (error) {
          if (shown) dispatch({ type: 'REMOVE_MESSAGE', taskId, id: shown.id })
          fail(error)
          ok = false
        }
        void Promise.all([loadMessages(taskId), loadTask(taskId)]).catch(() => undefined)
        return ok
      },
      retryMessage: async (message: ClientMessage) => {
        dispatch({ type: 'REMOVE_MESSAGE', taskId: message.taskId, id: message.id })
        await send(message.taskId, message.content)
      },
      renameTask: async (taskId: string, title: string) => {
        try {
          dispatch({ type: 'UPDATE_TASK', task: await api.renameTask(taskId, title) })
        } catch (error) {
          fail(error)
        }
      },
      cancelTask: async (taskId: string) => {
        try {
          dispatch({ type: 'UPDATE_TASK', task: await api.cancelTask(taskId) })
        } catch (error) {
          fail(error)
          void loadTask(taskId).catch(() => undefined)
        }
      },
      deleteTask: async (taskId: string) => {
        try {
          await api.deleteTask(taskId)
        } catch (error) {
          if (!(error instanceof ApiError && error.code === 'task_not_found')) {
            fail(error)
            throw error
          }
        }
        dispatch({ type: 'REMOVE_TASK', id: taskId })
        say('taskDeleted')
      },
      toggleNotifications: async () => {
        const current = permission()
        if (current === 'granted') {
          setNotifyEnabled((enabled) => !enabled)
          return
        }
        const answer = current === 'default' ? await requestPermission() : current
        setNotifyPermission(answer)
        if (answer === 'granted') setNotifyEnabled(true)
        else if (answer === 'denied') dispatch({ type: 'NOTICE', notice: { kind: 'error', text: tRef.current('notificationsBlocked') } })
      },
    }
  }, [store, dispatch, tRef])

  const value = useMemo<InboxContextValue>(
    () => ({ state, dispatch, t, actions, notify: { enabled: notifyEnabled && notifyPermission === 'granted', permission: notifyPermission } }),
    [state, dispatch, t, actions, notifyEnabled, notifyPermission],
  )
  return <InboxContext.Provider value={value}>{children}</InboxContext.Provider>
}

export function useInbox(): InboxContextValue {
  const value = useContext(InboxContext)
  if (!value) throw new Error('useInbox outside InboxProvider')
  return value
}

/** Run `load` now and every `ms` (the seed's polling fallback: inbox 5 s, detail 3 s); a run
 * never overlaps the previous one. `deps` restart it (e.g. another task, or a reconnect). */
export function usePolling(load: () => Promise<unknown>, ms: number, deps: unknown[]): void {
  const loadRef = useLatest(load)
  const restart = JSON.stringify(deps)
  useEffect(() => {
    let stopped = false
    let busy = false
    const tick = async () => {
      if (busy || stopped) return
      busy = true
      try {
        await loadRef.current()
      } catch {
        // shown by the page (first load) or the offline banner; the next tick retries
      } finally {
        busy = false
      }
    }
    void tick()
    const timer = setInterval(() => void tick(), ms)
    return () => {
      stopped = true
      clearInterval(timer)
    }
  }, [ms, restart, loadRef])
}

/** Re-render every `ms` (relative times stay right). */
export function useNow(ms = 30_000): number {
  const [now, setNow] = useState(() => Date.now())
  useEffect(() => {
    const timer = setInterval(() => setNow(Date.now()), ms)
    return () => clearInterval(timer)
  }, [ms])
  return now
}

export type { Notice }
