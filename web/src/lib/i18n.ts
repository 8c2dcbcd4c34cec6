// The workbench's UI text: its dictionaries (src/locales/workbench.*.json) in the shared i18n core.
import en from '../locales/workbench.en.json'
import zh from '../locales/workbench.zh.json'
import { translator } from '../shared/i18n'

export type MessageKey = keyof typeof en

export const translate = translator<MessageKey>({ en, zh })
