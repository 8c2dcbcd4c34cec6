// Search across task titles and messages (GET /api/v1/tasks?q=), for one agent or all of them.
// Matches are highlighted in the title and in the server's snippet of the matching message.
import { Fragment, useEffect, useRef, useState } from 'react'
import type { ReactNode } from 'react'
import { Link } from 'react-router-dom'
import { api } from '../lib/api'
import { errorText, relativeTime } from '../lib/i18n'
import { useInbox, useNow } from '../lib/store'
import { useLatest } from '../../shared/hooks'
import type { Task } from '../lib/types'
import { CloseIcon, SearchIcon } from '../../shared/Icons'
import { TaskStatusBadge } from './TaskStatusBadge'
import { plainPreview } from './TaskItem'

/** `text` with each case-insensitive occurrence of `query` in a <mark>. */
export function highlight(text: string, query: string): ReactNode {
  const needle = query.trim().toLowerCase()
  if (!needle) return text
  const out: ReactNode[] = []
  const lower = text.toLowerCase()
  let from = 0
  for (let at = lower.indexOf(needle); at >= 0; at = lower.indexOf(needle, from)) {
    out.push(text.slice(from, at), <mark key={at}>{text.slice(at, at + needle.length)}</mark>)
    from = at + needle.length
  }
  out.push(text.slice(from))
  return <>{out.map((part, index) => <Fragment key={index}>{part}</Fragment>)}</>
}

export function SearchPanel({ agentId, onClose }: { agentId?: string; onClose: () => void }) {
  const { state, t } = useInbox()
  const now = useNow()
  const [query, setQuery] = useState('')
  const [results, setResults] = useState<Task[] | null>(null)
  const [error, setError] = useState('')
  // the search (agent and words) the results or the error answer: busy until it is this one
  const [answered, setAnswered] = useState<string | null>(null)
  const request = useRef(0)
  const latest = useLatest({ deleted: state.deleted, t })
  const q = query.trim()
  const search = q ? JSON.stringify([agentId ?? null, q]) : null
  const busy = search !== null && answered !== search

  useEffect(() => {
    const id = ++request.current
    if (search === null) return
    const timer = setTimeout(() => {
      api.tasks({ agentId, q, limit: 50 }).then(
        (found) => {
          if (request.current !== id) return
          setResults(found.filter((task) => !latest.current.deleted[task.id]))
          setError('')
          setAnswered(search)
        },
        (failure) => {
          if (request.current !== id) return
          setError(errorText(latest.current.t, failure))
          setAnswered(search)
        },
      )
    }, 250)
    return () => clearTimeout(timer)
  }, [search, q, agentId, latest])

  const edit = (value: string) => {
    setQuery(value)
    if (!value.trim()) {
      setResults(null) // no words: no results (an answer still on its way is dropped by the effect)
      setAnswered(null)
    }
  }
  const agentName = (id: string) => state.agents.find((agent) => agent.id === id)?.name ?? id
  return (
    <section className="search" data-testid="search-panel">
      <div className="search-box">
        <SearchIcon />
        <input type="search" autoFocus value={query} onChange={(event) => edit(event.target.value)}
          placeholder={agentId ? t('searchPlaceholder') : t('searchAllPlaceholder')} aria-label={t('search')}
          data-testid="search-input" enterKeyHint="search"
          onKeyDown={(event) => event.key === 'Escape' && onClose()} />
        <button type="button" className="icon-btn" onClick={onClose} aria-label={t('searchClose')} data-testid="search-close">
          <CloseIcon />
        </button>
      </div>
      {busy && <p className="muted center small">{t('searching')}</p>}
      {error && <p className="form-error" role="alert">{error}</p>}
      {!busy && results && results.length === 0 && (
        <p className="empty" data-testid="search-empty">{t('noResults', { q })}</p>
      )}
      {results && results.length > 0 && (
        <ul className="task-list" data-testid="search-results">
          {results.map((task) => (
            <li key={task.id} className="task-row" data-testid="search-result" data-task-id={task.id}>
              <Link className="task-link" to={`/agents/${encodeURIComponent(task.agentId)}/tasks/${encodeURIComponent(task.id)}`}>
                <div className="task-line">
                  <span className="task-title">{highlight(task.title, q)}</span>
                  <TaskStatusBadge status={task.status} />
                </div>
                <div className="task-line sub">
                  <span className="task-preview" data-testid="search-snippet">
                    {!agentId && <span className="you">{agentName(task.agentId)} · </span>}
                    {highlight(task.match?.snippet ?? plainPreview(task.lastMessage?.content ?? ''), q)}
                  </span>
                  <time className="task-time">{relativeTime(state.lang, task.updatedAt, now)}</time>
                </div>
              </Link>
            </li>
          ))}
        </ul>
      )}
    </section>
  )
}
