// The inbox app: three pages under /inbox (seed §2.1), the store with its global SSE connection
// around them, a notice line for errors and confirmations, the sign-in gate (when the server has
// a token) and an error boundary around it all.
import { BrowserRouter, Route, Routes } from 'react-router-dom'
import { AuthGate } from '../lib/AuthGate'
import { ErrorBoundary } from './components/ErrorBoundary'
import { AgentInboxPage } from './pages/AgentInboxPage'
import { AgentListPage } from './pages/AgentListPage'
import { NotFoundPage } from './pages/NotFoundPage'
import { TaskDetailPage } from './pages/TaskDetailPage'
import { forgetSavedAnswers } from './lib/api'
import { translate } from './lib/i18n'
import { InboxProvider, STORAGE_KEY, useInbox } from './lib/store'

export const BASENAME = '/inbox'

function NoticeLine() {
  const { state, dispatch, t } = useInbox()
  if (!state.notice) return null
  const error = state.notice.kind === 'error'
  return (
    <div className={`toast ${state.notice.kind}`} role={error ? 'alert' : 'status'} data-testid="notice">
      <span>{state.notice.text}</span>
      <button type="button" className="link-btn" onClick={() => dispatch({ type: 'NOTICE', notice: null })}>{t('dismiss')}</button>
    </div>
  )
}

export default function App() {
  return (
    <ErrorBoundary>
      <AuthGate langKey={STORAGE_KEY} title={(lang) => translate(lang, 'appTitle')} onSignOut={() => void forgetSavedAnswers()}>
        <BrowserRouter basename={BASENAME}>
          <InboxProvider>
            <Routes>
              <Route path="/" element={<AgentListPage />} />
              <Route path="/agents/:agentId" element={<AgentInboxPage />} />
              <Route path="/agents/:agentId/tasks/:taskId" element={<TaskDetailPage />} />
              <Route path="*" element={<NotFoundPage />} />
            </Routes>
            <NoticeLine />
          </InboxProvider>
        </BrowserRouter>
      </AuthGate>
    </ErrorBoundary>
  )
}
