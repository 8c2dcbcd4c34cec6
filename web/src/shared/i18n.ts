// The one i18n core of both UIs and the sign-in screen: English and Simplified Chinese, each UI's
// text a pair of dictionaries (src/locales/<ui>.<lang>.json) with {name} placeholders, the
// default language from navigator.language.

export type Lang = 'en' | 'zh'
export type Vars = Record<string, string | number>

/** One UI's text: a key's words in a language, its {name} placeholders filled from `vars`. */
export function translator<K extends string>(
  dictionaries: Record<Lang, Record<K, string>>,
): (lang: Lang, key: K, vars?: Vars) => string {
  return (lang, key, vars) => {
    let text = dictionaries[lang][key] ?? dictionaries.en[key]
    if (vars) {
      for (const [name, value] of Object.entries(vars)) text = text.replaceAll(`{${name}}`, String(value))
    }
    return text
  }
}

export function defaultLang(): Lang {
  if (typeof navigator !== 'undefined' && navigator.language?.toLowerCase().startsWith('zh')) return 'zh'
  return 'en'
}

/** The page's `<html lang>` for a language. */
export function htmlLang(lang: Lang): string {
  return lang === 'zh' ? 'zh-CN' : 'en'
}
