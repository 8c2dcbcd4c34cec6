// Page 2 (`/inbox/agents/:agentId`): quick task creation in one step, the filter tabs All /
// Running / Needs reply / Completed, and the agent's tasks in the seed's order (status, then the
// latest update), each swipeable to delete (seed §2.1). Polls every 5 s besides SSE (§8.4).
import { useState } from 'react'
import { useParams } from 'react-router-dom'
import { AppBar, Avatar } from '../components/AppBar'
import { Composer } from '../components/Composer'
import { BellIcon, SearchIcon } from '../../shared/Icons'
import { SearchPanel } from '../components/SearchPanel'
import { TaskItem } from '../components/TaskItem'
import { errorText } from '../lib/i18n'
import type { MessageKey } from '../lib/i18n'
import { agentTasks, matchesFilter } from '../lib/reducer'
import type { Filter } from '../lib/reducer'
import { useInbox, useNow, usePolling } from '../lib/store'
import type { Task } from '../lib/types'

const FILTERS: { id: Filter; label: MessageKey }[] = [
  { id: 'all', label: 'filterAll' },
  { id: 'running', label: 'filterRunning' },
  { id: 'waiting', label: 'filterWaiting' },
  { id: 'completed', label: 'filterCompleted' },
]

export function AgentInboxPage() {
  const { agentId = 'main' } = useParams()
  const { state, t, actions, notify } = useInbox()
  const now = useNow()
  const [filter, setFilter] = useState<Filter>('all')
  const [draft, setDraft] = useState('')
  const [sending, setSending] = useState(false)
  const [searching, setSearching] = useState(false)
  const [error, setError] = useState<unknown>(null)

  usePolling(async () => {
    try {
      await actions.loadTasks(agentId)
      setError(null)
    } catch (failure) {
      setError(failure)
      throw failure
    }
  }, 5000, [agentId, state.syncEpoch])
  usePolling(() => (state.agentsLoaded ? Promise.resolve() : actions.loadAgents()), 5000, [])

  const agent = state.agents.find((candidate) => candidate.id === agentId)
  const all = agentTasks(state, agentId)
  const shown = all.filter((task) => matchesFilter(task, filter))
  const loaded = state.loaded[agentId]

  const create = async () => {
    const content = draft.trim()
    if (!content || sending) return
    setSending(true)
    try {
      await actions.createTask(agentId, content)
      setDraft('')
      setFilter((current) => (current === 'all' || current === 'running' ? current : 'all'))
    } catch (failure) {
      actions.fail(failure)
    } finally {
      setSending(false)
    }
  }
  const remove = (task: Task) => actions.deleteTask(task.id)

  if (state.agentsLoaded && !agent) {
    return (
      <div className="page">
        <AppBar back="/" title={<h1>{agentId}</h1>} />
        <main className="content"><p className="empty" data-testid="agent-missing">{t('agentNotFound', { id: agentId })}</p></main>
      </div>
    )
  }

  const name = agent?.name ?? agentId
  const bellLabel = notify.permission === 'denied' ? t('notificationsBlocked') : notify.enabled ? t('notificationsOn') : t('notifications')
  return (
    <div className="page" data-testid="agent-inbox-page">
      <AppBar
        back="/"
        title={
          <h1 className="agent-title">
            <Avatar id={agentId} name={name} size="sm" />
            <span className="ellipsis" data-testid="inbox-agent-name">{name}</span>
          </h1>
        }
        actions={
          <>
            <button className="icon-btn" onClick={() => setSearching((on) => !on)} aria-label={t('search')} title={t('search')}
              data-testid="search-toggle">
              <SearchIcon />
            </button>
            {notify.permission !== 'unsupported' && (
              <button className={notify.enabled ? 'icon-btn on' : 'icon-btn'} onClick={() => void actions.toggleNotifications()}
                aria-label={bellLabel} title={bellLabel} aria-pressed={notify.enabled} data-testid="notify-toggle">
                <BellIcon off={!notify.enabled} />
              </button>
            )}
          </>
        }
      />
      <main className="content">
        {searching ? (
          <SearchPanel agentId={agentId} onClose={() => setSearching(false)} />
        ) : (
          <>
            <Composer value={draft} onChange={setDraft} onSubmit={() => void create()} canSend={!sending} busy={sending}
              placeholder={t('newTaskPlaceholder', { name })} sendLabel={t('send')} testId="new-task" className="quick" />
            <nav className="tabs" role="tablist" data-testid="filter-tabs">
              {FILTERS.map(({ id, label }) => {
                const count = all.filter((task) => matchesFilter(task, id)).length
                return (
                  <button key={id} role="tab" aria-selected={filter === id} className={filter === id ? 'tab active' : 'tab'}
                    onClick={() => setFilter(id)} data-testid={`filter-${id}`}>
                    {t(label)}
                    {count > 0 && <span className="tab-count">{count}</span>}
                  </button>
                )
              })}
            </nav>
            {!loaded && error === null && <p className="muted center">{t('loading')}</p>}
            {!loaded && error !== null && (
              <div className="page-error" role="alert" data-testid="page-error">
                <p>{errorText(t, error)}</p>
              </div>
            )}
            {loaded && shown.length === 0 && (
              <p className="empty" data-testid="tasks-empty">{filter === 'all' ? t('emptyAll') : t('emptyFiltered')}</p>
            )}
            <ul className="task-list" data-testid="task-list">
              {shown.map((task) => <TaskItem key={task.id} task={task} now={now} onDelete={remove} />)}
            </ul>
          </>
        )}
      </main>
    </div>
  )
}
