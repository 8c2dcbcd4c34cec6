// Shapes of the clawlet /api payloads and the workbench's chat model.

export interface SessionSummary {
  id: string
  title: string
  created_at: number
  updated_at: number
  message_count: number
}

export interface StoredToolCall {
  tool: string
  input: string
  output: string
}

export interface StoredMessage {
  role: string
  content: string
  tool_calls?: StoredToolCall[]
}

export interface SessionHistory extends SessionSummary {
  compressed_context: string
  messages: StoredMessage[]
  running: boolean
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

/** One SSE event of POST /api/chat, as the server sends it. */
export type ChatEvent =
  | { type: 'retrieval'; query: string; results: RetrievalResult[] }
  | { type: 'token'; content: string }
  | { type: 'tool_start'; tool: string; input: string }
  | { type: 'tool_end'; tool: string; output: string; is_error?: boolean }
  | { type: 'new_response' }
  | { type: 'done'; content: string; session_id: string; cancelled?: boolean }
  | { type: 'title'; session_id: string; title: string }
  | { type: 'error'; error: string }

export interface ToolCallView {
  tool: string
  input: string
  output?: string
  isError?: boolean
  done: boolean
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
}
