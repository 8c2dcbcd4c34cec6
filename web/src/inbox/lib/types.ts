// The inbox API's shapes (clawlet /api/v1, the Agent Inbox seed's camelCase JSON).
import type { CamelCased, Decision, PendingItem, PendingQuestion, PendingTool } from '../../shared/pending'

export type TaskStatus = 'pending' | 'running' | 'completed' | 'failed' | 'waiting' | 'cancelled'
export type SenderType = 'user' | 'agent'

export const STATUSES: TaskStatus[] = ['running', 'waiting', 'pending', 'completed', 'failed', 'cancelled']

export interface Agent {
  id: string
  name: string
  description?: string | null
  model?: string | null
  isDefault: boolean
  createdAt: number
  updatedAt: number
  taskCount: number
}

export interface Model {
  id: string
  name: string
  provider: string
}

export interface MessagePreview {
  senderType: SenderType
  content: string
  timestamp: number
}

/** A tool call waiting for the user's approval before it runs. */
export type ToolApproval = CamelCased<PendingTool>
/** A question the agent asked the user (the ask_user tool). */
export type AgentQuestion = CamelCased<PendingQuestion>
export type Pending = CamelCased<PendingItem>
/** A decision on one pending item, as /api/v1 takes it (the workbench's shape). */
export type { Decision }

export interface Task {
  id: string
  agentId: string
  title: string
  titleLocked: boolean
  status: TaskStatus
  createdAt: number
  updatedAt: number
  completedAt?: number | null
  /** In a list: the newest message, cut to 140 characters. */
  lastMessage?: MessagePreview
  /** In a search result: the first matching message. */
  match?: { messageId: string; snippet: string }
  /** A waiting task: what its run waits for (oldest first); absent otherwise. */
  waitingFor?: Pending[]
}

export interface Message {
  id: string
  taskId: string
  senderType: SenderType
  content: string
  timestamp: number
}

/** A message as the UI holds it: optimistic user messages carry a temporary id and a state. */
export interface ClientMessage extends Message {
  pending?: 'sending' | 'failed'
  error?: string
}

export interface DeltaEvent {
  taskId: string
  content: string
}

export interface DeletedEvent {
  id: string
  agentId?: string
}
