// A small English / Simplified Chinese dictionary for the workbench's UI text.

export type Lang = 'en' | 'zh'

const en = {
  appName: 'clawlet',
  workbench: 'workbench',
  model: 'Model',
  demoBadge: 'DEMO',
  demoHint: 'Offline demo model — no LLM is configured',
  rag: 'RAG',
  ragOn: 'RAG mode on: memory is retrieved per message',
  ragOff: 'RAG mode off: MEMORY.md is in the system prompt',
  tokens: 'tokens',
  tokensTitle: 'Session context: system {system} + messages {messages}',
  themeLight: 'Light theme',
  themeDark: 'Dark theme',
  language: '中文',
  sessions: 'Sessions',
  newSession: 'New chat',
  untitled: 'New conversation',
  rename: 'Rename',
  delete: 'Delete',
  save: 'Save',
  cancel: 'Cancel',
  confirm: 'Confirm',
  rawMessages: 'Raw Messages',
  backToChat: 'Back to chat',
  rawHint: 'Exactly what the model sees: the system prompt, then the merged history.',
  deleteTitle: 'Delete this session?',
  deleteBody: 'The transcript "{title}" will be removed from sessions/.',
  noSessions: 'No sessions yet.',
  emptyChat: 'Ask anything. Try “run: echo hi”, “remember: …” or a question about the weather.',
  placeholder: 'Message clawlet… (Enter to send, Shift+Enter for a new line)',
  send: 'Send',
  stop: 'Stop',
  thoughtChain: 'Thought chain · {n} tool call(s)',
  input: 'Input',
  output: 'Output',
  running: 'running…',
  retrieval: 'Retrieved from memory · {n} result(s)',
  query: 'Query',
  cancelled: 'Stopped — the partial answer was kept.',
  compress: 'Compress history',
  compressTitle: 'Compress this session?',
  compressBody:
    'The first half of the conversation is summarised by the model and archived to sessions/archive/. The summary stays in the context.',
  compressed: 'Compressed: {archived} messages archived, {remaining} remain.',
  summary: 'Summary of earlier conversation',
  inspector: 'Inspector',
  files: 'Files',
  skills: 'Skills',
  unsaved: 'unsaved',
  saved: 'Saved {path}',
  available: 'available',
  unavailable: 'unavailable',
  missing: 'missing: {items}',
  problems: 'Malformed skills',
  loading: 'Loading…',
  fileMissing: 'This file does not exist yet; saving creates it.',
  error: 'Error',
  dismiss: 'Dismiss',
}

export type MessageKey = keyof typeof en

const zh: Record<MessageKey, string> = {
  appName: 'clawlet',
  workbench: '工作台',
  model: '模型',
  demoBadge: '演示',
  demoHint: '离线演示模型 —— 未配置 LLM',
  rag: 'RAG',
  ragOn: 'RAG 模式开启：每条消息检索记忆',
  ragOff: 'RAG 模式关闭：MEMORY.md 位于系统提示词中',
  tokens: '令牌',
  tokensTitle: '会话上下文：系统 {system} + 消息 {messages}',
  themeLight: '浅色主题',
  themeDark: '深色主题',
  language: 'EN',
  sessions: '会话',
  newSession: '新对话',
  untitled: '新的对话',
  rename: '重命名',
  delete: '删除',
  save: '保存',
  cancel: '取消',
  confirm: '确认',
  rawMessages: '原始消息',
  backToChat: '返回对话',
  rawHint: '模型实际看到的内容：系统提示词，然后是合并后的历史。',
  deleteTitle: '删除此会话？',
  deleteBody: '会话记录“{title}”将从 sessions/ 中删除。',
  noSessions: '还没有会话。',
  emptyChat: '随便问吧。试试“run: echo hi”、“remember: …”或者问问天气。',
  placeholder: '给 clawlet 发消息…（Enter 发送，Shift+Enter 换行）',
  send: '发送',
  stop: '停止',
  thoughtChain: '思维链 · {n} 次工具调用',
  input: '输入',
  output: '输出',
  running: '运行中…',
  retrieval: '记忆检索 · {n} 条结果',
  query: '查询',
  cancelled: '已停止 —— 已保留部分回答。',
  compress: '压缩历史',
  compressTitle: '压缩此会话？',
  compressBody: '对话的前半部分将由模型总结并归档到 sessions/archive/，摘要保留在上下文中。',
  compressed: '已压缩：归档 {archived} 条消息，剩余 {remaining} 条。',
  summary: '之前对话的摘要',
  inspector: '检查器',
  files: '文件',
  skills: '技能',
  unsaved: '未保存',
  saved: '已保存 {path}',
  available: '可用',
  unavailable: '不可用',
  missing: '缺少：{items}',
  problems: '格式错误的技能',
  loading: '加载中…',
  fileMissing: '此文件尚不存在，保存时将创建。',
  error: '错误',
  dismiss: '关闭',
}

const dictionaries: Record<Lang, Record<MessageKey, string>> = { en, zh }

export function translate(lang: Lang, key: MessageKey, vars?: Record<string, string | number>): string {
  let text = dictionaries[lang][key] ?? en[key]
  if (vars) {
    for (const [name, value] of Object.entries(vars)) text = text.replaceAll(`{${name}}`, String(value))
  }
  return text
}

export function defaultLang(): Lang {
  if (typeof navigator !== 'undefined' && navigator.language?.toLowerCase().startsWith('zh')) return 'zh'
  return 'en'
}
