// The inbox store's reducer (the seed's §8.1 Redux-like store): pure, so the unit tests drive it.
//
// - ADD_* de-duplicate by id; ADD_TASK puts a new task first (newest first).
// - Messages are grouped by task, server messages in time order, optimistic ones after them.
// - An optimistic user message (id "tmp_…") is replaced by the server's copy when that copy
//   arrives, by SSE (ADD_MESSAGE) or by polling (SET_MESSAGES): never shown twice.
// - Older copies of a task (a poll answered before an SSE update) never overwrite newer ones,
//   and a deleted task is not brought back by a poll that was already on its way.
import type { Lang } from '../../shared/i18n'
import type { Agent, ClientMessage, Message, MessagePreview, Model, Pending, Task, TaskStatus } from './types'

export type Connection = 'connecting' | 'open' | 'closed'

export interface Notice {
  kind: 'info' | 'error'
  text: string
}

export interface InboxState {
  agents: Agent[]
  agentsLoaded: boolean
  models: Model[] | null
  /** Every task the client knows, newest first. Pages sort for display (see compareTasks). */
  tasks: Task[]
  /** Which task lists have been loaded: an agent id, or '*' for all agents. */
  loaded: Record<string, true>
  /** Tasks deleted in this session: a poll answered before the delete must not revive them. */
  deleted: Record<string, true>
  /** Counts task additions and updates; `touched` says when (in this count) each task last
   * changed, so a list answer requested earlier does not drop a task it could not know yet. */
  seq: number
  touched: Record<string, number>
  messagesByTask: Record<string, ClientMessage[]>
  /** The reply streamed so far (message.delta) per running task. */
  drafts: Record<string, string>
  connection: Connection
  /** Answers come from the service worker's cache (or nowhere): the app shows saved data. */
  offline: boolean
  /** Bumped when the live connection comes back, so pages reload what they show. */
  syncEpoch: number
  notice: Notice | null
  lang: Lang
}

export type Action =
  | { type: 'SET_AGENTS'; agents: Agent[] }
  | { type: 'ADD_AGENT'; agent: Agent }
  | { type: 'REMOVE_AGENT'; id: string }
  | { type: 'SET_MODELS'; models: Model[] }
  | { type: 'SET_TASKS'; tasks: Task[]; agentId?: string; seq?: number }
  | { type: 'ADD_TASK'; task: Task; created?: boolean }
  | { type: 'UPDATE_TASK'; task: Task }
  | { type: 'REMOVE_TASK'; id: string; agentId?: string }
  | { type: 'SET_MESSAGES'; taskId: string; messages: Message[] }
  | { type: 'ADD_MESSAGE'; message: ClientMessage }
  | { type: 'SEND_FAILED'; taskId: string; id: string; error: string }
  | { type: 'REMOVE_MESSAGE'; taskId: string; id: string }
  | { type: 'DELTA'; taskId: string; content: string }
  | { type: 'CONNECTION'; connection: Connection }
  | { type: 'OFFLINE'; offline: boolean }
  | { type: 'NOTICE'; notice: Notice | null }
  | { type: 'LANG'; lang: Lang }

export function initialState(lang: Lang): InboxState {
  return {
    agents: [],
    agentsLoaded: false,
    models: null,
    tasks: [],
    loaded: {},
    deleted: {},
    seq: 0,
    touched: {},
    messagesByTask: {},
    drafts: {},
    connection: 'connecting',
    offline: false,
    syncEpoch: 0,
    notice: null,
    lang,
  }
}

// ---------------------------------------------------------------------------------------------
// ordering

/** The seed's list order: running > waiting > pending > completed > failed > cancelled. */
export const STATUS_RANK: Record<TaskStatus, number> = {
  running: 0,
  waiting: 1,
  pending: 2,
  completed: 3,
  failed: 4,
  cancelled: 5,
}

/** Sort for display: status first, then the latest update first. */
export function compareTasks(a: Task, b: Task): number {
  return STATUS_RANK[a.status] - STATUS_RANK[b.status] || b.updatedAt - a.updatedAt || (a.id < b.id ? 1 : -1)
}

export function sortTasks(tasks: Task[]): Task[] {
  return tasks.slice().sort(compareTasks)
}

function newestFirst(a: Task, b: Task): number {
  return b.createdAt - a.createdAt || (a.id < b.id ? 1 : a.id > b.id ? -1 : 0)
}

function byTime(a: Message, b: Message): number {
  return a.timestamp - b.timestamp || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0)
}

// ---------------------------------------------------------------------------------------------
// optimistic messages

export const TEMP_PREFIX = 'tmp_'
let tempCounter = 0

export function isTemp(message: Message): boolean {
  return message.id.startsWith(TEMP_PREFIX)
}

/** An optimistic user message, shown before the server has it (seed §8.3). */
export function optimisticMessage(taskId: string, content: string, now = Date.now()): ClientMessage {
  tempCounter += 1
  return { id: `${TEMP_PREFIX}${now}_${tempCounter}`, taskId, senderType: 'user', content, timestamp: now, pending: 'sending' }
}

/** Server messages in time order, then the optimistic ones still waiting for their copy. */
function arrange(server: ClientMessage[], temps: ClientMessage[]): ClientMessage[] {
  return [...server.slice().sort(byTime), ...temps]
}

/** Remove, for each server message that is new to the client, the first optimistic message it
 * is the copy of (same sender "user", same text). Returns the optimistic messages left over. */
function claim(temps: ClientMessage[], fresh: Message[]): ClientMessage[] {
  let left = temps
  for (const message of fresh) {
    if (message.senderType !== 'user') continue
    const at = left.findIndex((temp) => temp.content === message.content && temp.pending !== 'failed')
    if (at >= 0) left = [...left.slice(0, at), ...left.slice(at + 1)]
  }
  return left
}

// ---------------------------------------------------------------------------------------------
// helpers

function preview(message: Message): MessagePreview {
  return { senderType: message.senderType, content: message.content.slice(0, 140), timestamp: message.timestamp }
}

/** `incoming` merged over `existing`: list-only fields survive an update that lacks them
 * (`waitingFor` does not: the server sends it with every copy of a waiting task). */
function merge(existing: Task, incoming: Task): Task {
  const merged: Task = { ...existing, ...incoming }
  if (!incoming.lastMessage && existing.lastMessage) merged.lastMessage = existing.lastMessage
  if (!incoming.match) delete merged.match
  if (!incoming.waitingFor) delete merged.waitingFor
  return merged
}

function pendingKey(task: Task): string {
  return (task.waitingFor ?? []).map((item) => item.approvalId).join(',')
}

function sameTask(a: Task, b: Task): boolean {
  return (
    a.title === b.title &&
    a.titleLocked === b.titleLocked &&
    a.status === b.status &&
    a.updatedAt === b.updatedAt &&
    a.completedAt === b.completedAt &&
    a.agentId === b.agentId &&
    a.lastMessage === b.lastMessage &&
    a.match === b.match &&
    pendingKey(a) === pendingKey(b)
  )
}

function isNewer(existing: Task, incoming: Task): boolean {
  return incoming.updatedAt >= existing.updatedAt
}

function adjustCount(agents: Agent[], agentId: string | undefined, delta: number): Agent[] {
  if (!agentId) return agents
  return agents.map((agent) =>
    agent.id === agentId ? { ...agent, taskCount: Math.max(0, agent.taskCount + delta) } : agent,
  )
}

function withoutKey<T>(record: Record<string, T>, key: string): Record<string, T> {
  if (!(key in record)) return record
  const copy = { ...record }
  delete copy[key]
  return copy
}

function clearDraftUnlessRunning(drafts: Record<string, string>, task: Task): Record<string, string> {
  return task.status === 'running' ? drafts : withoutKey(drafts, task.id)
}

// ---------------------------------------------------------------------------------------------
// the reducer

export function reducer(state: InboxState, action: Action): InboxState {
  switch (action.type) {
    case 'SET_AGENTS':
      return { ...state, agents: action.agents, agentsLoaded: true }

    case 'ADD_AGENT': {
      const at = state.agents.findIndex((agent) => agent.id === action.agent.id)
      if (at >= 0) {
        const agents = state.agents.slice()
        agents[at] = action.agent
        return { ...state, agents }
      }
      return { ...state, agents: [...state.agents, action.agent] }
    }

    case 'REMOVE_AGENT':
      return { ...state, agents: state.agents.filter((agent) => agent.id !== action.id) }

    case 'SET_MODELS':
      return { ...state, models: action.models }

    case 'SET_TASKS': {
      // The answer replaces the tasks of its scope (one agent, or all): a task missing from it was
      // deleted elsewhere, unless it changed after the request left (action.seq). Newer copies win.
      const inScope = (task: Task) => action.agentId === undefined || task.agentId === action.agentId
      const since = action.seq ?? Number.POSITIVE_INFINITY
      const known = new Map(state.tasks.map((task) => [task.id, task]))
      const incoming = action.tasks.filter((task) => !state.deleted[task.id])
      const incomingIds = new Set(incoming.map((task) => task.id))
      const kept = state.tasks.filter(
        (task) => !incomingIds.has(task.id) && (!inScope(task) || (state.touched[task.id] ?? 0) > since),
      )
      const merged = incoming.map((task) => {
        const existing = known.get(task.id)
        if (!existing) return task
        if (isNewer(existing, task)) return merge(existing, task)
        return task.lastMessage ? { ...existing, lastMessage: newerPreview(existing.lastMessage, task.lastMessage) } : existing
      })
      const tasks = [...kept, ...merged].sort(newestFirst)
      let drafts = state.drafts
      for (const task of merged) drafts = clearDraftUnlessRunning(drafts, task)
      return { ...state, tasks, drafts, loaded: { ...state.loaded, [action.agentId ?? '*']: true } }
    }

    case 'ADD_TASK':
    case 'UPDATE_TASK': {
      const task = action.task
      if (state.deleted[task.id]) return state
      const at = state.tasks.findIndex((existing) => existing.id === task.id)
      const seq = state.seq + 1
      const touched = { ...state.touched, [task.id]: seq }
      if (at >= 0) {
        const existing = state.tasks[at]
        if (!isNewer(existing, task)) return state
        const merged = merge(existing, task)
        if (sameTask(existing, merged)) return state // a poll that changes nothing re-renders nothing
        const tasks = state.tasks.slice()
        tasks[at] = merged
        return { ...state, tasks, seq, touched, drafts: clearDraftUnlessRunning(state.drafts, task) }
      }
      // unknown: first in the list (newest first); a task created just now counts for its agent
      const agents = action.type === 'ADD_TASK' && action.created ? adjustCount(state.agents, task.agentId, 1) : state.agents
      return {
        ...state,
        agents,
        tasks: [task, ...state.tasks],
        seq,
        touched,
        drafts: clearDraftUnlessRunning(state.drafts, task),
      }
    }

    case 'REMOVE_TASK': {
      if (state.deleted[action.id]) return state
      const task = state.tasks.find((existing) => existing.id === action.id)
      return {
        ...state,
        agents: adjustCount(state.agents, task?.agentId ?? action.agentId, -1),
        tasks: state.tasks.filter((existing) => existing.id !== action.id),
        deleted: { ...state.deleted, [action.id]: true },
        messagesByTask: withoutKey(state.messagesByTask, action.id),
        drafts: withoutKey(state.drafts, action.id),
      }
    }

    case 'SET_MESSAGES': {
      if (state.deleted[action.taskId]) return state
      const current = state.messagesByTask[action.taskId] ?? []
      const knownIds = new Set(current.filter((message) => !isTemp(message)).map((message) => message.id))
      const fresh = action.messages.filter((message) => !knownIds.has(message.id))
      const oldTemps = current.filter(isTemp)
      const temps = claim(oldTemps, fresh)
      if (fresh.length === 0 && temps.length === oldTemps.length && action.taskId in state.messagesByTask) return state
      // messages are never deleted one by one: keep those that arrived (by SSE) after the request
      const answered = new Set(action.messages.map((message) => message.id))
      const later = current.filter((message) => !isTemp(message) && !answered.has(message.id))
      const messages = arrange([...action.messages, ...later], temps)
      const server = messages.filter((message) => !isTemp(message))
      const last = server[server.length - 1]
      let drafts = state.drafts
      if (last && last.senderType === 'agent' && fresh.includes(last)) drafts = withoutKey(drafts, action.taskId)
      return {
        ...state,
        messagesByTask: { ...state.messagesByTask, [action.taskId]: messages },
        drafts,
        tasks: last ? withPreview(state.tasks, last) : state.tasks,
      }
    }

    case 'ADD_MESSAGE': {
      const message = action.message
      if (state.deleted[message.taskId]) return state
      const current = state.messagesByTask[message.taskId] ?? []
      if (current.some((existing) => existing.id === message.id)) return state
      let server = current.filter((existing) => !isTemp(existing))
      let temps = current.filter(isTemp)
      if (isTemp(message)) temps = [...temps, message]
      else {
        server = [...server, message]
        temps = claim(temps, [message])
      }
      return {
        ...state,
        messagesByTask: { ...state.messagesByTask, [message.taskId]: arrange(server, temps) },
        drafts: message.senderType === 'agent' ? withoutKey(state.drafts, message.taskId) : state.drafts,
        tasks: withPreview(state.tasks, message),
      }
    }

    case 'SEND_FAILED':
    case 'REMOVE_MESSAGE': {
      const current = state.messagesByTask[action.taskId]
      if (!current) return state
      const messages =
        action.type === 'REMOVE_MESSAGE'
          ? current.filter((message) => message.id !== action.id)
          : current.map((message) =>
              message.id === action.id ? { ...message, pending: 'failed' as const, error: action.error } : message,
            )
      return { ...state, messagesByTask: { ...state.messagesByTask, [action.taskId]: messages } }
    }

    case 'DELTA': {
      const task = state.tasks.find((existing) => existing.id === action.taskId)
      if (state.deleted[action.taskId] || (task && task.status !== 'running' && task.status !== 'pending')) return state
      return { ...state, drafts: { ...state.drafts, [action.taskId]: action.content } }
    }

    case 'CONNECTION': {
      if (action.connection === state.connection) return state
      // back after a drop: pages reload what they show (events may have been missed)
      const resync = action.connection === 'open' && state.connection === 'closed'
      return { ...state, connection: action.connection, syncEpoch: state.syncEpoch + (resync ? 1 : 0) }
    }

    case 'OFFLINE':
      return action.offline === state.offline ? state : { ...state, offline: action.offline }

    case 'NOTICE':
      return { ...state, notice: action.notice }

    case 'LANG':
      return { ...state, lang: action.lang }
  }
}

function newerPreview(a: MessagePreview | undefined, b: MessagePreview): MessagePreview {
  return a && a.timestamp > b.timestamp ? a : b
}

/** The task list's last-message preview follows the newest message. */
function withPreview(tasks: Task[], message: Message): Task[] {
  const at = tasks.findIndex((task) => task.id === message.taskId)
  if (at < 0) return tasks
  const task = tasks[at]
  if (task.lastMessage && task.lastMessage.timestamp > message.timestamp) return tasks
  const next = preview(message)
  if (
    task.lastMessage &&
    task.lastMessage.content === next.content &&
    task.lastMessage.timestamp === next.timestamp &&
    task.lastMessage.senderType === next.senderType
  )
    return tasks
  const copy = tasks.slice()
  copy[at] = { ...task, lastMessage: next }
  return copy
}

// ---------------------------------------------------------------------------------------------
// selectors

export type Filter = 'all' | 'running' | 'waiting' | 'completed'

/** The inbox tabs: "Running" also shows tasks about to run (pending). */
export function matchesFilter(task: Task, filter: Filter): boolean {
  switch (filter) {
    case 'all':
      return true
    case 'running':
      return task.status === 'running' || task.status === 'pending'
    case 'waiting':
      return task.status === 'waiting'
    case 'completed':
      return task.status === 'completed'
  }
}

export function agentTasks(state: InboxState, agentId: string, filter: Filter = 'all'): Task[] {
  return sortTasks(state.tasks.filter((task) => task.agentId === agentId && matchesFilter(task, filter)))
}

/** What the task detail asks the user about: the oldest item a waiting task waits for. */
export function pendingItem(task: Task | undefined): Pending | undefined {
  return task?.status === 'waiting' ? task.waitingFor?.[0] : undefined
}

/** The statuses that end a run (what a notification reports). */
export function finishedRun(before: TaskStatus | undefined, after: TaskStatus): boolean {
  return (before === 'running' || before === 'pending') && (after === 'completed' || after === 'failed' || after === 'waiting')
}
