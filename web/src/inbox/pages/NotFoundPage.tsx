import { Link } from 'react-router-dom'
import { AppBar } from '../components/AppBar'
import { useInbox } from '../lib/store'

export function NotFoundPage() {
  const { t } = useInbox()
  return (
    <div className="page">
      <AppBar back="/" title={<h1>{t('appTitle')}</h1>} />
      <main className="content">
        <div className="empty" data-testid="not-found">
          <p>{t('pageNotFound')}</p>
          <Link className="btn" to="/">{t('home')}</Link>
        </div>
      </main>
    </div>
  )
}
