// The one approval / question card of both UIs, presentational: a paused tool call (approve / edit
// its JSON arguments / reject with a reason) or the agent's question (answer / decline), offering
// exactly the item's allowed decisions. The caller owns the state (`state`, `busy`) and posting
// (`decide`); the card keeps only its drafts. A decided card stays, read-only, showing what was
// decided. Two layouts: `chat` (the workbench's bubble: the arguments as JSON, Reject asks for a
// reason) and `footer` (the inbox's phone footer: the input as people read it, the reason box
// always there so one tap rejects with it). Nothing is decided by typing alone: buttons decide.
import { useState } from 'react'
import type { KeyboardEvent } from 'react'
import { LockIcon, QuestionIcon, ShieldIcon } from './Icons'
import type { Vars } from './i18n'
import { parseArgs } from './pending'
import type { CardState, Decision, DecisionType, PendingItem, PendingQuestion, PendingTool } from './pending'

/** The text the card shows: each UI's dictionary has these keys. */
export type CardKey =
  | 'approvalNeeded' | 'approvalTitle' | 'arguments' | 'argsInvalidJson' | 'argsNotObject'
  | 'approve' | 'edit' | 'reject' | 'runEdited' | 'cancel' | 'rejectReason'
  | 'questionTitle' | 'answerPlaceholder' | 'answer' | 'decline'
  | 'decidedApprove' | 'decidedEdit' | 'decidedReject' | 'decidedRejectWith' | 'decidedAnswer' | 'decidedDecline'
  | 'cardSending' | 'cardCancelled'

export type CardTranslate = (key: CardKey, vars?: Vars) => string

export interface ApprovalCardProps {
  item: PendingItem
  state: CardState
  /** another decision or turn is going on: the buttons wait */
  busy: boolean
  decide: (decision: Decision) => void
  t: CardTranslate
  layout?: 'chat' | 'footer'
  /** a line under the open card's buttons (the footer's "nothing runs until you approve") */
  hint?: string
}

function pretty(args: Record<string, unknown>): string {
  return JSON.stringify(args, null, 2)
}

function allows(item: PendingItem, decision: DecisionType): boolean {
  return item.allowed_decisions.length === 0 || item.allowed_decisions.includes(decision)
}

function Outcome({ item, state, t }: { item: PendingItem; state: CardState; t: CardTranslate }) {
  if (state.status === 'sending') {
    return (
      <div className="card-outcome muted" data-testid="card-sending">
        <span className="spinner" aria-hidden="true" /> {t('cardSending')}
      </div>
    )
  }
  if (state.status === 'cancelled') return <div className="card-outcome muted" data-testid="card-decision">{t('cardCancelled')}</div>
  const decision = state.decision
  if (state.status !== 'decided' || !decision) return null
  let text: string
  switch (decision.decision) {
    case 'approve':
      text = t('decidedApprove')
      break
    case 'edit':
      text = t('decidedEdit')
      break
    case 'answer':
      text = t('decidedAnswer', { message: decision.message ?? '' })
      break
    default:
      if (item.kind === 'question') text = t('decidedDecline')
      else text = decision.message ? t('decidedRejectWith', { message: decision.message }) : t('decidedReject')
  }
  const tone = decision.decision === 'reject' ? 'rejected' : 'approved'
  return (
    <div className={`card-outcome ${tone}`} data-testid="card-decision" data-decision={decision.decision}>
      <span>{text}</span>
      {decision.decision === 'edit' && decision.args && <pre className="card-args">{pretty(decision.args)}</pre>}
    </div>
  )
}

function CardError({ state }: { state: CardState }) {
  if (!state.error) return null
  return <div className="inline-error" role="alert" data-testid="card-error">{state.error}</div>
}

/** The edited arguments: a JSON editor, its error, Run with these / Cancel. */
function ArgsEditor({ item, busy, t, onSubmit, onCancel }: {
  item: PendingTool
  busy: boolean
  t: CardTranslate
  onSubmit: (args: Record<string, unknown>) => void
  onCancel: () => void
}) {
  const [draft, setDraft] = useState(() => pretty(item.args))
  const parsed = parseArgs(draft)
  return (
    <>
      <label className="tool-label" htmlFor={`args-${item.approval_id}`}>{t('arguments')}</label>
      <textarea id={`args-${item.approval_id}`} className="card-editor mono" data-testid="args-editor" spellCheck={false}
        rows={Math.min(12, draft.split('\n').length + 1)} value={draft} aria-invalid={!parsed.ok}
        onChange={(e) => setDraft(e.target.value)} />
      {!parsed.ok && (
        <div className="field-error" data-testid="args-error">
          {t(parsed.key, { error: parsed.error ?? '' })}
        </div>
      )}
      <div className="card-actions">
        <button type="button" className="btn primary small" data-testid="edit-submit" disabled={!parsed.ok || busy}
          onClick={() => parsed.ok && onSubmit(parsed.args)}>
          {t('runEdited')}
        </button>
        <button type="button" className="btn small" onClick={onCancel}>{t('cancel')}</button>
      </div>
    </>
  )
}

function noEnter(event: KeyboardEvent) {
  if (event.key === 'Enter') event.preventDefault() // Enter decides nothing: tap a button
}

function ToolApproval({ item, state, busy, decide, t, layout, hint }: ApprovalCardProps & { item: PendingTool }) {
  const [mode, setMode] = useState<'view' | 'edit' | 'reject'>('view')
  const [reason, setReason] = useState('')
  const open = state.status === 'pending'
  const footer = layout === 'footer'
  const send = (decision: Decision) => {
    setMode('view')
    decide(decision)
  }
  const reject = () => send(reason.trim() ? { decision: 'reject', message: reason.trim() } : { decision: 'reject' })
  const rejectButton = (onClick: () => void) => (
    <button type="button" className={footer ? 'btn danger' : 'btn small reject'} data-testid="reject-button"
      disabled={busy} onClick={onClick}>
      {t('reject')}
    </button>
  )
  return (
    <section className={`approval-card status-${state.status}`} data-testid="approval-card" data-approval-id={item.approval_id}
      data-status={state.status} aria-live="polite">
      {footer ? (
        <h2 className="approval-title" data-testid="approval-title">
          <LockIcon />
          <span>{t('approvalTitle', { tool: item.tool })}</span>
        </h2>
      ) : (
        <div className="card-head">
          <ShieldIcon />
          <strong>{open ? t('approvalNeeded') : t('approvalTitle')}</strong>
          <code className="card-tool" data-testid="approval-tool">{item.tool}</code>
        </div>
      )}
      {!footer && item.description && item.description !== `${item.tool}: ${item.input}` && (
        <div className="small muted">{item.description}</div>
      )}
      {mode === 'edit' && open ? (
        <ArgsEditor item={item} busy={busy} t={t} onSubmit={(args) => send({ decision: 'edit', args })}
          onCancel={() => setMode('view')} />
      ) : footer ? (
        <pre className="approval-input" data-testid="approval-input">{item.input}</pre>
      ) : (
        <>
          <div className="tool-label">{t('arguments')}</div>
          <pre className="card-args" data-testid="approval-args">{pretty(item.args)}</pre>
        </>
      )}
      {mode === 'reject' && open && (
        <>
          <textarea className="card-editor" data-testid="reject-message" rows={2} placeholder={t('rejectReason')}
            aria-label={t('rejectReason')} value={reason} onChange={(e) => setReason(e.target.value)} autoFocus />
          <div className="card-actions">
            <button type="button" className="btn danger small" data-testid="reject-submit" disabled={busy} onClick={reject}>
              {t('reject')}
            </button>
            <button type="button" className="btn small" onClick={() => setMode('view')}>{t('cancel')}</button>
          </div>
        </>
      )}
      {mode === 'view' && open && footer && (
        <>
          {allows(item, 'reject') && (
            <input className="approval-reason" value={reason} maxLength={2000} placeholder={t('rejectReason')}
              aria-label={t('rejectReason')} data-testid="reject-reason" enterKeyHint="done"
              onChange={(event) => setReason(event.target.value)} onKeyDown={noEnter} />
          )}
          <div className="approval-actions">
            {allows(item, 'reject') && rejectButton(reject)}
            {allows(item, 'approve') && (
              <button type="button" className="btn primary" disabled={busy} onClick={() => send({ decision: 'approve' })}
                data-testid="approve-button">
                {t('approve')}
              </button>
            )}
            {allows(item, 'edit') && (
              <button type="button" className="btn wide" data-testid="edit-button" disabled={busy}
                onClick={() => setMode('edit')}>
                {t('edit')}
              </button>
            )}
          </div>
          {hint && <p className="approval-hint">{hint}</p>}
        </>
      )}
      {mode === 'view' && open && !footer && (
        <div className="card-actions">
          {allows(item, 'approve') && (
            <button type="button" className="btn primary small" data-testid="approve-button" disabled={busy}
              onClick={() => send({ decision: 'approve' })}>
              {t('approve')}
            </button>
          )}
          {allows(item, 'edit') && (
            <button type="button" className="btn small" data-testid="edit-button" disabled={busy} onClick={() => setMode('edit')}>
              {t('edit')}
            </button>
          )}
          {allows(item, 'reject') && rejectButton(() => setMode('reject'))}
        </div>
      )}
      <Outcome item={item} state={state} t={t} />
      <CardError state={state} />
    </section>
  )
}

function QuestionCard({ item, state, busy, decide, t }: ApprovalCardProps & { item: PendingQuestion }) {
  const [answer, setAnswer] = useState('')
  const open = state.status === 'pending'
  const submit = () => {
    if (!answer.trim() || busy) return
    decide({ decision: 'answer', message: answer.trim() })
  }
  return (
    <section className={`approval-card question status-${state.status}`} data-testid="question-card"
      data-approval-id={item.approval_id} data-status={state.status}>
      <div className="card-head">
        <QuestionIcon />
        <strong>{t('questionTitle')}</strong>
      </div>
      <div className="card-question" data-testid="question-text">{item.question}</div>
      {open && (
        <>
          <textarea className="card-editor" data-testid="answer-input" rows={2} placeholder={t('answerPlaceholder')}
            aria-label={t('answerPlaceholder')} value={answer} onChange={(e) => setAnswer(e.target.value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && !e.shiftKey && !e.nativeEvent.isComposing) {
                e.preventDefault()
                submit()
              }
            }} />
          <div className="card-actions">
            {allows(item, 'answer') && (
              <button type="button" className="btn primary small" data-testid="answer-submit" disabled={!answer.trim() || busy}
                onClick={submit}>
                {t('answer')}
              </button>
            )}
            {allows(item, 'reject') && (
              <button type="button" className="btn small reject" data-testid="decline-button" disabled={busy}
                onClick={() => decide({ decision: 'reject' })}>
                {t('decline')}
              </button>
            )}
          </div>
        </>
      )}
      <Outcome item={item} state={state} t={t} />
      <CardError state={state} />
    </section>
  )
}

export function ApprovalCard(props: ApprovalCardProps) {
  const { item } = props
  return item.kind === 'question' ? <QuestionCard {...props} item={item} /> : <ToolApproval {...props} item={item} />
}
