// The workbench's chat as bubbles: a stored transcript turned into bubbles, and the pure changes the
// reducer makes to them (tool calls, approval and question cards). No React, no state.
import type { PendingItem } from '../shared/pending'
import type { ApprovalCard, ChatMessage, SessionHistory, ToolCallView } from './types'

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

export function hasCard(messages: ChatMessage[], approvalId: string): boolean {
  return messages.some((m) => (m.approvals ?? []).some((c) => c.item.approval_id === approvalId))
}

/** The call with this call id that `usable` accepts; -1 if there is no id or no such call. */
export function callById(calls: ToolCallView[], callId: string | undefined, usable: (call: ToolCallView) => boolean): number {
  if (!callId) return -1
  return calls.findIndex((call) => call.callId === callId && usable(call))
}

/** The awaiting call a pending item paused: the one with its call id, else the same tool,
 * preferably the same input; -1 if none. */
export function awaitingCall(calls: ToolCallView[], item: PendingItem): number {
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
export function markAwaiting(calls: ToolCallView[], item: PendingItem): ToolCallView[] {
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

export function withCard(message: ChatMessage, item: PendingItem): ChatMessage {
  const card: ApprovalCard = { item, status: 'pending' }
  return { ...message, toolCalls: markAwaiting(message.toolCalls, item), approvals: [...(message.approvals ?? []), card] }
}

/** Change one card (found by its approval id) wherever it is. */
export function updateCard(
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

/** The bubbles with none streaming any more. */
export function settled(messages: ChatMessage[]): ChatMessage[] {
  return messages.map((m) => (m.streaming ? { ...m, streaming: false } : m))
}

export function updateLastAssistant(messages: ChatMessage[], change: (m: ChatMessage) => ChatMessage): ChatMessage[] {
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
