// The new-agent form's checks: the same rules as the server (id ^[a-z0-9][a-z0-9-]*$ and at most
// 64 characters, name 1–100, description at most 500), plus "not already taken".
import { AGENT_DESCRIPTION_MAX, AGENT_ID_MAX, AGENT_ID_PATTERN, AGENT_NAME_MAX } from './api'
import type { Translate } from './i18n'

export interface AgentDraft {
  id: string
  name: string
  description: string
  model: string
}

export type AgentErrors = Partial<Record<keyof AgentDraft, string>>

export function validateAgent(draft: AgentDraft, taken: string[], t: Translate): AgentErrors {
  const errors: AgentErrors = {}
  const id = draft.id.trim()
  if (!id) errors.id = t('errIdRequired')
  else if (id.length > AGENT_ID_MAX) errors.id = t('errIdTooLong', { n: AGENT_ID_MAX })
  else if (!AGENT_ID_PATTERN.test(id)) errors.id = t('errIdPattern')
  else if (taken.includes(id)) errors.id = t('errIdTaken', { id })
  const name = draft.name.trim()
  if (!name) errors.name = t('errNameRequired')
  else if (name.length > AGENT_NAME_MAX) errors.name = t('errTooLong', { n: AGENT_NAME_MAX })
  if (draft.description.trim().length > AGENT_DESCRIPTION_MAX) errors.description = t('errTooLong', { n: AGENT_DESCRIPTION_MAX })
  return errors
}
