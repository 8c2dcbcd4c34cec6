// An agent in the two-column grid: initial avatar, name, description, model, task count (§2.1).
import { Link } from 'react-router-dom'
import { useInbox } from '../lib/store'
import type { Agent } from '../lib/types'
import { Avatar } from './AppBar'
import { PlusIcon } from '../../shared/Icons'

export function AgentCard({ agent }: { agent: Agent }) {
  const { t } = useInbox()
  return (
    <Link to={`/agents/${encodeURIComponent(agent.id)}`} className="agent-card" data-testid="agent-card" data-agent-id={agent.id}>
      <div className="agent-card-top">
        <Avatar id={agent.id} name={agent.name} />
        {agent.isDefault && <span className="default-tag" data-testid="default-tag">{t('default')}</span>}
      </div>
      <div className="agent-name" data-testid="agent-name">{agent.name}</div>
      <p className={agent.description ? 'agent-desc' : 'agent-desc muted'}>{agent.description || t('noDescription')}</p>
      <div className="agent-card-foot">
        <span className="model-tag" title={agent.model ?? t('defaultModel')} data-testid="model-tag">
          {agent.model || t('defaultModel')}
        </span>
        <span className="task-count" data-testid="task-count">
          {agent.taskCount === 1 ? t('taskCountOne') : t('taskCount', { n: agent.taskCount })}
        </span>
      </div>
    </Link>
  )
}

export function NewAgentCard({ onClick }: { onClick: () => void }) {
  const { t } = useInbox()
  return (
    <button type="button" className="agent-card new" onClick={onClick} data-testid="new-agent">
      <PlusIcon size={28} />
      <span>{t('newAgent')}</span>
    </button>
  )
}
