import { describe, expect, it } from 'vitest'
import { eventToAction } from './events'
import {
  agentTasks,
  compareTasks,
  finishedRun,
  initialState,
  optimisticMessage,
  pendingItem,
  reducer,
  sortTasks,
} from './reducer'
import type { Action, InboxState } from './reducer'
import type { Agent, Message, Pending, Task, TaskStatus } from './types'

function run(state: InboxState, ...actions: Action[]): InboxState {
  return actions.reduce(reducer, state)
}

function task(id: string, over: Partial<Task> = {}): Task {
  return { id, agentId: 'main', title: id, titleLocked: false, status: 'completed', createdAt: 1, updatedAt: 1, ...over }
}

function msg(id: string, over: Partial<Message> = {}): Message {
  return { id, taskId: 't1', senderType: 'user', content: id, timestamp: 1, ...over }
}

const agent = (id: string, taskCount = 0): Agent => ({
  id, name: id, isDefault: id === 'main', createdAt: 1, updatedAt: 1, taskCount,
})

const empty = () => initialState('en')

describe('tasks', () => {
  it('ADD_TASK de-duplicates by id and puts new tasks first', () => {
    const s = run(empty(),
      { type: 'ADD_TASK', task: task('a', { createdAt: 1 }) },
      { type: 'ADD_TASK', task: task('b', { createdAt: 2 }) },
      { type: 'ADD_TASK', task: task('a', { createdAt: 1 }) },
    )
    expect(s.tasks.map((t) => t.id)).toEqual(['b', 'a'])
  })

  it('counts a created task once for its agent, however often it arrives', () => {
    const s = run(empty(),
      { type: 'SET_AGENTS', agents: [agent('main', 2)] },
      { type: 'ADD_TASK', task: task('a'), created: true }, // the POST answer
      { type: 'ADD_TASK', task: task('a'), created: true }, // the SSE event
      { type: 'UPDATE_TASK', task: task('a', { updatedAt: 2 }) },
    )
    expect(s.agents[0].taskCount).toBe(3)
    const removed = run(s, { type: 'REMOVE_TASK', id: 'a' }, { type: 'REMOVE_TASK', id: 'a', agentId: 'main' })
    expect(removed.agents[0].taskCount).toBe(2)
  })

  it('UPDATE_TASK replaces the task but keeps its preview, and ignores older copies', () => {
    const withPreview = task('a', { status: 'running', updatedAt: 5, lastMessage: { senderType: 'user', content: 'hi', timestamp: 5 } })
    let s = run(empty(), { type: 'SET_TASKS', tasks: [withPreview], agentId: 'main' })
    s = run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'completed', updatedAt: 7, title: 'renamed' }) })
    expect(s.tasks[0]).toMatchObject({ status: 'completed', title: 'renamed', lastMessage: { content: 'hi' } })
    s = run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'running', updatedAt: 6 }) })
    expect(s.tasks[0].status).toBe('completed')
    // the same copy again (a poll): nothing changes, not even identity
    expect(run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'completed', updatedAt: 7, title: 'renamed' }) })).toBe(s)
    // a poll answered before the update does not undo it either
    s = run(s, { type: 'SET_TASKS', tasks: [task('a', { status: 'running', updatedAt: 5 })], agentId: 'main' })
    expect(s.tasks[0].status).toBe('completed')
  })

  it('SET_TASKS replaces only its agent, drops tasks deleted elsewhere, keeps ones newer than the request', () => {
    let s = run(empty(),
      { type: 'SET_TASKS', tasks: [task('m1'), task('o1', { agentId: 'other' })] },
    )
    const seq = s.seq
    s = run(s, { type: 'ADD_TASK', task: task('m2', { createdAt: 9 }), created: true }) // arrives while a poll is out
    s = run(s, { type: 'SET_TASKS', tasks: [], agentId: 'main', seq }) // the poll: m1 was deleted elsewhere
    expect(s.tasks.map((t) => t.id).sort()).toEqual(['m2', 'o1'])
    expect(s.loaded.main).toBe(true)
  })

  it('a deleted task is not revived by a late answer or event', () => {
    const s = run(empty(),
      { type: 'ADD_TASK', task: task('a') },
      { type: 'ADD_MESSAGE', message: msg('m1', { taskId: 'a' }) },
      { type: 'REMOVE_TASK', id: 'a' },
      { type: 'SET_TASKS', tasks: [task('a')], agentId: 'main' },
      { type: 'UPDATE_TASK', task: task('a', { updatedAt: 9 }) },
      { type: 'ADD_MESSAGE', message: msg('m2', { taskId: 'a' }) },
    )
    expect(s.tasks).toEqual([])
    expect(s.messagesByTask.a).toBeUndefined()
  })

  it('sorts as the seed: running > waiting > pending > completed > failed > cancelled, then newest update', () => {
    const statuses: TaskStatus[] = ['cancelled', 'completed', 'failed', 'pending', 'waiting', 'running']
    const tasks = statuses.map((status, i) => task(status, { status, updatedAt: i }))
    tasks.push(task('completed-later', { status: 'completed', updatedAt: 100 }))
    expect(sortTasks(tasks).map((t) => t.id)).toEqual([
      'running', 'waiting', 'pending', 'completed-later', 'completed', 'failed', 'cancelled',
    ])
    expect(compareTasks(task('x', { status: 'running' }), task('y', { status: 'pending' }))).toBeLessThan(0)
  })

  it('filters an agent\'s tasks by tab', () => {
    const s = run(empty(), { type: 'SET_TASKS', tasks: [
      task('r', { status: 'running' }), task('p', { status: 'pending' }), task('w', { status: 'waiting' }),
      task('c', { status: 'completed' }), task('f', { status: 'failed' }), task('x', { status: 'running', agentId: 'other' }),
    ] })
    expect(agentTasks(s, 'main', 'running').map((t) => t.id)).toEqual(['r', 'p'])
    expect(agentTasks(s, 'main', 'waiting').map((t) => t.id)).toEqual(['w'])
    expect(agentTasks(s, 'main', 'completed').map((t) => t.id)).toEqual(['c'])
    expect(agentTasks(s, 'main').length).toBe(5)
  })
})

describe('messages', () => {
  it('ADD_MESSAGE groups by task, de-duplicates by id and keeps time order', () => {
    const s = run(empty(),
      { type: 'ADD_MESSAGE', message: msg('b', { timestamp: 2 }) },
      { type: 'ADD_MESSAGE', message: msg('a', { timestamp: 1 }) },
      { type: 'ADD_MESSAGE', message: msg('b', { timestamp: 2 }) },
      { type: 'ADD_MESSAGE', message: msg('x', { taskId: 't2' }) },
    )
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['a', 'b'])
    expect(s.messagesByTask.t2.map((m) => m.id)).toEqual(['x'])
  })

  it('the server copy (by SSE) replaces the optimistic message: no duplicate', () => {
    const temp = optimisticMessage('t1', 'follow up', 100)
    let s = run(empty(), { type: 'SET_MESSAGES', taskId: 't1', messages: [msg('m1', { content: 'first' })] })
    s = run(s, { type: 'ADD_MESSAGE', message: temp })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['m1', temp.id])
    expect(s.messagesByTask.t1[1].pending).toBe('sending')
    s = run(s, { type: 'ADD_MESSAGE', message: msg('m2', { content: 'follow up', timestamp: 101 }) })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['m1', 'm2'])
    // the poll that also has it changes nothing
    s = run(s, { type: 'SET_MESSAGES', taskId: 't1', messages: [msg('m1', { content: 'first' }), msg('m2', { content: 'follow up', timestamp: 101 })] })
    expect(s.messagesByTask.t1.filter((m) => m.content === 'follow up')).toHaveLength(1)
  })

  it('the server copy (by polling) replaces the optimistic message: no duplicate', () => {
    const temp = optimisticMessage('t1', 'again', 100)
    let s = run(empty(),
      { type: 'SET_MESSAGES', taskId: 't1', messages: [msg('m1', { content: 'again' })] }, // an older "again"
      { type: 'ADD_MESSAGE', message: temp },
    )
    // a poll that left before the send: the old "again" is known, so the optimistic one stays
    s = run(s, { type: 'SET_MESSAGES', taskId: 't1', messages: [msg('m1', { content: 'again' })] })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['m1', temp.id])
    // the poll with the new copy
    s = run(s, { type: 'SET_MESSAGES', taskId: 't1', messages: [
      msg('m1', { content: 'again' }), msg('m2', { content: 'again', timestamp: 2 }), msg('r', { senderType: 'agent', timestamp: 3 }),
    ] })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['m1', 'm2', 'r'])
    // …and the SSE event arriving after it
    s = run(s, { type: 'ADD_MESSAGE', message: msg('m2', { content: 'again', timestamp: 2 }) })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['m1', 'm2', 'r'])
  })

  it('two optimistic messages with the same text are each matched once', () => {
    const a = optimisticMessage('t1', 'ok', 1)
    const b = optimisticMessage('t1', 'ok', 2)
    let s = run(empty(), { type: 'ADD_MESSAGE', message: a }, { type: 'ADD_MESSAGE', message: b })
    s = run(s, { type: 'ADD_MESSAGE', message: msg('s1', { content: 'ok', timestamp: 5 }) })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['s1', b.id])
    s = run(s, { type: 'SET_MESSAGES', taskId: 't1', messages: [msg('s1', { content: 'ok', timestamp: 5 }), msg('s2', { content: 'ok', timestamp: 6 })] })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['s1', 's2'])
  })

  it('optimistic messages stay after the server messages until matched; a failed one stays until removed', () => {
    const temp = optimisticMessage('t1', 'hello', 0)
    let s = run(empty(), { type: 'ADD_MESSAGE', message: temp })
    s = run(s, { type: 'ADD_MESSAGE', message: msg('r', { senderType: 'agent', content: 'earlier reply', timestamp: 50 }) })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['r', temp.id])
    s = run(s, { type: 'SEND_FAILED', taskId: 't1', id: temp.id, error: 'busy' })
    expect(s.messagesByTask.t1[1]).toMatchObject({ pending: 'failed', error: 'busy' })
    s = run(s, { type: 'ADD_MESSAGE', message: msg('other', { content: 'hello', timestamp: 60 }) })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['r', 'other', temp.id])
    s = run(s, { type: 'REMOVE_MESSAGE', taskId: 't1', id: temp.id })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['r', 'other'])
  })

  it('SET_MESSAGES keeps messages that arrived by SSE after the request left', () => {
    let s = run(empty(), { type: 'ADD_MESSAGE', message: msg('u', { timestamp: 1 }) })
    s = run(s, { type: 'ADD_MESSAGE', message: msg('r', { senderType: 'agent', timestamp: 2 }) })
    s = run(s, { type: 'SET_MESSAGES', taskId: 't1', messages: [msg('u', { timestamp: 1 })] })
    expect(s.messagesByTask.t1.map((m) => m.id)).toEqual(['u', 'r'])
  })

  it('a new message updates the task\'s preview; the reply ends the streamed draft', () => {
    let s = run(empty(),
      { type: 'ADD_TASK', task: task('t1', { status: 'running' }) },
      { type: 'DELTA', taskId: 't1', content: 'Hel' },
      { type: 'DELTA', taskId: 't1', content: 'Hello' },
    )
    expect(s.drafts.t1).toBe('Hello')
    s = run(s, { type: 'ADD_MESSAGE', message: msg('r', { senderType: 'agent', content: 'Hello there', timestamp: 9 }) })
    expect(s.drafts.t1).toBeUndefined()
    expect(s.tasks[0].lastMessage).toEqual({ senderType: 'agent', content: 'Hello there', timestamp: 9 })
    // a late delta for a finished task is ignored
    s = run(s, { type: 'UPDATE_TASK', task: task('t1', { status: 'completed', updatedAt: 10 }) }, { type: 'DELTA', taskId: 't1', content: 'x' })
    expect(s.drafts.t1).toBeUndefined()
  })
})

describe('connection and events', () => {
  it('a reconnect after a drop bumps syncEpoch (pages reload); the first open does not', () => {
    let s = run(empty(), { type: 'CONNECTION', connection: 'open' })
    expect(s.syncEpoch).toBe(0)
    s = run(s, { type: 'CONNECTION', connection: 'closed' }, { type: 'CONNECTION', connection: 'open' })
    expect(s.syncEpoch).toBe(1)
  })

  it('maps SSE events to actions', () => {
    expect(eventToAction('task.created', JSON.stringify(task('a')))).toEqual({ type: 'ADD_TASK', task: task('a'), created: true })
    expect(eventToAction('task.updated', JSON.stringify(task('a')))).toMatchObject({ type: 'UPDATE_TASK' })
    expect(eventToAction('message.created', JSON.stringify(msg('m')))).toMatchObject({ type: 'ADD_MESSAGE', message: { id: 'm' } })
    expect(eventToAction('message.delta', '{"taskId":"t","content":"中文"}')).toEqual({ type: 'DELTA', taskId: 't', content: '中文' })
    expect(eventToAction('task.deleted', '{"id":"a","agentId":"main"}')).toEqual({ type: 'REMOVE_TASK', id: 'a', agentId: 'main' })
    expect(eventToAction('heartbeat', '{"timestamp":1}')).toBeNull()
    expect(eventToAction('task.created', 'not json')).toBeNull()
  })

  it('knows which status changes end a run', () => {
    expect(finishedRun('running', 'completed')).toBe(true)
    expect(finishedRun('pending', 'failed')).toBe(true)
    expect(finishedRun('running', 'waiting')).toBe(true)
    expect(finishedRun(undefined, 'completed')).toBe(false)
    expect(finishedRun('completed', 'completed')).toBe(false)
    expect(finishedRun('running', 'cancelled')).toBe(false)
  })
})

describe('waiting tasks', () => {
  const approval: Pending = {
    kind: 'tool', approvalId: 'ap1', tool: 'terminal', args: { command: 'ls' }, input: 'ls', allowedDecisions: ['approve', 'reject'],
  }
  const question: Pending = { kind: 'question', approvalId: 'q1', question: 'Which colour?', allowedDecisions: ['answer', 'reject'] }

  it('a waiting task carries what it waits for; the next update without it clears it', () => {
    let s = run(empty(), { type: 'ADD_TASK', task: task('a', { status: 'running', updatedAt: 1 }) })
    s = run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'waiting', updatedAt: 2, waitingFor: [approval] }) })
    expect(pendingItem(s.tasks[0])).toEqual(approval)
    s = run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'running', updatedAt: 3 }) })
    expect(s.tasks[0].waitingFor).toBeUndefined()
    expect(pendingItem(s.tasks[0])).toBeUndefined()
  })

  it('a poll answering the same task with another pending item re-renders, an identical one does not', () => {
    let s = run(empty(), { type: 'SET_TASKS', tasks: [task('a', { status: 'waiting', updatedAt: 2, waitingFor: [approval] })], agentId: 'main' })
    const same = run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'waiting', updatedAt: 2, waitingFor: [{ ...approval }] }) })
    expect(same).toBe(s)
    s = run(s, { type: 'UPDATE_TASK', task: task('a', { status: 'waiting', updatedAt: 2, waitingFor: [question] }) })
    expect(pendingItem(s.tasks[0])).toEqual(question)
  })

  it('only a waiting task asks (a stale waitingFor on another status is ignored), and the oldest item first', () => {
    expect(pendingItem(task('a', { status: 'completed', waitingFor: [approval] }))).toBeUndefined()
    expect(pendingItem(task('a', { status: 'waiting', waitingFor: [question, approval] }))).toEqual(question)
    expect(pendingItem(task('a', { status: 'waiting' }))).toBeUndefined()
    expect(pendingItem(undefined)).toBeUndefined()
  })

  it('the Needs reply tab shows waiting tasks only', () => {
    const s = run(empty(), { type: 'SET_TASKS', agentId: 'main', tasks: [
      task('w', { status: 'waiting', waitingFor: [question] }), task('r', { status: 'running' }), task('c'),
    ] })
    expect(agentTasks(s, 'main', 'waiting').map((t) => t.id)).toEqual(['w'])
  })
})
