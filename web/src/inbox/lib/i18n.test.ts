import { describe, expect, it } from 'vitest'
import { AGENT_ID_MAX } from './api'
import { errorText, relativeTime, translate } from './i18n'
import type { Translate } from './i18n'
import { validateAgent } from './validate'

const t: Translate = (key, vars) => translate('en', key, vars)
const zh: Translate = (key, vars) => translate('zh', key, vars)

describe('relative time', () => {
  const now = new Date(2026, 1, 15, 12, 0, 0).getTime()
  it('in English and Chinese', () => {
    expect(relativeTime('en', now - 10_000, now)).toBe('just now')
    expect(relativeTime('en', now - 2 * 60_000, now)).toBe('2m')
    expect(relativeTime('zh', now - 2 * 60_000, now)).toBe('2分钟前')
    expect(relativeTime('zh', now - 3 * 3600_000, now)).toBe('3小时前')
    expect(relativeTime('zh', now - 24 * 3600_000, now)).toBe('昨天')
    expect(relativeTime('en', now - 3 * 86_400_000, now)).toBe('3d')
    expect(relativeTime('zh', new Date(2026, 0, 2).getTime(), now)).toBe('1月2日')
  })
})

describe('agent form validation', () => {
  const draft = { id: 'travel', name: '旅行助手', description: '', model: '' }
  it('accepts what the server accepts', () => {
    expect(validateAgent(draft, ['main'], t)).toEqual({})
    expect(validateAgent({ ...draft, id: '0-a' }, [], t)).toEqual({})
  })
  it('rejects what the server rejects, with a reason', () => {
    expect(validateAgent({ ...draft, id: '' }, [], t).id).toBe('Enter an ID.')
    expect(validateAgent({ ...draft, id: 'Travel' }, [], t).id).toMatch(/lowercase/)
    expect(validateAgent({ ...draft, id: '-x' }, [], t).id).toMatch(/lowercase/)
    expect(validateAgent({ ...draft, id: 'a_b' }, [], t).id).toMatch(/lowercase/)
    expect(validateAgent({ ...draft, id: 'a'.repeat(AGENT_ID_MAX + 1) }, [], t).id).toMatch(/64/)
    expect(validateAgent({ ...draft, id: 'main' }, ['main'], zh).id).toBe('ID 为“main”的 Agent 已存在。')
    expect(validateAgent({ ...draft, name: '  ' }, [], t).name).toBe('Enter a name.')
    expect(validateAgent({ ...draft, name: 'x'.repeat(101) }, [], t).name).toMatch(/100/)
    expect(validateAgent({ ...draft, description: 'x'.repeat(501) }, [], t).description).toMatch(/500/)
  })
})

describe('error messages', () => {
  it('say what happened', () => {
    expect(errorText(t, { code: 'network', message: 'Failed to fetch' })).toMatch(/Cannot reach/)
    expect(errorText(zh, { code: 'task_busy', message: 'x' })).toMatch(/仍在处理/)
    expect(errorText(t, { code: 'invalid_request', message: 'title must not be blank' })).toMatch(/title must not be blank/)
    expect(errorText(t, new Error('boom'))).toBe('The request failed: boom')
    expect(errorText(t, { code: 'approval_decided', message: 'x' })).toMatch(/already answered/)
    expect(errorText(zh, { code: 'approval_not_found', message: 'x' })).toBe('Agent 已不再等待此项回复。')
    expect(errorText(t, { code: 'invalid_decision', message: 'an answer needs a non-empty message' })).toMatch(/non-empty/)
  })
})

describe('approval strings', () => {
  it('name the tool in both languages', () => {
    expect(t('approvalTitle', { tool: 'terminal' })).toBe('Allow terminal to run?')
    expect(zh('approvalTitle', { tool: 'terminal' })).toBe('允许运行 terminal 吗？')
    expect([zh('approve'), zh('reject'), zh('statusWaiting'), zh('filterWaiting')]).toEqual(['批准', '拒绝', '需回复', '需回复'])
  })
})
