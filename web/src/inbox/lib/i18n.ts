// The inbox's English / Simplified Chinese text (the workbench's approach: one dictionary per
// language, {name} placeholders, the default language from navigator.language).
import { defaultLang } from '../../lib/i18n'
import type { Lang } from '../../lib/i18n'
import type { TaskStatus } from './types'

export { defaultLang }
export type { Lang }

const en = {
  appTitle: 'Agent Inbox',
  agents: 'Agents',
  language: '中文',
  languageLabel: 'Switch language',
  back: 'Back',
  loading: 'Loading…',
  retry: 'Retry',
  dismiss: 'Dismiss',
  cancel: 'Cancel',
  save: 'Save',
  delete: 'Delete',
  close: 'Close',
  default: 'Default',
  defaultModel: 'default model',
  taskCount: '{n} tasks',
  taskCountOne: '1 task',
  noDescription: 'No description',
  newAgent: 'New agent',
  newAgentTitle: 'Create an agent',
  agentId: 'ID',
  agentIdHint: 'Lowercase letters, digits and hyphens, e.g. travel',
  agentName: 'Name',
  agentNamePlaceholder: 'e.g. Travel assistant',
  agentDescription: 'Description',
  agentDescriptionPlaceholder: 'What this agent is for (optional)',
  agentModel: 'Model',
  create: 'Create',
  creating: 'Creating…',
  errIdRequired: 'Enter an ID.',
  errIdPattern: 'Use only lowercase letters, digits and hyphens, starting with a letter or digit.',
  errIdTooLong: 'At most {n} characters.',
  errIdTaken: 'An agent with the ID “{id}” already exists.',
  errNameRequired: 'Enter a name.',
  errTooLong: 'At most {n} characters.',
  agentCreated: 'Agent “{name}” created.',
  agentNotFound: 'There is no agent “{id}”.',
  noAgents: 'No agents yet.',
  newTaskPlaceholder: 'New task for {name}…',
  send: 'Send',
  sending: 'Sending…',
  stop: 'Stop',
  filterAll: 'All',
  filterRunning: 'Running',
  filterWaiting: 'Needs reply',
  filterCompleted: 'Completed',
  emptyAll: 'No tasks yet. Type one above: it starts right away.',
  emptyFiltered: 'No tasks here.',
  you: 'You: ',
  swipeHint: 'Swipe left to delete',
  taskDeleted: 'Task deleted.',
  search: 'Search',
  searchPlaceholder: 'Search titles and messages…',
  searchAllPlaceholder: 'Search all tasks…',
  searchClose: 'Close search',
  noResults: 'No tasks match “{q}”.',
  searching: 'Searching…',
  taskNotFound: 'This task does not exist (it may have been deleted).',
  backToInbox: 'Back to the inbox',
  editTitle: 'Tap to rename',
  titleHint: 'Enter saves, Esc cancels',
  replyPlaceholder: 'Continue the conversation… (Enter to send, Shift+Enter for a new line)',
  busyPlaceholder: 'The agent is working… you can send when it replies',
  cancelledNote: 'This task was cancelled. Start a new task to continue.',
  stopTask: 'Stop this task',
  typing: 'Agent is replying…',
  notSent: 'Not sent: {error}',
  retrySend: 'Tap to retry',
  noMessages: 'No messages yet.',
  live: 'Live',
  reconnecting: 'Reconnecting… (updates still arrive every few seconds)',
  connecting: 'Connecting…',
  offline: 'Offline — showing saved tasks',
  notifications: 'Notify me when tasks finish',
  notificationsOn: 'Notifications are on',
  notificationsBlocked: 'Notifications are blocked in the browser settings',
  notifyDone: 'Task completed',
  notifyFailed: 'Task failed',
  notifyWaiting: 'Task needs your reply',
  crashed: 'Something went wrong',
  crashedBody: 'The page hit an unexpected error: {error}',
  reload: 'Reload',
  pageNotFound: 'This page does not exist.',
  home: 'Go to the agent list',
  errNetwork: 'Cannot reach the clawlet server. Check that it is running, then try again.',
  errTaskBusy: 'The agent is still working on this task; wait for its reply or stop it first.',
  errInvalidTransition: 'This task cannot do that in its current state.',
  errTaskGone: 'This task no longer exists.',
  errAgentGone: 'This agent does not exist.',
  errAgentExists: 'An agent with this ID already exists.',
  errConfigReadOnly: 'openclaw.json has comments (JSON5), so clawlet cannot add agents to it.',
  errConfigInvalid: 'openclaw.json cannot be read.',
  errInvalid: 'The server refused the request: {message}',
  errOther: 'The request failed: {message}',
  just: 'just now',
  minutes: '{n}m',
  hours: '{n}h',
  yesterday: 'yesterday',
  days: '{n}d',
  statusPending: 'Pending',
  statusRunning: 'Running',
  statusWaiting: 'Needs reply',
  statusCompleted: 'Completed',
  statusFailed: 'Failed',
  statusCancelled: 'Cancelled',
  approvalTitle: 'Allow {tool} to run?',
  approve: 'Approve',
  reject: 'Reject',
  rejectReasonPlaceholder: 'Reason for rejecting (optional)',
  approvalHint: 'Nothing runs until you approve. A reason you type is sent with Reject.',
  questionWaiting: 'The agent is waiting for your answer',
  answerPlaceholder: 'Type your answer… (Enter to send)',
  errApprovalDecided: 'This was already answered; the task shows what happened.',
  errApprovalGone: 'The agent is no longer waiting for this.',
  errInvalidDecision: 'That reply does not fit: {message}',
}

export type MessageKey = keyof typeof en

const zh: Record<MessageKey, string> = {
  appTitle: 'Agent 收件箱',
  agents: '智能体',
  language: 'EN',
  languageLabel: '切换语言',
  back: '返回',
  loading: '加载中…',
  retry: '重试',
  dismiss: '关闭',
  cancel: '取消',
  save: '保存',
  delete: '删除',
  close: '关闭',
  default: '默认',
  defaultModel: '默认模型',
  taskCount: '{n} 个任务',
  taskCountOne: '1 个任务',
  noDescription: '暂无描述',
  newAgent: '新建 Agent',
  newAgentTitle: '新建 Agent',
  agentId: 'ID',
  agentIdHint: '小写字母、数字和短横线，例如 travel',
  agentName: '名称',
  agentNamePlaceholder: '例如：旅行助手',
  agentDescription: '描述',
  agentDescriptionPlaceholder: '这个 Agent 用来做什么（可选）',
  agentModel: '模型',
  create: '创建',
  creating: '创建中…',
  errIdRequired: '请输入 ID。',
  errIdPattern: '只能使用小写字母、数字和短横线，并以字母或数字开头。',
  errIdTooLong: '最多 {n} 个字符。',
  errIdTaken: 'ID 为“{id}”的 Agent 已存在。',
  errNameRequired: '请输入名称。',
  errTooLong: '最多 {n} 个字符。',
  agentCreated: '已创建 Agent“{name}”。',
  agentNotFound: '没有名为“{id}”的 Agent。',
  noAgents: '还没有 Agent。',
  newTaskPlaceholder: '给{name}的新任务…',
  send: '发送',
  sending: '发送中…',
  stop: '停止',
  filterAll: '全部',
  filterRunning: '进行中',
  filterWaiting: '需回复',
  filterCompleted: '已完成',
  emptyAll: '还没有任务。在上方输入一个，它会立即开始。',
  emptyFiltered: '这里没有任务。',
  you: '我：',
  swipeHint: '左滑删除',
  taskDeleted: '任务已删除。',
  search: '搜索',
  searchPlaceholder: '搜索标题和消息…',
  searchAllPlaceholder: '搜索全部任务…',
  searchClose: '关闭搜索',
  noResults: '没有与“{q}”匹配的任务。',
  searching: '搜索中…',
  taskNotFound: '此任务不存在（可能已被删除）。',
  backToInbox: '返回收件箱',
  editTitle: '点击修改标题',
  titleHint: 'Enter 保存，Esc 取消',
  replyPlaceholder: '继续对话…（Enter 发送，Shift+Enter 换行）',
  busyPlaceholder: 'Agent 正在处理…回复后即可继续发送',
  cancelledNote: '此任务已取消。请新建任务继续。',
  stopTask: '停止此任务',
  typing: 'Agent 正在回复…',
  notSent: '未发送：{error}',
  retrySend: '点击重试',
  noMessages: '还没有消息。',
  live: '实时',
  reconnecting: '正在重新连接…（更新仍会每隔几秒到达）',
  connecting: '连接中…',
  offline: '离线 —— 显示已保存的任务',
  notifications: '任务完成时通知我',
  notificationsOn: '通知已开启',
  notificationsBlocked: '浏览器设置中已禁止通知',
  notifyDone: '任务已完成',
  notifyFailed: '任务失败',
  notifyWaiting: '任务需要你回复',
  crashed: '出错了',
  crashedBody: '页面遇到意外错误：{error}',
  reload: '重新加载',
  pageNotFound: '页面不存在。',
  home: '前往 Agent 列表',
  errNetwork: '无法连接 clawlet 服务器。请确认它正在运行，然后重试。',
  errTaskBusy: 'Agent 仍在处理此任务；请等待回复或先停止它。',
  errInvalidTransition: '此任务在当前状态下无法执行该操作。',
  errTaskGone: '此任务已不存在。',
  errAgentGone: '此 Agent 不存在。',
  errAgentExists: '该 ID 的 Agent 已存在。',
  errConfigReadOnly: 'openclaw.json 含有注释（JSON5），clawlet 无法向其中添加 Agent。',
  errConfigInvalid: '无法读取 openclaw.json。',
  errInvalid: '服务器拒绝了请求：{message}',
  errOther: '请求失败：{message}',
  just: '刚刚',
  minutes: '{n}分钟前',
  hours: '{n}小时前',
  yesterday: '昨天',
  days: '{n}天前',
  statusPending: '等待执行',
  statusRunning: '进行中',
  statusWaiting: '需回复',
  statusCompleted: '已完成',
  statusFailed: '失败',
  statusCancelled: '已取消',
  approvalTitle: '允许运行 {tool} 吗？',
  approve: '批准',
  reject: '拒绝',
  rejectReasonPlaceholder: '拒绝理由（可选）',
  approvalHint: '你批准之前不会运行任何东西。填写的理由会随“拒绝”一起发送。',
  questionWaiting: 'Agent 正在等待你的回答',
  answerPlaceholder: '输入你的回答…（Enter 发送）',
  errApprovalDecided: '此项已经回答过了；任务中显示了结果。',
  errApprovalGone: 'Agent 已不再等待此项回复。',
  errInvalidDecision: '该回复不适用：{message}',
}

const dictionaries: Record<Lang, Record<MessageKey, string>> = { en, zh }

export type Translate = (key: MessageKey, vars?: Record<string, string | number>) => string

export function translate(lang: Lang, key: MessageKey, vars?: Record<string, string | number>): string {
  let text = dictionaries[lang][key] ?? en[key]
  if (vars) {
    for (const [name, value] of Object.entries(vars)) text = text.replaceAll(`{${name}}`, String(value))
  }
  return text
}

export const STATUS_KEY: Record<TaskStatus, MessageKey> = {
  pending: 'statusPending',
  running: 'statusRunning',
  waiting: 'statusWaiting',
  completed: 'statusCompleted',
  failed: 'statusFailed',
  cancelled: 'statusCancelled',
}

/** A short relative time: "just now", "5m", "3h", "yesterday", "4d", then the date. */
export function relativeTime(lang: Lang, then: number, now: number = Date.now()): string {
  const t: Translate = (key, vars) => translate(lang, key, vars)
  const seconds = Math.max(0, Math.round((now - then) / 1000))
  if (seconds < 60) return t('just')
  const minutes = Math.floor(seconds / 60)
  if (minutes < 60) return t('minutes', { n: minutes })
  const hours = Math.floor(minutes / 60)
  const day = (ms: number) => {
    const d = new Date(ms)
    return new Date(d.getFullYear(), d.getMonth(), d.getDate()).getTime()
  }
  const days = Math.round((day(now) - day(then)) / 86_400_000)
  if (days === 0) return t('hours', { n: hours })
  if (days === 1) return t('yesterday')
  if (days < 7) return t('days', { n: days })
  const date = new Date(then)
  const sameYear = date.getFullYear() === new Date(now).getFullYear()
  if (lang === 'zh') return sameYear ? `${date.getMonth() + 1}月${date.getDate()}日` : `${date.getFullYear()}/${date.getMonth() + 1}/${date.getDate()}`
  return date.toLocaleDateString('en-US', sameYear ? { month: 'short', day: 'numeric' } : { year: 'numeric', month: 'short', day: 'numeric' })
}

/** A message's clock time, "14:05". */
export function clockTime(then: number): string {
  const date = new Date(then)
  return `${String(date.getHours()).padStart(2, '0')}:${String(date.getMinutes()).padStart(2, '0')}`
}

/** The text to show for an API failure: a sentence for known codes, else the server's words. */
export function errorText(t: Translate, error: unknown): string {
  if (error && typeof error === 'object' && 'code' in error) {
    const { code, message } = error as { code: string; message: string }
    switch (code) {
      case 'network':
        return t('errNetwork')
      case 'task_busy':
        return t('errTaskBusy')
      case 'invalid_transition':
        return t('errInvalidTransition')
      case 'task_not_found':
        return t('errTaskGone')
      case 'approval_decided':
        return t('errApprovalDecided')
      case 'approval_not_found':
        return t('errApprovalGone')
      case 'invalid_decision':
        return t('errInvalidDecision', { message })
      case 'agent_not_found':
        return t('errAgentGone')
      case 'agent_exists':
        return t('errAgentExists')
      case 'openclaw_config_not_rewritable':
        return t('errConfigReadOnly')
      case 'openclaw_config_invalid':
        return `${t('errConfigInvalid')} ${message}`
      case 'invalid_request':
        return t('errInvalid', { message })
      default:
        return t('errOther', { message })
    }
  }
  return t('errOther', { message: error instanceof Error ? error.message : String(error) })
}
