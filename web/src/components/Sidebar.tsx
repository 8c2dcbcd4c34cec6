import { useState } from 'react'
import { useActions, useT, useWorkbenchState } from '../lib/store'
import { Dialog } from './Dialog'
import { EditIcon, ListIcon, PauseIcon, PlusIcon, TrashIcon } from '../shared/Icons'

export function Sidebar() {
  const sessions = useWorkbenchState((state) => state.sessions)
  const currentId = useWorkbenchState((state) => state.currentId)
  const streaming = useWorkbenchState((state) => state.streaming)
  const waiting = useWorkbenchState((state) => state.waiting)
  const view = useWorkbenchState((state) => state.view)
  const actions = useActions()
  const t = useT()
  const [editing, setEditing] = useState<string | null>(null)
  const [draft, setDraft] = useState('')
  const [deleting, setDeleting] = useState<string | null>(null)
  const deletingTitle = sessions.find((s) => s.id === deleting)?.title || t('untitled')

  const commit = (id: string) => {
    const title = draft.trim()
    setEditing(null)
    if (title) void actions.renameSession(id, title)
  }

  return (
    <div className="sidebar">
      <div className="pane-head">
        <h2>{t('sessions')}</h2>
        <button className="btn primary small" onClick={() => void actions.newSession()} data-testid="new-session"
          disabled={streaming}>
          <PlusIcon /> {t('newSession')}
        </button>
      </div>
      <ul className="session-list" data-testid="session-list">
        {sessions.length === 0 && <li className="muted empty">{t('noSessions')}</li>}
        {sessions.map((s) => (
          <li key={s.id} className={s.id === currentId ? 'session active' : 'session'} data-testid="session-item"
            data-session-id={s.id}>
            {editing === s.id ? (
              <input className="rename-input" autoFocus value={draft} data-testid="rename-input" maxLength={100}
                onChange={(e) => setDraft(e.target.value)}
                onBlur={() => commit(s.id)}
                onKeyDown={(e) => {
                  if (e.key === 'Enter') commit(s.id)
                  if (e.key === 'Escape') setEditing(null)
                }} />
            ) : (
              <button className="session-title" onClick={() => void actions.selectSession(s.id)} title={s.id}>
                <span className="title-text">{s.title || t('untitled')}</span>
                {waiting[s.id] && (
                  <span className="pill awaiting" data-testid="session-waiting" title={t('waitingTitle')}>
                    <PauseIcon /> {t('waitingBadge')}
                  </span>
                )}
                <span className="muted small">{new Date(s.updated_at * 1000).toLocaleString()}</span>
              </button>
            )}
            <span className="session-actions">
              <button className="btn ghost icon small" title={t('rename')} aria-label={t('rename')} data-testid="rename-session"
                onClick={() => {
                  setDraft(s.title)
                  setEditing(s.id)
                }}>
                <EditIcon />
              </button>
              <button className="btn ghost icon small" title={t('delete')} aria-label={t('delete')} data-testid="delete-session"
                onClick={() => setDeleting(s.id)}>
                <TrashIcon />
              </button>
            </span>
          </li>
        ))}
      </ul>
      <div className="sidebar-foot">
        <button className={view === 'raw' ? 'btn active wide' : 'btn wide'} data-testid="raw-toggle"
          disabled={!currentId} onClick={() => void actions.showRaw(view !== 'raw')}>
          <ListIcon /> {view === 'raw' ? t('backToChat') : t('rawMessages')}
        </button>
      </div>
      {deleting && (
        <Dialog title={t('deleteTitle')} confirmLabel={t('delete')} cancelLabel={t('cancel')} danger
          onCancel={() => setDeleting(null)}
          onConfirm={() => {
            const id = deleting
            setDeleting(null)
            void actions.deleteSession(id)
          }}>
          {t('deleteBody', { title: deletingTitle })}
        </Dialog>
      )}
    </div>
  )
}
