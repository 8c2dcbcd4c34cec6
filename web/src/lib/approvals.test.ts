import { describe, expect, it } from 'vitest'
import { parseChatEvent } from './api'
import { parseArgs } from '../shared/pending'
import { SSEParser } from './sse'
import type { SSEMessage } from './sse'
import { historyToMessages, renderToolInput } from './chat'
import { initialState, reducer } from './reducer'
import type { Action, WorkbenchState } from './reducer'
import type { PendingQuestion, PendingTool } from '../shared/pending'
import type { ChatEvent } from './types'

function run(state: WorkbenchState, ...actions: Action[]): WorkbenchState {
  return actions.reduce(reducer, state)
}
const ev = (event: ChatEvent): Action => ({ type: 'event', event })

const TOOL: PendingTool = {
  kind: 'tool',
  approval_id: 'ap1',
  tool: 'terminal',
  args: { command: 'echo hi >> a.txt' },
  call_id: 'call_1',
  input: 'echo hi >> a.txt',
  allowed_decisions: ['approve', 'edit', 'reject'],
  description: 'terminal: echo hi >> a.txt',
}
const QUESTION: PendingQuestion = {
  kind: 'question',
  approval_id: 'q1',
  question: '你喜欢什么颜色？',
  call_id: 'call_2',
  allowed_decisions: ['answer', 'reject'],
}
const { kind: _tk, ...toolFields } = TOOL
const { kind: _qk, ...questionFields } = QUESTION

function base(): WorkbenchState {
  return run(
    initialState({ theme: 'light', lang: 'en' }),
    { type: 'sessions', sessions: [{ id: 'a', title: '', created_at: 1, updated_at: 1, message_count: 0 }] },
    { type: 'select', id: 'a' },
    { type: 'send', text: 'run: echo hi >> a.txt' },
  )
}

/** A turn paused for approval, as the stream delivers it. */
function paused(): WorkbenchState {
  return run(
    base(),
    ev({ type: 'token', content: 'Running it.' }),
    ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi >> a.txt' }),
    ev({ type: 'approval_required', ...toolFields }),
    ev({ type: 'waiting', content: 'Running it.', session_id: 'a', pending: [TOOL] }),
  )
}

describe('the approval events in the SSE stream', () => {
  it('parses approval_required, question and waiting frames into chat events', () => {
    const seen: SSEMessage[] = []
    const parser = new SSEParser((m) => seen.push(m))
    const frames =
      `event: approval_required\ndata: ${JSON.stringify({ type: 'approval_required', ...toolFields })}\n\n` +
      `event: question\ndata: ${JSON.stringify({ type: 'question', ...questionFields })}\n\n` +
      `event: waiting\ndata: ${JSON.stringify({ type: 'waiting', content: '', session_id: 'a', pending: [TOOL, QUESTION] })}\n\n`
    // split in the middle of a multi-byte character
    const bytes = new TextEncoder().encode(frames)
    const cut = new TextEncoder().encode(frames.slice(0, frames.indexOf('颜'))).length + 1
    parser.feed(bytes.slice(0, cut))
    parser.feed(bytes.slice(cut))
    parser.end()
    const events = seen.map((m) => parseChatEvent(m.event, m.data))
    expect(events.map((e) => e?.type)).toEqual(['approval_required', 'question', 'waiting'])
    expect(events[0]).toMatchObject({ approval_id: 'ap1', tool: 'terminal', args: { command: 'echo hi >> a.txt' } })
    expect(events[1]).toMatchObject({ approval_id: 'q1', question: '你喜欢什么颜色？' })
    expect(events[2]).toMatchObject({ session_id: 'a', pending: [{ kind: 'tool' }, { kind: 'question' }] })
  })

  it('takes the type from the event name when the data has none, and skips what is not JSON', () => {
    expect(parseChatEvent('waiting', '{"session_id": "a", "content": "", "pending": []}')?.type).toBe('waiting')
    expect(parseChatEvent('token', 'not json')).toBeNull()
    expect(parseChatEvent('token', '[1, 2]')).toBeNull()
  })
})

describe('the reducer with approvals', () => {
  it('approval_required puts a card on the bubble and marks the call as awaiting', () => {
    const s = run(
      base(),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi >> a.txt' }),
      ev({ type: 'approval_required', ...toolFields }),
    )
    const bubble = s.messages[1]
    expect(bubble.approvals).toEqual([{ item: TOOL, status: 'pending' }])
    expect(bubble.toolCalls[0]).toMatchObject({ tool: 'terminal', done: false, awaiting: true })
    expect(s.streaming).toBe(true)
  })

  it('waiting ends the stream without an error and marks the session as waiting', () => {
    const s = paused()
    expect(s.streaming).toBe(false)
    expect(s.waiting).toEqual({ a: true })
    expect(s.messages.every((m) => !m.streaming && !m.error)).toBe(true)
    expect(s.messages[1].approvals).toHaveLength(1) // the card is not duplicated by waiting's pending
  })

  it('waiting adds cards for pending items the stream did not announce', () => {
    const s = run(base(), ev({ type: 'waiting', content: '', session_id: 'a', pending: [QUESTION] }))
    expect(s.messages[1].approvals).toEqual([{ item: QUESTION, status: 'pending' }])
  })

  it('a question becomes a question card', () => {
    const s = run(
      base(),
      ev({ type: 'tool_start', tool: 'ask_user', input: QUESTION.question }),
      ev({ type: 'question', ...questionFields }),
    )
    expect(s.messages[1].approvals?.[0]).toEqual({ item: QUESTION, status: 'pending' })
    expect(s.messages[1].toolCalls[0].awaiting).toBe(true)
  })

  it('approving streams the continuation into the same conversation and locks the card', () => {
    let s = run(paused(), { type: 'decide_start', approvalId: 'ap1', decision: { decision: 'approve' } })
    expect(s.streaming).toBe(true)
    expect(s.waiting).toEqual({})
    expect(s.messages[1].approvals?.[0]).toMatchObject({ status: 'sending', decision: { decision: 'approve' } })
    expect(s.messages[1].toolCalls[0].awaiting).toBeUndefined()
    expect(s.messages[1].streaming).toBe(true)
    s = run(
      s,
      { type: 'decide_accepted', approvalId: 'ap1' },
      ev({ type: 'tool_end', tool: 'terminal', output: '(no output)', is_error: false }),
      ev({ type: 'new_response' }),
      ev({ type: 'token', content: '[demo] done' }),
      ev({ type: 'done', content: '[demo] done', session_id: 'a' }),
    )
    expect(s.messages.map((m) => m.role)).toEqual(['user', 'assistant', 'assistant'])
    expect(s.messages[1].toolCalls[0]).toMatchObject({ output: '(no output)', done: true })
    expect(s.messages[1].approvals?.[0].status).toBe('decided')
    expect(s.messages[2].content).toBe('[demo] done')
    expect(s.streaming).toBe(false)
    expect(s.waiting).toEqual({})
  })

  it('an edit shows the edited input on the paused call', () => {
    const s = run(paused(), {
      type: 'decide_start',
      approvalId: 'ap1',
      decision: { decision: 'edit', args: { command: 'echo edited' } },
    })
    expect(s.messages[1].toolCalls[0].input).toBe('echo edited')
    expect(s.messages[1].approvals?.[0].decision).toEqual({ decision: 'edit', args: { command: 'echo edited' } })
  })

  it('a refused decision reopens the card with the error, or shows it was decided elsewhere', () => {
    const start: Action = { type: 'decide_start', approvalId: 'ap1', decision: { decision: 'approve' } }
    const busy = run(paused(), start, {
      type: 'decide_failed',
      approvalId: 'ap1',
      status: 'pending',
      error: 'session is still answering',
    })
    expect(busy.messages[1].approvals?.[0]).toMatchObject({ status: 'pending', error: 'session is still answering' })
    expect(busy.messages[1].approvals?.[0].decision).toBeUndefined()
    expect(busy.messages[1].toolCalls[0].awaiting).toBe(true)
    expect(busy.streaming).toBe(false)
    expect(busy.waiting).toEqual({ a: true })

    const decided = run(paused(), start, {
      type: 'decide_failed',
      approvalId: 'ap1',
      status: 'decided',
      error: 'already decided (reject)',
      decision: { decision: 'reject' },
    })
    expect(decided.messages[1].approvals?.[0]).toMatchObject({ status: 'decided', decision: { decision: 'reject' } })
    expect(decided.waiting).toEqual({})
  })

  it('a tool_end goes to the running call, not to another one still awaiting approval', () => {
    const other: PendingTool = { ...TOOL, approval_id: 'ap2', input: 'echo two', args: { command: 'echo two' } }
    const { kind: _k, ...otherFields } = other
    let s = run(
      base(),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi >> a.txt' }),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo two' }),
      ev({ type: 'approval_required', ...toolFields }),
      ev({ type: 'approval_required', ...otherFields }),
      ev({ type: 'waiting', content: '', session_id: 'a', pending: [TOOL, other] }),
    )
    expect(s.messages[1].toolCalls.map((c) => c.awaiting)).toEqual([true, true])
    // a card pairs with the call of the same input, not just the last call of that tool
    const one = run(
      base(),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi >> a.txt' }),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo two' }),
      ev({ type: 'approval_required', ...toolFields }),
    )
    expect(one.messages[1].toolCalls.map((c) => !!c.awaiting)).toEqual([true, false])
    s = run(
      s,
      { type: 'decide_start', approvalId: 'ap1', decision: { decision: 'approve' } },
      ev({ type: 'tool_end', tool: 'terminal', output: 'ok' }),
      ev({ type: 'waiting', content: '', session_id: 'a', pending: [other] }),
    )
    expect(s.messages[1].toolCalls[0]).toMatchObject({ input: 'echo hi >> a.txt', output: 'ok', done: true })
    expect(s.messages[1].toolCalls[1]).toMatchObject({ input: 'echo two', done: false, awaiting: true })
    expect(s.waiting).toEqual({ a: true })
  })

  it('pairs two calls of one tool in one message by call_id, whatever their order or input', () => {
    const second: PendingTool = { ...TOOL, approval_id: 'ap2', call_id: 'call_b' }
    const { kind: _k, ...secondFields } = second
    let s = run(
      base(),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi >> a.txt', call_id: 'call_a' }),
      ev({ type: 'tool_start', tool: 'terminal', input: 'echo hi >> a.txt', call_id: 'call_b' }),
      ev({ type: 'approval_required', ...secondFields }),
    )
    // the card belongs to the second call although both have the same tool and input
    expect(s.messages[1].toolCalls.map((c) => !!c.awaiting)).toEqual([false, true])
    s = run(
      s,
      ev({ type: 'tool_end', tool: 'terminal', output: 'ran a', call_id: 'call_a' }),
      { type: 'decide_start', approvalId: 'ap2', decision: { decision: 'approve' } },
      ev({ type: 'tool_end', tool: 'terminal', output: 'ran b', call_id: 'call_b' }),
    )
    expect(s.messages[1].toolCalls.map((c) => [c.callId, c.output, c.done])).toEqual([
      ['call_a', 'ran a', true],
      ['call_b', 'ran b', true],
    ])
    // results in the reverse order of the calls still go to their own call
    const reversed = run(
      base(),
      ev({ type: 'tool_start', tool: 'read_file', input: 'one.txt', call_id: 'c1' }),
      ev({ type: 'tool_start', tool: 'read_file', input: 'two.txt', call_id: 'c2' }),
      ev({ type: 'tool_end', tool: 'read_file', output: 'second', call_id: 'c2' }),
      ev({ type: 'tool_end', tool: 'read_file', output: 'first', call_id: 'c1' }),
    )
    expect(reversed.messages[1].toolCalls.map((c) => [c.input, c.output])).toEqual([
      ['one.txt', 'first'],
      ['two.txt', 'second'],
    ])
  })

  it('a stored transcript pairs a pending item with its call by call_id', () => {
    const second: PendingTool = { ...TOOL, approval_id: 'ap2', call_id: 'call_b' }
    const history = {
      id: 'a',
      title: '',
      created_at: 1,
      updated_at: 1,
      message_count: 2,
      compressed_context: '',
      running: false,
      waiting: true,
      messages: [
        { role: 'user', content: 'go' },
        {
          role: 'assistant',
          content: '',
          tool_calls: [
            { tool: 'terminal', input: 'echo hi >> a.txt', output: '', call_id: 'call_b' },
            { tool: 'terminal', input: 'echo hi >> a.txt', output: '', call_id: 'call_a' },
          ],
        },
      ],
    }
    const messages = historyToMessages(history, [second])
    expect(messages[1].toolCalls.map((c) => [c.callId, !!c.awaiting])).toEqual([
      ['call_b', true],
      ['call_a', false],
    ])
  })

  it('cancelling the waiting turn closes its cards', () => {
    const s = run(paused(), { type: 'waiting_cancelled', sessionId: 'a' })
    expect(s.waiting).toEqual({})
    expect(s.messages[1].approvals?.[0].status).toBe('cancelled')
    expect(s.messages[1].toolCalls[0]).toMatchObject({ done: true })
    expect(s.messages[1].toolCalls[0].awaiting).toBeUndefined()
  })

  it('opening a waiting session shows its pending cards on the paused call', () => {
    const history = {
      id: 'a', title: '', created_at: 1, updated_at: 1, message_count: 2, running: false, waiting: true,
      compressed_context: '',
      messages: [
        { role: 'user', content: 'run: echo hi >> a.txt' },
        { role: 'assistant', content: 'Running it.', tool_calls: [{ tool: 'terminal', input: 'echo hi >> a.txt', output: '' }] },
      ],
    }
    const s = run(initialState({}), { type: 'select', id: 'a', history, pending: [TOOL] })
    expect(s.waiting).toEqual({ a: true })
    expect(s.messages[1].toolCalls[0]).toMatchObject({ done: false, awaiting: true })
    expect(s.messages[1].approvals).toEqual([{ item: TOOL, status: 'pending' }])
    // and a question with no matching call still gets a bubble of its own
    const q = historyToMessages({ ...history, messages: [{ role: 'user', content: 'ask: ?' }] }, [QUESTION])
    expect(q.map((m) => m.role)).toEqual(['user', 'assistant'])
    expect(q[1].approvals?.[0].item).toEqual(QUESTION)
    // a session that no longer waits is not marked
    const done = run(s, { type: 'select', id: 'a', history: { ...history, waiting: false } })
    expect(done.waiting).toEqual({ a: false })
    expect(done.messages[1].approvals).toBeUndefined()
  })
})

describe('the argument editor', () => {
  it('accepts a JSON object only', () => {
    expect(parseArgs('{"command": "echo 你好"}')).toEqual({ ok: true, args: { command: 'echo 你好' } })
    expect(parseArgs('{"command": ')).toMatchObject({ ok: false, key: 'argsInvalidJson' })
    expect(parseArgs('["ls"]')).toEqual({ ok: false, key: 'argsNotObject' })
    expect(parseArgs('null')).toEqual({ ok: false, key: 'argsNotObject' })
    expect(parseArgs('"ls"')).toEqual({ ok: false, key: 'argsNotObject' })
  })

  it('renders a tool input as the server does', () => {
    expect(renderToolInput({ command: 'ls -la' })).toBe('ls -la')
    expect(renderToolInput({ n: 3 })).toBe('3')
    expect(renderToolInput({ a: 1, b: 'x' })).toBe('{"a":1,"b":"x"}')
  })
})

describe('waiting sessions in the session list', () => {
  it('marks the sessions the server says are waiting, and clears the ones that no longer are', () => {
    const base = { created_at: 1, updated_at: 1, message_count: 2, title: '' }
    let state = reducer(initialState(), {
      type: 'sessions',
      sessions: [
        { ...base, id: 'a', waiting: true },
        { ...base, id: 'b', waiting: false },
      ],
    })
    expect(state.waiting).toEqual({ a: true, b: false })
    state = reducer(state, { type: 'sessions', sessions: [{ ...base, id: 'a', waiting: false }, { ...base, id: 'c' }] })
    expect(state.waiting.a).toBe(false)
    expect(state.waiting.c).toBeUndefined()
  })
})
