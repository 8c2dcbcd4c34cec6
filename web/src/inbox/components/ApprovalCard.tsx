// What a waiting task waits for, in the task detail's footer: the shared card (shared/ApprovalCard)
// wired to the inbox store. A tool call: which tool and what it would run, Reject (with an optional
// reason) / Approve, and Edit (run it with other arguments) where the item allows it. The agent's
// question: the question, an answer box, Answer / Decline as the item allows. Buttons only: typing
// alone never approves (nothing runs until Approve is tapped).
import { useState } from 'react'
import { ApprovalCard as Card } from '../../shared/ApprovalCard'
import type { Decision } from '../../shared/pending'
import { snakeCased } from '../../shared/pending'
import { useInbox } from '../lib/store'
import type { Pending } from '../lib/types'

interface Props {
  taskId: string
  item: Pending
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
      decide={(decision) => void decide(decision)} layout="footer"
      hint={item.kind === 'tool' ? t('approvalHint') : undefined} />
  )
}
