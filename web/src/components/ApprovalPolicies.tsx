// The tool approval policy (allow / ask / deny per tool) of the workbench's workspace, read and
// saved through GET/PUT /api/config/tool-approvals. A change is saved at once.
import { useCallback, useEffect, useState } from 'react'
import { api } from '../lib/api'
import { ASK_USER_TOOL } from '../lib/chat'
import { useActions, useT } from '../lib/store'
import type { Policy, ToolApprovals } from '../lib/types'

const POLICIES: Policy[] = ['allow', 'ask', 'deny']

export function ApprovalPolicies() {
  const t = useT()
  const actions = useActions()
  const [data, setData] = useState<ToolApprovals | null>(null)
  const [saving, setSaving] = useState(false)

  const fail = useCallback(
    (error: unknown) => actions.notify({ kind: 'error', text: error instanceof Error ? error.message : String(error) }),
    [actions],
  )

  useEffect(() => {
    let live = true
    api
      .toolApprovals()
      .then((result) => live && setData(result))
      .catch((error: unknown) => live && fail(error))
    return () => {
      live = false
    }
  }, [fail])

  const save = async (policies: ToolApprovals['configured'], notice: string) => {
    setSaving(true)
    try {
      setData(await api.setToolApprovals(policies))
      actions.notify({ kind: 'info', text: notice })
    } catch (error) {
      fail(error)
    } finally {
      setSaving(false)
    }
  }

  if (!data) return <div className="muted pad">{t('loading')}</div>
  const tools = Object.keys(data.policies).sort()
  const policyName = (policy: Policy) => t(`policy_${policy}`)
  return (
    <div className="policies" data-testid="approval-policies">
      <p className="small muted">{t('approvalsHint')}</p>
      {data.listens_beyond_loopback && <p className="small warn-text">{t('beyondLoopback')}</p>}
      <ul className="policy-list">
        {tools.map((tool) => {
          const current = data.policies[tool]
          const fallback = data.inherited[tool] ?? data.defaults[tool]
          return (
            <li key={tool} className="policy-row" data-testid="policy-row" data-tool={tool}>
              <label htmlFor={`policy-${tool}`}>
                <code>{tool}</code>
                {fallback && <span className="small muted">{t('policyDefault', { policy: policyName(fallback) })}</span>}
              </label>
              <select id={`policy-${tool}`} value={current} disabled={saving} data-testid={`policy-${tool}`}
                className={`policy-select policy-${current}`}
                onChange={(e) => {
                  const policy = e.target.value as Policy
                  void save(
                    { ...data.configured, [tool]: policy },
                    t('policySaved', { tool, policy: policyName(policy) }),
                  )
                }}>
                {POLICIES.filter((p) => tool !== ASK_USER_TOOL || p !== 'allow').map((p) => (
                  <option key={p} value={p}>{policyName(p)}</option>
                ))}
              </select>
            </li>
          )
        })}
      </ul>
      <button className="btn small" data-testid="reset-policies" disabled={saving || Object.keys(data.configured).length === 0}
        onClick={() => void save({}, t('policiesReset'))}>
        {t('resetPolicies')}
      </button>
    </div>
  )
}
