import { authText, useAuth } from '../lib/AuthGate'
import { useWorkbench } from '../lib/store'
import { ClawIcon, MoonIcon, SunIcon } from './Icons'

export function Navbar() {
  const { state, dispatch, t, actions } = useWorkbench()
  const session = useAuth()
  const model = state.status?.model
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
        <label className="toggle" title={state.ragMode ? t('ragOn') : t('ragOff')}>
          <input type="checkbox" checked={state.ragMode} data-testid="rag-toggle"
            onChange={(e) => void actions.setRag(e.target.checked)} />
          <span className="track"><span className="thumb" /></span>
          <span>{t('rag')}</span>
        </label>
        <span className="token-chip" data-testid="token-usage"
          title={state.tokens ? t('tokensTitle', { system: state.tokens.system_tokens, messages: state.tokens.message_tokens }) : ''}>
          {state.tokens ? state.tokens.total_tokens.toLocaleString() : '—'} {t('tokens')}
        </span>
        <button className="btn ghost" data-testid="lang-toggle"
          onClick={() => dispatch({ type: 'lang', lang: state.lang === 'en' ? 'zh' : 'en' })}>
          {t('language')}
        </button>
        <button className="btn ghost icon" data-testid="theme-toggle"
          title={state.theme === 'dark' ? t('themeLight') : t('themeDark')}
          aria-label={state.theme === 'dark' ? t('themeLight') : t('themeDark')}
          onClick={() => dispatch({ type: 'theme', theme: state.theme === 'dark' ? 'light' : 'dark' })}>
          {state.theme === 'dark' ? <SunIcon /> : <MoonIcon />}
        </button>
        {session.required && (
          <button className="btn ghost" data-testid="sign-out" onClick={session.signOut}>
            {authText(state.lang, 'signOut')}
          </button>
        )}
      </div>
    </header>
  )
}
