// Shapes of the clawlet /api payloads and the workbench's chat model.
import type { CardState, Decision, PendingItem, PendingQuestion, PendingTool } from '../shared/pending'

export interface SessionSummary {
  id: string
  title: string
  created_at: number
  updated_at: number
  message_count: number
  /** the session waits for an approval or an answer (GET /api/sessions) */
  waiting?: boolean
}

export interface StoredToolCall {
  tool: string
  input: string
  output: string
  /** the model's id for the call: pairs it with a pending approval */
  call_id?: string
  is_error?: boolean
}

export interface StoredMessage {
  role: string
  content: string
  tool_calls?: StoredToolCall[]
  /** the marker after a user message the server stopped before answering (added when it restarts) */
  interrupted?: boolean
}

export interface SessionHistory extends SessionSummary {
  compressed_context: string
  messages: StoredMessage[]
  running: boolean
  /** The session waits for approvals or answers (GET /sessions/{id}/approvals lists them). */
  waiting?: boolean
}

export interface RawMessages {
  session_id: string
  system_prompt: string
  messages: { role: string; content: string }[]
}

export interface RetrievalResult {
  text: string
  score: number
  source: string
}

export interface Status {
  version: string
  model: { provider: string; name: string; label: string; is_demo: boolean }
  home: string
  rag_mode: boolean
}

export interface SessionTokens {
  session_id: string
  system_tokens: number
  message_tokens: number
  total_tokens: number
}

export interface Skill {
  name: string
  description: string
  location: string
  available: boolean
  missing: string[]
  emoji: string | null
}

export interface SkillsResponse {
  skills: Skill[]
  problems: { location: string; error: string }[]
}

export interface CompressResult {
  archived_count: number
  remaining_count: number
  summary: string
}

export type Policy = 'allow' | 'ask' | 'deny'

/** GET/PUT /api/config/tool-approvals. */
export interface ToolApprovals {
  workspace: string
  listens_beyond_loopback: boolean
  /** what applies to every tool now */
  policies: Record<string, Policy>
  /** the workspace's own config.json entries */
  configured: Record<string, Policy>
  inherited: Record<string, Policy>
  defaults: Record<string, Policy>
}

/** GET /api/sessions/{id}/approvals. */
export interface SessionApprovals {
  session_id: string
  waiting: boolean
  running: boolean
  pending: PendingItem[]
}

/** The body of POST /api/sessions/{id}/approvals/{approval_id} (without `stream`). */
export type { Decision }

/** One SSE event of POST /api/chat, as the server sends it. */
export type ChatEvent =
  | { type: 'retrieval'; query: string; results: RetrievalResult[] }
  | { type: 'token'; content: string }
  | { type: 'tool_start'; tool: string; input: string; call_id?: string }
  | { type: 'tool_end'; tool: string; output: string; is_error?: boolean; call_id?: string }
  | { type: 'new_response' }
  | { type: 'done'; content: string; session_id: string; cancelled?: boolean }
  | { type: 'title'; session_id: string; title: string }
  | { type: 'error'; error: string }
  | ({ type: 'approval_required' } & Omit<PendingTool, 'kind'>)
  | ({ type: 'question' } & Omit<PendingQuestion, 'kind'>)
  | { type: 'waiting'; content: string; session_id: string; pending: PendingItem[] }

export interface ToolCallView {
  tool: string
  input: string
  /** the model's id for the call (tool_start, tool_end and a pending item carry it; absent from
   * older servers, which are paired by tool name and input instead) */
  callId?: string
  output?: string
  isError?: boolean
  done: boolean
  /** paused until the user decides (an approval card or a question card shows it) */
  awaiting?: boolean
}

/** An approval or question card in an assistant bubble (its states: {@link CardState}). */
export interface ApprovalCard extends CardState {
  item: PendingItem
}

export interface ChatMessage {
  id: string
  role: 'user' | 'assistant' | 'summary'
  content: string
  toolCalls: ToolCallView[]
  retrievals: { query: string; results: RetrievalResult[] }[]
  streaming: boolean
  error?: string
  cancelled?: boolean
  /** the server stopped before answering the user message above (a stored marker) */
  interrupted?: boolean
  approvals?: ApprovalCard[]
}
