// A tool call waiting for the user's approval, in the task detail's footer: which tool and what it
// would run, an optional reason, and Reject / Approve. Buttons only: typing alone never approves
// (nothing runs until Approve is tapped); the reason goes with Reject.
import { useState } from 'react'
import { useInbox } from '../lib/store'
import { LockIcon } from '../../shared/Icons'
import type { ToolApproval } from '../lib/types'

interface Props {
  taskId: string
  item: ToolApproval
}

export function ApprovalCard({ taskId, item }: Props) {
  const { t, actions } = useInbox()
  const [reason, setReason] = useState('')
  const [sending, setSending] = useState(false)

  const decide = async (decision: 'approve' | 'reject') => {
    if (sending) return
    setSending(true)
    const ok = await actions.decide(taskId, item, decision, decision === 'reject' ? reason.trim() || undefined : undefined)
    setSending(false)
    if (ok) setReason('')
  }

  return (
    <section className="approval-card" data-testid="approval-card" data-approval-id={item.approvalId} aria-live="polite">
      <h2 className="approval-title" data-testid="approval-title">
        <LockIcon />
        <span>{t('approvalTitle', { tool: item.tool })}</span>
      </h2>
      <pre className="approval-input" data-testid="approval-input">{item.input}</pre>
      <input className="approval-reason" value={reason} maxLength={2000} placeholder={t('rejectReasonPlaceholder')}
        aria-label={t('rejectReasonPlaceholder')} data-testid="reject-reason" enterKeyHint="done"
        onChange={(event) => setReason(event.target.value)}
        onKeyDown={(event) => {
          if (event.key === 'Enter') event.preventDefault() // Enter decides nothing: tap a button
        }} />
      <div className="approval-actions">
        <button type="button" className="btn danger" disabled={sending} onClick={() => void decide('reject')}
          data-testid="reject-button">
          {t('reject')}
        </button>
        <button type="button" className="btn primary" disabled={sending} onClick={() => void decide('approve')}
          data-testid="approve-button">
          {t('approve')}
        </button>
      </div>
      <p className="approval-hint">{t('approvalHint')}</p>
    </section>
  )
}
