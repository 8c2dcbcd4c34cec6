import { authText, useAuth } from '../lib/AuthGate'
import { useActions, useDispatch, useT, useWorkbenchState } from '../lib/store'
import { ClawIcon, MoonIcon, SunIcon } from '../shared/Icons'

export function Navbar() {
  const model = useWorkbenchState((state) => state.status?.model)
  const ragMode = useWorkbenchState((state) => state.ragMode)
  const tokens = useWorkbenchState((state) => state.tokens)
  const lang = useWorkbenchState((state) => state.lang)
  const theme = useWorkbenchState((state) => state.theme)
  const dispatch = useDispatch()
  const actions = useActions()
  const t = useT()
  const session = useAuth()
  return (
    <header className="navbar glass">
      <div className="brand">
        <ClawIcon />
        <strong>{t('appName')}</strong>
        <span className="muted">{t('workbench')}</span>
      </div>
      <div className="nav-items">
        {model && (
          <span className={model.is_demo ? 'model-chip demo' : 'model-chip'} title={model.is_demo ? t('demoHint') : model.label}
            data-testid="model-label">
            {model.is_demo && <span className="badge">{t('demoBadge')}</span>}
            <span className="model-text">{model.label}</span>
          </span>
        )}
        <label className="toggle" title={ragMode ? t('ragOn') : t('ragOff')}>
          <input type="checkbox" checked={ragMode} data-testid="rag-toggle"
            onChange={(e) => void actions.setRag(e.target.checked)} />
          <span className="track"><span className="thumb" /></span>
          <span>{t('rag')}</span>
        </label>
        <span className="token-chip" data-testid="token-usage"
          title={tokens ? t('tokensTitle', { system: tokens.system_tokens, messages: tokens.message_tokens }) : ''}>
          {tokens ? tokens.total_tokens.toLocaleString() : '—'} {t('tokens')}
        </span>
        <button className="btn ghost" data-testid="lang-toggle"
          onClick={() => dispatch({ type: 'lang', lang: lang === 'en' ? 'zh' : 'en' })}>
          {t('language')}
        </button>
        <button className="btn ghost icon" data-testid="theme-toggle"
          title={theme === 'dark' ? t('themeLight') : t('themeDark')}
          aria-label={theme === 'dark' ? t('themeLight') : t('themeDark')}
          onClick={() => dispatch({ type: 'theme', theme: theme === 'dark' ? 'light' : 'dark' })}>
          {theme === 'dark' ? <SunIcon /> : <MoonIcon />}
        </button>
        {session.required && (
          <button className="btn ghost" data-testid="sign-out" onClick={session.signOut}>
            {authText(lang, 'signOut')}
          </button>
        )}
      </div>
    </header>
  )
}
