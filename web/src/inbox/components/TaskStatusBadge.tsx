// A task's status as a coloured badge: six statuses, six colours (seed §8.5).
import { STATUS_KEY } from '../lib/i18n'
import { useInbox } from '../lib/store'
import type { TaskStatus } from '../lib/types'

export function TaskStatusBadge({ status }: { status: TaskStatus }) {
  const { t } = useInbox()
  return (
    <span className={`status-badge status-${status}`} data-testid="status-badge" data-status={status}>
      {status === 'running' && <span className="pulse" aria-hidden="true" />}
      {t(STATUS_KEY[status])}
    </span>
  )
}
