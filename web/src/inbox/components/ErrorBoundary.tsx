// Catches a render error anywhere below and shows it with a reload button (seed §8.5), instead
// of a blank page. Its text follows the saved language (the store may be what failed).
import { Component } from 'react'
import type { ErrorInfo, ReactNode } from 'react'
import { defaultLang } from '../../shared/i18n'
import type { Lang } from '../../shared/i18n'
import { translate } from '../lib/i18n'

function savedLang(): Lang {
  try {
    const lang = (JSON.parse(localStorage.getItem('clawlet-inbox') ?? '{}') as { lang?: Lang }).lang
    return lang ?? defaultLang()
  } catch {
    return defaultLang()
  }
}

interface State {
  error: Error | null
}

export class ErrorBoundary extends Component<{ children: ReactNode }, State> {
  state: State = { error: null }

  static getDerivedStateFromError(error: Error): State {
    return { error }
  }

  componentDidCatch(error: Error, info: ErrorInfo): void {
    // keep the details for whoever opens the console; the page says what happened
    console.warn('inbox: render error', error, info.componentStack)
  }

  render() {
    const { error } = this.state
    if (!error) return this.props.children
    const lang = savedLang()
    return (
      <div className="crash" role="alert" data-testid="error-boundary">
        <h1>{translate(lang, 'crashed')}</h1>
        <p>{translate(lang, 'crashedBody', { error: error.message })}</p>
        <button className="btn primary" onClick={() => window.location.reload()}>
          {translate(lang, 'reload')}
        </button>
      </div>
    )
  }
}
