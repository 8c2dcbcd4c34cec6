// The inbox's UI text: its dictionaries (src/locales/inbox.*.json) in the shared i18n core, the
// task statuses' words, relative and clock times, and API failures in words.
import en from '../../locales/inbox.en.json'
import zh from '../../locales/inbox.zh.json'
import { translator } from '../../shared/i18n'
import type { Lang, Vars } from '../../shared/i18n'
import type { TaskStatus } from './types'

export type MessageKey = keyof typeof en

export type Translate = (key: MessageKey, vars?: Vars) => string

export const translate = translator<MessageKey>({ en, zh })

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
