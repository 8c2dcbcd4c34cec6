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
