// Approval and question cards: a paused tool call (approve / edit its JSON arguments / reject with a
// reason) or the agent's question (answer / decline). Deciding posts to
// /api/sessions/{id}/approvals/{approval_id}; the continuation streams into the chat. A decided card
// stays, read-only, showing what was decided.
import { useState } from 'react'
import { useActions, useT, useWorkbenchState } from '../lib/store'
import type { ApprovalCard as Card, Decision } from '../lib/types'
import type { DecisionType, PendingQuestion, PendingTool } from '../shared/pending'
import { parseArgs } from '../lib/approvals'
import { QuestionIcon, ShieldIcon } from '../shared/Icons'

function pretty(args: Record<string, unknown>): string {
  return JSON.stringify(args, null, 2)
}

function Outcome({ card }: { card: Card }) {
  const t = useT()
  if (card.status === 'sending') {
    return (
      <div className="card-outcome muted" data-testid="card-sending">
        <span className="spinner" aria-hidden="true" /> {t('cardSending')}
      </div>
    )
  }
  if (card.status === 'cancelled') return <div className="card-outcome muted" data-testid="card-decision">{t('cardCancelled')}</div>
  const decision = card.decision
  if (card.status !== 'decided' || !decision) return null
  const question = card.item.kind === 'question'
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
      if (question) text = t('decidedDecline')
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

function CardError({ card }: { card: Card }) {
  if (!card.error) return null
  return <div className="inline-error" role="alert" data-testid="card-error">{card.error}</div>
}

function ToolApproval({ card, item }: { card: Card; item: PendingTool }) {
  const t = useT()
  const actions = useActions()
  const busy = useWorkbenchState((state) => state.streaming)
  const [mode, setMode] = useState<'view' | 'edit' | 'reject'>('view')
  const [draft, setDraft] = useState(() => pretty(item.args))
  const [reason, setReason] = useState('')
  const open = card.status === 'pending'
  const allowed = (d: DecisionType) => item.allowed_decisions.length === 0 || item.allowed_decisions.includes(d)
  const parsed = parseArgs(draft)
  const decide = (decision: Decision) => {
    setMode('view')
    void actions.decide(item.approval_id, decision)
  }
  return (
    <div className={`approval-card status-${card.status}`} data-testid="approval-card" data-approval-id={item.approval_id}
      data-status={card.status}>
      <div className="card-head">
        <ShieldIcon />
        <strong>{open ? t('approvalNeeded') : t('approvalTitle')}</strong>
        <code className="card-tool" data-testid="approval-tool">{item.tool}</code>
      </div>
      {item.description && item.description !== `${item.tool}: ${item.input}` && (
        <div className="small muted">{item.description}</div>
      )}
      {mode === 'edit' && open ? (
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
            <button className="btn primary small" data-testid="edit-submit" disabled={!parsed.ok || busy}
              onClick={() => parsed.ok && decide({ decision: 'edit', args: parsed.args })}>
              {t('runEdited')}
            </button>
            <button className="btn small" onClick={() => setMode('view')}>{t('cancel')}</button>
          </div>
        </>
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
            <button className="btn danger small" data-testid="reject-submit" disabled={busy}
              onClick={() => decide(reason.trim() ? { decision: 'reject', message: reason.trim() } : { decision: 'reject' })}>
              {t('reject')}
            </button>
            <button className="btn small" onClick={() => setMode('view')}>{t('cancel')}</button>
          </div>
        </>
      )}
      {mode === 'view' && open && (
        <div className="card-actions">
          {allowed('approve') && (
            <button className="btn primary small" data-testid="approve-button" disabled={busy}
              onClick={() => decide({ decision: 'approve' })}>
              {t('approve')}
            </button>
          )}
          {allowed('edit') && (
            <button className="btn small" data-testid="edit-button" disabled={busy}
              onClick={() => {
                setDraft(pretty(item.args))
                setMode('edit')
              }}>
              {t('edit')}
            </button>
          )}
          {allowed('reject') && (
            <button className="btn small reject" data-testid="reject-button" disabled={busy} onClick={() => setMode('reject')}>
              {t('reject')}
            </button>
          )}
        </div>
      )}
      <Outcome card={card} />
      <CardError card={card} />
    </div>
  )
}

function QuestionCard({ card, item }: { card: Card; item: PendingQuestion }) {
  const t = useT()
  const actions = useActions()
  const busy = useWorkbenchState((state) => state.streaming)
  const [answer, setAnswer] = useState('')
  const open = card.status === 'pending'
  const allowed = (d: DecisionType) => item.allowed_decisions.length === 0 || item.allowed_decisions.includes(d)
  const submit = () => {
    if (!answer.trim() || busy) return
    void actions.decide(item.approval_id, { decision: 'answer', message: answer.trim() })
  }
  return (
    <div className={`approval-card question status-${card.status}`} data-testid="question-card"
      data-approval-id={item.approval_id} data-status={card.status}>
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
            {allowed('answer') && (
              <button className="btn primary small" data-testid="answer-submit" disabled={!answer.trim() || busy}
                onClick={submit}>
                {t('answer')}
              </button>
            )}
            {allowed('reject') && (
              <button className="btn small reject" data-testid="decline-button" disabled={busy}
                onClick={() => void actions.decide(item.approval_id, { decision: 'reject' })}>
                {t('decline')}
              </button>
            )}
          </div>
        </>
      )}
      <Outcome card={card} />
      <CardError card={card} />
    </div>
  )
}

export function ApprovalCardView({ card }: { card: Card }) {
  return card.item.kind === 'question' ? <QuestionCard card={card} item={card.item} /> : <ToolApproval card={card} item={card.item} />
}
