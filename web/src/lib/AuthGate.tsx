// The sign-in gate around each UI (the workbench and the inbox): it asks GET /auth first and shows
// the app when no token is needed (the default, loopback) or the kept one is accepted; otherwise a
// sign-in screen. Any 401 (auth.fetch) or the Sign out button brings the screen back and says why.
// The app below is mounted only once signed in, so nothing of it runs (requests, streams) before.
// Each UI styles the screen in its own CSS (.signin*) and keeps its language under its own key.
import { createContext, useContext, useEffect, useRef, useState } from 'react'
import type { FormEvent, ReactNode } from 'react'
import { useLatest } from '../shared/hooks'
import { auth, startSession, TOKEN_KEY } from './auth'
import type { GateState, SignOutReason } from './auth'
import en from '../locales/auth.en.json'
import zh from '../locales/auth.zh.json'
import { defaultLang, htmlLang, translator } from '../shared/i18n'
import type { Lang } from '../shared/i18n'

export type AuthTextKey = keyof typeof en

export const authText = translator<AuthTextKey>({ en, zh })

const REASON_TEXT: Record<SignOutReason, AuthTextKey> = {
  refused: 'signedOutRefused',
  required: 'signedOutRequired',
  user: 'signedOutUser',
}

interface AuthValue {
  /** The server wants a token (so there is something to sign out of). */
  required: boolean
  signOut(): void
}

const AuthContext = createContext<AuthValue>({ required: false, signOut: () => auth.signOut('user') })

export function useAuth(): AuthValue {
  return useContext(AuthContext)
}

/** The UI's saved language: the `lang` of the JSON it keeps under `key`. */
function savedLang(key: string): Lang {
  try {
    const lang = (JSON.parse(localStorage.getItem(key) ?? '{}') as { lang?: unknown }).lang
    return lang === 'en' || lang === 'zh' ? lang : defaultLang()
  } catch {
    return defaultLang()
  }
}

function saveLang(key: string, lang: Lang): void {
  try {
    const saved = JSON.parse(localStorage.getItem(key) ?? '{}') as Record<string, unknown>
    localStorage.setItem(key, JSON.stringify({ ...saved, lang }))
  } catch {
    // not kept: the app starts in the default language
  }
}

export interface AuthGateProps {
  children: ReactNode
  /** The localStorage key of the UI's preferences (its `lang` is read and written). */
  langKey: string
  /** The UI's name above the form, in a language. */
  title: (lang: Lang) => string
  /** Called on every sign-out (e.g. to drop data cached for the signed-in user). */
  onSignOut?: (reason: SignOutReason) => void
}

export function AuthGate({ children, langKey, title, onSignOut }: AuthGateProps) {
  const [gate, setGate] = useState<GateState>({ phase: 'checking' })
  const gateRef = useLatest(gate)
  const onSignOutRef = useLatest(onSignOut)

  useEffect(() => {
    let live = true
    const start = () => void startSession().then((next) => live && setGate(next))
    start()
    const off = auth.onSignOut((reason) => {
      onSignOutRef.current?.(reason)
      setGate({ phase: 'out', reason })
    })
    // another tab of this origin (the other UI, say) signed in or out
    const storage = (event: StorageEvent) => {
      if (event.key !== TOKEN_KEY && event.key !== null) return
      const current = gateRef.current
      if (auth.token()) {
        if (current.phase === 'out') start()
      } else if (current.phase === 'in' && current.required) {
        onSignOutRef.current?.('user')
        setGate({ phase: 'out', reason: 'user' })
      }
    }
    window.addEventListener('storage', storage)
    return () => {
      live = false
      off()
      window.removeEventListener('storage', storage)
    }
  }, [gateRef, onSignOutRef])

  if (gate.phase === 'checking') return null
  if (gate.phase === 'out') {
    return <SignInScreen reason={gate.reason} langKey={langKey} title={title}
      onSignedIn={() => setGate({ phase: 'in', required: true })} />
  }
  const value: AuthValue = { required: gate.required, signOut: () => auth.signOut('user') }
  return <AuthContext.Provider value={value}>{children}</AuthContext.Provider>
}

function SignInScreen({ reason, langKey, title, onSignedIn }: {
  reason: SignOutReason | null
  langKey: string
  title: (lang: Lang) => string
  onSignedIn: () => void
}) {
  const [lang, setLang] = useState<Lang>(() => savedLang(langKey))
  const [token, setToken] = useState('')
  const [busy, setBusy] = useState(false)
  const [error, setError] = useState<AuthTextKey | null>(null)
  const [why, setWhy] = useState<SignOutReason | null>(reason)
  const input = useRef<HTMLInputElement>(null)
  const text = (key: AuthTextKey) => authText(lang, key)

  useEffect(() => {
    document.documentElement.lang = htmlLang(lang)
  }, [lang])

  const submit = async (event: FormEvent) => {
    event.preventDefault()
    if (busy) return
    setWhy(null)
    if (!token.trim()) {
      setError('tokenMissing')
      input.current?.focus()
      return
    }
    setBusy(true)
    setError(null)
    const result = await auth.signIn(token)
    setBusy(false)
    if (result === 'ok') {
      onSignedIn()
      return
    }
    setError(result === 'refused' ? 'tokenRefused' : 'unreachable')
    input.current?.select()
  }

  const toggleLang = () => {
    const next: Lang = lang === 'en' ? 'zh' : 'en'
    setLang(next)
    saveLang(langKey, next)
  }

  return (
    <div className="signin" data-testid="signin">
      <form className="signin-card" onSubmit={(event) => void submit(event)} noValidate>
        <div className="signin-head">
          <span className="signin-app">{title(lang)}</span>
          <button type="button" className="signin-lang" data-testid="signin-lang" onClick={toggleLang}>
            {text('language')}
          </button>
        </div>
        <h1>{text('signInTitle')}</h1>
        {why && (
          <p className={`signin-note ${why === 'user' ? 'info' : 'error'}`} role={why === 'user' ? 'status' : 'alert'}
            data-testid="signin-reason">
            {text(REASON_TEXT[why])}
          </p>
        )}
        <p className="signin-hint">{text('signInHint')}</p>
        <label htmlFor="signin-token">{text('tokenLabel')}</label>
        <input id="signin-token" ref={input} type="password" autoComplete="current-password" autoFocus
          spellCheck={false} autoCapitalize="off" value={token} data-testid="signin-token"
          aria-invalid={error !== null} onChange={(event) => setToken(event.target.value)} />
        {error && <p className="signin-error" role="alert" data-testid="signin-error">{text(error)}</p>}
        <button type="submit" className="btn primary signin-submit" disabled={busy} data-testid="signin-submit">
          {busy ? text('signingIn') : text('signIn')}
        </button>
      </form>
    </div>
  )
}
