import { useEffect, useRef, useState } from 'react'
import { useActions, useT, useWorkbenchState } from '../lib/store'
import { Dialog } from './Dialog'
import { PauseIcon, SendIcon, StopIcon, WrenchIcon } from '../shared/Icons'
import { MessageBubble } from './MessageBubble'

function RawView() {
  const raw = useWorkbenchState((state) => state.raw)
  const t = useT()
  if (!raw) return <div className="muted pad">{t('loading')}</div>
  return (
    <div className="raw-view" data-testid="raw-view">
      <p className="muted small">{t('rawHint')}</p>
      {raw.messages.map((m, i) => (
        <div key={i} className={`raw-message role-${m.role}`} data-testid="raw-message">
          <div className="raw-role">{m.role}</div>
          <pre>{m.content}</pre>
        </div>
      ))}
    </div>
  )
}

export function ChatPanel() {
  const t = useT()
  const actions = useActions()
  const current = useWorkbenchState((state) => state.sessions.find((s) => s.id === state.currentId))
  const currentId = useWorkbenchState((state) => state.currentId)
  const streaming = useWorkbenchState((state) => state.streaming)
  const compressing = useWorkbenchState((state) => state.compressing)
  const view = useWorkbenchState((state) => state.view)
  const messages = useWorkbenchState((state) => state.messages)
  const waiting = useWorkbenchState((state) => !!state.currentId && !!state.waiting[state.currentId] && !state.streaming)
  const [text, setText] = useState('')
  const [confirming, setConfirming] = useState(false)
  const scroller = useRef<HTMLDivElement>(null)

  useEffect(() => {
    const el = scroller.current
    if (el) el.scrollTop = el.scrollHeight
  }, [messages])

  const submit = () => {
    if (!text.trim() || streaming || waiting) return
    const message = text
    setText('')
    void actions.send(message)
  }

  return (
    <div className="chat">
      <div className="pane-head">
        <h2 className="chat-title" data-testid="chat-title">{current ? current.title || t('untitled') : t('newSession')}</h2>
        {waiting && (
          <span className="waiting-head">
            <span className="pill awaiting" data-testid="waiting-badge" title={t('waitingTitle')}>
              <PauseIcon /> {t('waitingBadge')}
            </span>
            <button className="btn ghost small" data-testid="cancel-turn" title={t('cancelTurnTitle')}
              onClick={() => void actions.cancelWaiting()}>
              {t('cancelTurn')}
            </button>
          </span>
        )}
        <button className="btn ghost icon" title={t('compress')} aria-label={t('compress')} data-testid="compress-button"
          disabled={!currentId || streaming || compressing} onClick={() => setConfirming(true)}>
          <WrenchIcon />
        </button>
      </div>
      <div className="messages" ref={scroller} data-testid="messages">
        {view === 'raw' ? (
          <RawView />
        ) : messages.length === 0 ? (
          <div className="empty-chat muted">{t('emptyChat')}</div>
        ) : (
          messages.map((m) => <MessageBubble key={m.id} message={m} />)
        )}
      </div>
      <div className="composer">
        <textarea value={text} placeholder={waiting ? t('waitingPlaceholder') : t('placeholder')} rows={3}
          data-testid="chat-input" disabled={waiting}
          onChange={(e) => setText(e.target.value)}
          onKeyDown={(e) => {
            if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
              e.preventDefault()
              submit()
            }
          }} />
        {streaming ? (
          <button className="btn danger" onClick={() => void actions.stop()} data-testid="stop-button">
            <StopIcon /> {t('stop')}
          </button>
        ) : (
          <button className="btn primary" onClick={submit} disabled={!text.trim() || waiting} data-testid="send-button">
            <SendIcon /> {t('send')}
          </button>
        )}
      </div>
      {confirming && (
        <Dialog title={t('compressTitle')} confirmLabel={t('compress')} cancelLabel={t('cancel')}
          onCancel={() => setConfirming(false)}
          onConfirm={() => {
            setConfirming(false)
            void actions.compress()
          }}>
          {t('compressBody')}
        </Dialog>
      )}
    </div>
  )
}
