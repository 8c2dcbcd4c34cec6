// The workbench's approval and question cards: the shared card (shared/ApprovalCard) in a chat
// bubble, wired to the workbench store. Deciding posts to /api/sessions/{id}/approvals/{approval_id};
// the continuation streams into the chat.
import { useActions, useT, useWorkbenchState } from '../lib/store'
import type { ApprovalCard as Card } from '../lib/types'
import { ApprovalCard } from '../shared/ApprovalCard'

export function ApprovalCardView({ card }: { card: Card }) {
  const t = useT()
  const actions = useActions()
  const busy = useWorkbenchState((state) => state.streaming)
  return (
    <ApprovalCard item={card.item} state={card} busy={busy} t={t}
      decide={(decision) => void actions.decide(card.item.approval_id, decision)} />
  )
}
