// Page 1 (`/inbox`): the agents as a two-column grid of cards, and a dashed card that opens the
// "new agent" form (seed §2.1). The search button searches every agent's tasks.
import { useState } from 'react'
import { authText, useAuth } from '../../lib/AuthGate'
import { AgentCard, NewAgentCard } from '../components/AgentCard'
import { AppBar, LangToggle } from '../components/AppBar'
import { InboxIcon, SearchIcon, SignOutIcon } from '../../shared/Icons'
import { NewAgentDialog } from '../components/NewAgentDialog'
import { SearchPanel } from '../components/SearchPanel'
import { errorText } from '../lib/i18n'
import { useInbox, usePolling } from '../lib/store'

export function AgentListPage() {
  const { state, t, actions } = useInbox()
  const session = useAuth()
  const [creating, setCreating] = useState(false)
  const [searching, setSearching] = useState(false)
  const [error, setError] = useState<unknown>(null)

  usePolling(async () => {
    try {
      await actions.loadAgents()
      setError(null)
    } catch (failure) {
      setError(failure)
      throw failure
    }
  }, 5000, [state.syncEpoch])

  return (
    <div className="page" data-testid="agent-list-page">
      <AppBar
        title={<h1 className="brand"><InboxIcon /> {t('agents')}</h1>}
        actions={
          <>
            <button className="icon-btn" onClick={() => setSearching((on) => !on)} aria-label={t('search')} title={t('search')}
              data-testid="search-toggle">
              <SearchIcon />
            </button>
            <LangToggle />
            {session.required && (
              <button className="icon-btn" onClick={session.signOut} aria-label={authText(state.lang, 'signOut')}
                title={authText(state.lang, 'signOut')} data-testid="sign-out">
                <SignOutIcon />
              </button>
            )}
          </>
        }
      />
      <main className="content">
        {searching && <SearchPanel onClose={() => setSearching(false)} />}
        {!state.agentsLoaded && !error && <p className="muted center">{t('loading')}</p>}
        {!state.agentsLoaded && error !== null && (
          <div className="page-error" role="alert" data-testid="page-error">
            <p>{errorText(t, error)}</p>
            <button className="btn" onClick={() => void actions.loadAgents().then(() => setError(null), setError)}>{t('retry')}</button>
          </div>
        )}
        {state.agentsLoaded && (
          <div className="agent-grid" data-testid="agent-grid">
            {state.agents.map((agent) => <AgentCard key={agent.id} agent={agent} />)}
            <NewAgentCard onClick={() => setCreating(true)} />
          </div>
        )}
      </main>
      {creating && (
        <NewAgentDialog onClose={() => setCreating(false)} onCreated={(agent) => {
          setCreating(false)
          actions.say('agentCreated', { name: agent.name })
        }} />
      )}
    </div>
  )
}
