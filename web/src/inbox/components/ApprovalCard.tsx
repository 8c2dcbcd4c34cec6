// A tool call waiting for the user's approval, in the task detail's footer: the shared card
// (shared/ApprovalCard, footer layout) wired to the inbox store. Which tool and what it would run,
// Reject (with an optional reason) / Approve, and Edit (run it with other arguments) where the item
// allows it. Buttons only: typing alone never approves (nothing runs until Approve is tapped).
import { useState } from 'react'
import { ApprovalCard as Card } from '../../shared/ApprovalCard'
import type { Decision } from '../../shared/pending'
import { snakeCased } from '../../shared/pending'
import { useInbox } from '../lib/store'
import type { ToolApproval } from '../lib/types'

interface Props {
  taskId: string
  item: ToolApproval
}

export function ApprovalCard({ taskId, item }: Props) {
  const { t, actions } = useInbox()
  const [sending, setSending] = useState(false)

  const decide = async (decision: Decision) => {
    if (sending) return
    setSending(true)
    await actions.decide(taskId, item, decision)
    setSending(false)
  }

  return (
    <Card item={snakeCased(item)} state={{ status: sending ? 'sending' : 'pending' }} busy={sending} t={t}
      decide={(decision) => void decide(decision)} layout="footer" hint={t('approvalHint')} />
  )
}
