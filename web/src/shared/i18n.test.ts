import { describe, expect, it } from 'vitest'
import authEn from '../locales/auth.en.json'
import authZh from '../locales/auth.zh.json'
import inboxEn from '../locales/inbox.en.json'
import inboxZh from '../locales/inbox.zh.json'
import workbenchEn from '../locales/workbench.en.json'
import workbenchZh from '../locales/workbench.zh.json'
import { translator } from './i18n'

describe('the i18n core', () => {
  it.each([
    ['workbench', workbenchEn, workbenchZh],
    ['inbox', inboxEn, inboxZh],
    ['auth', authEn, authZh],
  ])('%s: both languages have the same keys, each with words', (_name, en, zh) => {
    expect(Object.keys(zh).sort()).toEqual(Object.keys(en).sort())
    for (const text of [...Object.values(en), ...Object.values(zh)]) expect(text).not.toBe('')
  })

  it('fills placeholders and falls back to English', () => {
    const zh = { hi: '你好 {name}' } as Record<'hi' | 'only', string> // a key the dictionary lacks
    const translate = translator<'hi' | 'only'>({ en: { hi: 'Hi {name} {name}', only: 'en' }, zh })
    expect(translate('en', 'hi', { name: 'Ann' })).toBe('Hi Ann Ann')
    expect(translate('zh', 'hi', { name: 3 })).toBe('你好 3')
    expect(translate('zh', 'only')).toBe('en')
  })
})
