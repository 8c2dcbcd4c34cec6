// Page 3 (`/inbox/agents/:agentId/tasks/:taskId`): the task's conversation. The title renames in
// place (Enter saves, Esc cancels); the user's messages appear at once (optimistic) and are
// replaced by the server's copies; the reply streams in as it is written. Polls every 3 s (§8.4).
// A waiting task ("Needs reply") shows its question as the agent's last message; the footer then
// answers it on the shared card: Approve / Edit / Reject for a tool call; for the agent's question
// an answer box with Answer / Decline, and the reply box below it answers the question too.
import { useEffect, useLayoutEffect, useRef, useState } from 'react'
import type { KeyboardEvent } from 'react'
import { Link, useParams } from 'react-router-dom'
import { AppBar } from '../components/AppBar'
import { ApprovalCard } from '../components/ApprovalCard'
import { Composer } from '../components/Composer'
import { FilledStopIcon } from '../../shared/Icons'
import { MessageBubble, TypingBubble } from '../components/MessageBubble'
import { TaskStatusBadge } from '../components/TaskStatusBadge'
import { ApiError } from '../../shared/api'
import { TITLE_MAX } from '../lib/api'
import { errorText } from '../lib/i18n'
import { isTemp, pendingItem } from '../lib/reducer'
import { useInbox, usePolling } from '../lib/store'
import type { Task } from '../lib/types'

export function TaskDetailPage() {
  const { agentId = 'main', taskId = '' } = useParams()
  const { state, t, actions } = useInbox()
  const [draft, setDraft] = useState('')
  const [missing, setMissing] = useState(false)
  const [error, setError] = useState<unknown>(null)
  const back = `/agents/${encodeURIComponent(agentId)}`

  usePolling(async () => {
    try {
      await Promise.all([actions.loadTask(taskId), actions.loadMessages(taskId)])
      setError(null)
    } catch (failure) {
      if (failure instanceof ApiError && failure.code === 'task_not_found') setMissing(true)
      else setError(failure)
      throw failure
    }
  }, 3000, [taskId, state.syncEpoch])

  const task = state.tasks.find((candidate) => candidate.id === taskId)
  const messages = state.messagesByTask[taskId]
  const streamed = state.drafts[taskId]
  const busy = task?.status === 'running' || task?.status === 'pending'
  const waitingFor = pendingItem(task)
  const sendingNow = messages?.some((message) => message.pending === 'sending') ?? false
  const lastServer = messages?.filter((message) => !isTemp(message)).at(-1)
  const showTyping = streamed !== undefined || (busy && lastServer?.senderType !== 'agent') || sendingNow

  // keep the newest message in view
  const end = useRef<HTMLDivElement>(null)
  const count = messages?.length ?? 0
  useLayoutEffect(() => {
    end.current?.scrollIntoView({ block: 'end' })
  }, [count, showTyping, streamed])

  if (missing || (state.deleted[taskId] && !task)) {
    return (
      <div className="page">
        <AppBar back={back} title={<h1>{t('errTaskGone')}</h1>} />
        <main className="content">
          <div className="empty" data-testid="task-missing">
            <p>{t('taskNotFound')}</p>
            <Link className="btn" to={back}>{t('backToInbox')}</Link>
          </div>
        </main>
      </div>
    )
  }

  const send = () => {
    const content = draft.trim()
    if (!content || !task || busy) return
    setDraft('')
    if (waitingFor?.kind === 'question') {
      // the answer to the agent's question (kept in the box if the server refuses it)
      void actions.decide(taskId, waitingFor, { decision: 'answer', message: content }).then((ok) => {
        if (!ok) setDraft((current) => current || content)
      })
      return
    }
    void actions.sendMessage(taskId, content)
  }

  return (
    <div className="page detail" data-testid="task-detail-page">
      <AppBar
        back={back}
        title={task ? <TitleEditor task={task} /> : <h1 className="muted">{t('loading')}</h1>}
        actions={task && <TaskStatusBadge status={task.status} />}
      />
      <main className="content messages" data-testid="messages">
        {!messages && error !== null && (
          <div className="page-error" role="alert" data-testid="page-error"><p>{errorText(t, error)}</p></div>
        )}
        {!messages && error === null && <p className="muted center">{t('loading')}</p>}
        {messages && messages.length === 0 && !showTyping && <p className="empty">{t('noMessages')}</p>}
        {messages?.map((message) => <MessageBubble key={message.id} message={message} />)}
        {showTyping && <TypingBubble text={streamed ?? ''} />}
        <div ref={end} className="end" />
      </main>
      <footer className="footer">
        {task?.status === 'cancelled' ? (
          <p className="cancelled-note" data-testid="cancelled-note">{t('cancelledNote')}</p>
        ) : waitingFor?.kind === 'tool' ? (
          <ApprovalCard key={waitingFor.approvalId} taskId={taskId} item={waitingFor} />
        ) : (
          <>
          {waitingFor?.kind === 'question' && <ApprovalCard key={waitingFor.approvalId} taskId={taskId} item={waitingFor} />}
          <Composer value={draft} onChange={setDraft} onSubmit={send} canSend={!!task && !busy}
            placeholder={busy ? t('busyPlaceholder') : waitingFor ? t('answerPlaceholder') : t('replyPlaceholder')}
            sendLabel={t('send')} testId="reply"
            action={busy ? (
              <button type="button" className="send-btn stop" onClick={() => void actions.cancelTask(taskId)}
                aria-label={t('stopTask')} title={t('stopTask')} data-testid="stop-task">
                <FilledStopIcon />
              </button>
            ) : undefined} />
          </>
        )}
      </footer>
    </div>
  )
}

/** The title, renamed in place: tap to edit, Enter saves, Esc cancels (leaving also saves). */
function TitleEditor({ task }: { task: Task }) {
  const { t, actions } = useInbox()
  const [editing, setEditing] = useState(false)
  const [value, setValue] = useState(task.title)
  const done = useRef(false)
  const input = useRef<HTMLInputElement>(null)

  useEffect(() => {
    if (editing) input.current?.select()
  }, [editing])

  const start = () => {
    done.current = false
    setValue(task.title)
    setEditing(true)
  }
  const finish = (save: boolean) => {
    if (done.current) return
    done.current = true
    setEditing(false)
    const title = value.replace(/\s+/g, ' ').trim()
    if (save && title && title !== task.title) void actions.renameTask(task.id, title)
  }
  const onKeyDown = (event: KeyboardEvent<HTMLInputElement>) => {
    if (event.nativeEvent.isComposing || event.keyCode === 229) return
    if (event.key === 'Enter') {
      event.preventDefault()
      finish(true)
    } else if (event.key === 'Escape') {
      event.preventDefault()
      finish(false)
    }
  }

  if (editing) {
    return (
      <input ref={input} className="title-input" value={value} maxLength={TITLE_MAX} aria-label={t('titleHint')}
        title={t('titleHint')} data-testid="title-input" enterKeyHint="done"
        onChange={(event) => setValue(event.target.value)} onKeyDown={onKeyDown} onBlur={() => finish(true)} />
    )
  }
  return (
    <h1 className="title-h1">
      <button type="button" className="title-btn" onClick={start} title={t('editTitle')} data-testid="task-title-button">
        <span className="ellipsis" data-testid="task-detail-title">{task.title}</span>
      </button>
    </h1>
  )
}
