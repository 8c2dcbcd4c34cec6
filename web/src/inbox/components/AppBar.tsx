// The sticky top bar of every page, and the strip under it that says when updates are not live.
import type { ReactNode } from 'react'
import { Link } from 'react-router-dom'
import { useInbox } from '../lib/store'
import { BackIcon } from '../../shared/Icons'

export function AppBar({ back, title, actions }: { back?: string; title: ReactNode; actions?: ReactNode }) {
  const { t } = useInbox()
  return (
    <header className="appbar">
      {back !== undefined && (
        <Link to={back} className="icon-btn" aria-label={t('back')} title={t('back')} data-testid="back">
          <BackIcon />
        </Link>
      )}
      <div className="appbar-title">{title}</div>
      {actions && <div className="appbar-actions">{actions}</div>}
      <ConnectionStrip />
    </header>
  )
}

function ConnectionStrip() {
  const { state, t } = useInbox()
  if (state.offline) {
    return (
      <div className="conn-strip offline" role="status" data-testid="offline-banner">
        {t('offline')}
      </div>
    )
  }
  if (state.connection === 'closed') {
    return (
      <div className="conn-strip reconnecting" role="status" data-testid="reconnecting-banner">
        {t('reconnecting')}
      </div>
    )
  }
  return null
}

export function LangToggle() {
  const { state, dispatch, t } = useInbox()
  return (
    <button className="icon-btn lang" data-testid="lang-toggle" title={t('languageLabel')} aria-label={t('languageLabel')}
      onClick={() => dispatch({ type: 'LANG', lang: state.lang === 'en' ? 'zh' : 'en' })}>
      {t('language')}
    </button>
  )
}

/** A round avatar with the name's first character, coloured by the id. */
export function Avatar({ id, name, size = 'md' }: { id: string; name: string; size?: 'sm' | 'md' }) {
  let hash = 0
  for (const ch of id) hash = (hash * 31 + ch.charCodeAt(0)) >>> 0
  const hue = hash % 360
  const initial = Array.from(name.trim() || id)[0]?.toUpperCase() ?? '?'
  return (
    <span className={`avatar ${size}`} style={{ background: `hsl(${hue} 62% 52%)` }} aria-hidden="true" data-testid="avatar">
      {initial}
    </span>
  )
}
