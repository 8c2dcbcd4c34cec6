import { describe, expect, it } from 'vitest'
import { parseChatEvent } from './api'
import { historyToMessages } from './chat'
import { initialState, reducer } from './reducer'
import type { Action, WorkbenchState } from './reducer'
import type { ChatEvent } from './types'

function run(state: WorkbenchState, ...actions: Action[]): WorkbenchState {
  return actions.reduce(reducer, state)
}
const ev = (event: ChatEvent): Action => ({ type: 'event', event })

function base(): WorkbenchState {
  const state = initialState({ theme: 'light', lang: 'en' })
  return run(
    state,
    { type: 'sessions', sessions: [
      { id: 'a', title: '', created_at: 1, updated_at: 1, message_count: 0 },
      { id: 'b', title: 'old', created_at: 1, updated_at: 1, message_count: 0 },
    ] },
    { type: 'select', id: 'a' },
    { type: 'send', text: 'hello' },
  )
}

describe('reducer', () => {
  it('send adds the user message and an empty streaming assistant bubble', () => {
    const s = base()
    expect(s.streaming).toBe(true)
    expect(s.messages.map((m) => m.role)).toEqual(['user', 'assistant'])
    expect(s.messages[1]).toMatchObject({ content: '', streaming: true })
  })

  it('appends tokens to the current bubble', () => {
    const s = run(base(), ev({ type: 'token', content: 'Hel' }), ev({ type: 'token', content: 'lo 你好' }))
    expect(s.messages).toHaveLength(2)
    expect(s.messages[1].content).toBe('Hello 你好')
  })

  it('ignores event types it does not know (the server may add some, like thinking)', () => {
    const before = run(base(), ev({ type: 'token', content: 'Hi' }))
    const unknown = { type: 'thinking', content: 'hmm' } as unknown as ChatEvent
    const parsed = parseChatEvent('thinking', JSON.stringify(unknown))
    expect(parsed?.type).toBe('thinking')
    expect(run(before, ev(unknown), ev(parsed as ChatEvent))).toEqual(before)
  })

  it('fills the thought chain from tool_start and tool_end', () => {
    const s = run(
      base(),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi' }),
      ev({ type: 'tool_end', tool: 'terminal', output: 'hi\n', is_error: false }),
      ev({ type: 'tool_start', tool: 'python_repl', input: '1/0' }),
    )
    const calls = s.messages[1].toolCalls
    expect(calls).toEqual([
      { tool: 'terminal', input: 'echo hi', output: 'hi\n', isError: false, done: true },
      { tool: 'python_repl', input: '1/0', done: false },
    ])
    const t = run(s, ev({ type: 'tool_end', tool: 'python_repl', output: 'ZeroDivisionError', is_error: true }))
    expect(t.messages[1].toolCalls[1]).toMatchObject({ output: 'ZeroDivisionError', isError: true, done: true })
  })

  it('new_response opens a new assistant bubble and closes the previous one', () => {
    const s = run(
      base(),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi' }),
      ev({ type: 'tool_end', tool: 'terminal', output: 'hi' }),
      ev({ type: 'new_response' }),
      ev({ type: 'token', content: 'The output is hi.' }),
    )
    expect(s.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'assistant'])
    expect(s.messages[1].streaming).toBe(false)
    expect(s.messages[1].toolCalls).toHaveLength(1)
    expect(s.messages[2]).toMatchObject({ content: 'The output is hi.', streaming: true, toolCalls: [] })
  })

  it('a retrieval event becomes a card on the current bubble', () => {
    const results = [{ text: 'The cat is Mochi', score: 0.8, source: 'MEMORY.md' }]
    const s = run(base(), ev({ type: 'retrieval', query: 'cat?', results }), ev({ type: 'token', content: 'Mochi' }))
    expect(s.messages[1].retrievals).toEqual([{ query: 'cat?', results }])
    expect(s.messages[1].content).toBe('Mochi')
  })

  it('title renames the session in the list', () => {
    const s = run(base(), ev({ type: 'title', session_id: 'a', title: '问候' }))
    expect(s.sessions.find((x) => x.id === 'a')?.title).toBe('问候')
    expect(s.sessions.find((x) => x.id === 'b')?.title).toBe('old')
  })

  it('done ends streaming; a cancelled done marks the bubble', () => {
    const s = run(base(), ev({ type: 'token', content: 'x' }), ev({ type: 'done', content: 'x', session_id: 'a' }))
    expect(s.streaming).toBe(false)
    expect(s.messages.every((m) => !m.streaming)).toBe(true)
    const c = run(base(), ev({ type: 'done', content: '', session_id: 'a', cancelled: true }))
    expect(c.messages[1].cancelled).toBe(true)
  })

  it('error is shown on the bubble and ends streaming', () => {
    const s = run(base(), ev({ type: 'error', error: 'model exploded' }))
    expect(s.streaming).toBe(false)
    expect(s.messages[1]).toMatchObject({ error: 'model exploded', streaming: false })
    const f = run(base(), { type: 'stream_failed', error: 'network down' })
    expect(f.messages[1].error).toBe('network down')
  })

  it('send moves the current session to the top of the list', () => {
    const s = run(initialState({}), { type: 'sessions', sessions: [
      { id: 'a', title: '', created_at: 1, updated_at: 2, message_count: 0 },
      { id: 'b', title: '', created_at: 1, updated_at: 1, message_count: 0 },
    ] }, { type: 'select', id: 'b' }, { type: 'send', text: 'hi' })
    expect(s.sessions.map((x) => x.id)).toEqual(['b', 'a'])
  })

  it('deleting the selected session clears the chat', () => {
    const s = run(base(), { type: 'session_removed', id: 'a' })
    expect(s.currentId).toBeNull()
    expect(s.messages).toEqual([])
    expect(s.sessions.map((x) => x.id)).toEqual(['b'])
  })

  it('history becomes bubbles with thought chains and a summary', () => {
    const messages = historyToMessages({
      id: 'a', title: '', created_at: 1, updated_at: 1, message_count: 3, running: false,
      compressed_context: 'earlier things',
      messages: [
        { role: 'user', content: 'run: echo hi' },
        { role: 'assistant', content: '', tool_calls: [{ tool: 'terminal', input: 'echo hi', output: 'hi' }] },
        { role: 'assistant', content: 'It printed hi.' },
      ],
    })
    expect(messages.map((m) => m.role)).toEqual(['summary', 'user', 'assistant', 'assistant'])
    expect(messages[2].toolCalls).toEqual([{ tool: 'terminal', input: 'echo hi', output: 'hi', done: true }])
  })

  it('the interrupted marker of a history becomes a finished bubble with the notice, not its note', () => {
    const messages = historyToMessages({
      id: 'a', title: '', created_at: 1, updated_at: 1, message_count: 2, running: false,
      compressed_context: '',
      messages: [
        { role: 'user', content: 'python: import time; time.sleep(600)' },
        { role: 'assistant', content: '[interrupted: the server stopped before answering this message]', interrupted: true },
      ],
    })
    expect(messages.map((m) => m.role)).toEqual(['user', 'assistant'])
    expect(messages[1]).toMatchObject({ content: '', interrupted: true, streaming: false, toolCalls: [] })
  })
})
