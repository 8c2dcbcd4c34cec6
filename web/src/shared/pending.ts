// What a paused run waits for: the one JSON shape the server sends for a pending item
// (clawlet.engine.approvals.pending_to_json), snake_case on /api (the workbench) and the same keys
// in camelCase on /api/v1 (the inbox's `waitingFor`).

export type DecisionType = 'approve' | 'edit' | 'reject' | 'answer'

/** A tool call paused for the user's approval. */
export interface PendingTool {
  kind: 'tool'
  approval_id: string
  tool: string
  args: Record<string, unknown>
  /** the model's id for the call the approval belongs to */
  call_id?: string
  /** the arguments as people read them (a command, code, a path…) */
  input: string
  allowed_decisions: DecisionType[]
  description?: string
}

/** A question the agent asks the user (the ask_user tool). */
export interface PendingQuestion {
  kind: 'question'
  approval_id: string
  question: string
  /** the model's id for the ask_user call */
  call_id?: string
  allowed_decisions: DecisionType[]
}

export type PendingItem = PendingTool | PendingQuestion

type Camel<S extends string> = S extends `${infer Head}_${infer Tail}` ? `${Head}${Capitalize<Camel<Tail>>}` : S

/** The same shape with camelCase keys (`approval_id` → `approvalId`), as /api/v1 sends it. */
export type CamelCased<T> = T extends unknown ? { [K in keyof T as K extends string ? Camel<K> : K]: T[K] } : never

/** The user's decision on one pending item, as both APIs take it. */
export interface Decision {
  decision: DecisionType
  /** an edit's arguments (the tool runs with these instead) */
  args?: Record<string, unknown>
  /** an answer, or the reason given with a rejection */
  message?: string
}

/** Where a card stands: `pending` until decided; `sending` while the decision is posted; `decided`
 * (read-only, showing `decision`) once the server took it; `cancelled` when the paused turn was
 * dropped; `gone` when the server no longer knows it. */
export interface CardState {
  status: 'pending' | 'sending' | 'decided' | 'cancelled' | 'gone'
  decision?: Decision
  error?: string
}

/** The same item with snake_case keys again (`approvalId` → `approval_id`; arguments untouched). */
export function snakeCased(item: CamelCased<PendingItem>): PendingItem {
  const entries = Object.entries(item).map(([key, value]) => [key.replace(/[A-Z]/g, (c) => `_${c.toLowerCase()}`), value])
  return Object.fromEntries(entries) as PendingItem
}

/** Parse edited arguments: a JSON object, or the reason it is not one (a message key). */
export function parseArgs(
  text: string,
): { ok: true; args: Record<string, unknown> } | { ok: false; key: 'argsInvalidJson' | 'argsNotObject'; error?: string } {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return { ok: false, key: 'argsInvalidJson', error: error instanceof Error ? error.message : String(error) }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { ok: false, key: 'argsNotObject' }
  return { ok: true, args: value as Record<string, unknown> }
}
