// The "new agent" form, as a bottom sheet: ID (checked as the server does), name, description
// and a model picker (the models of openclaw.json, or just the default).
import { useEffect, useRef, useState } from 'react'
import type { FormEvent, ReactNode } from 'react'
import { ApiError } from '../../shared/api'
import { AGENT_DESCRIPTION_MAX, AGENT_ID_MAX, AGENT_NAME_MAX } from '../lib/api'
import { errorText } from '../lib/i18n'
import { useInbox } from '../lib/store'
import { useLatest } from '../../shared/hooks'
import type { Agent } from '../lib/types'
import { validateAgent } from '../lib/validate'
import type { AgentDraft, AgentErrors } from '../lib/validate'
import { CloseIcon } from '../../shared/Icons'

export function NewAgentDialog({ onClose, onCreated }: { onClose: () => void; onCreated: (agent: Agent) => void }) {
  const { state, t, actions } = useInbox()
  const [draft, setDraft] = useState<AgentDraft>({ id: '', name: '', description: '', model: '' })
  const [submitted, setSubmitted] = useState(false)
  const [serverErrors, setServerErrors] = useState<AgentErrors>({})
  const [formError, setFormError] = useState('')
  const [busy, setBusy] = useState(false)
  const first = useRef<HTMLInputElement>(null)
  const opened = useLatest({ models: state.models, actions, onClose })

  // once, when the dialog opens
  useEffect(() => {
    first.current?.focus()
    if (opened.current.models === null) void opened.current.actions.loadModels()
    const onKey = (event: KeyboardEvent) => {
      if (event.key === 'Escape') opened.current.onClose()
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [opened])

  const local = validateAgent(draft, state.agents.map((agent) => agent.id), t)
  // the server's verdict on a field stands until that field changes
  const errors: AgentErrors = { ...(submitted ? local : {}), ...serverErrors }
  const set = (field: keyof AgentDraft) => (value: string) => {
    setDraft((current) => ({ ...current, [field]: value }))
    setServerErrors(({ [field]: _dropped, ...rest }) => rest)
    setFormError('')
  }

  const submit = async (event: FormEvent) => {
    event.preventDefault()
    setSubmitted(true)
    if (Object.keys(local).length > 0) return
    setBusy(true)
    try {
      const agent = await actions.createAgent({
        id: draft.id.trim(),
        name: draft.name.trim(),
        ...(draft.description.trim() ? { description: draft.description.trim() } : {}),
        ...(draft.model ? { model: draft.model } : {}),
      })
      onCreated(agent)
    } catch (error) {
      if (error instanceof ApiError && error.code === 'agent_exists') setServerErrors({ id: t('errIdTaken', { id: draft.id.trim() }) })
      else setFormError(errorText(t, error))
    } finally {
      setBusy(false)
    }
  }

  const models = state.models ?? []
  return (
    <div className="sheet-backdrop" onClick={onClose} data-testid="agent-dialog-backdrop">
      <form className="sheet" role="dialog" aria-modal="true" aria-labelledby="new-agent-title" onSubmit={submit} noValidate
        onClick={(event) => event.stopPropagation()} data-testid="agent-dialog">
        <div className="sheet-head">
          <h2 id="new-agent-title">{t('newAgentTitle')}</h2>
          <button type="button" className="icon-btn" onClick={onClose} aria-label={t('close')}><CloseIcon /></button>
        </div>
        <Field label={t('agentId')} error={errors.id} hint={t('agentIdHint')} htmlFor="agent-id">
          <input id="agent-id" ref={first} value={draft.id} maxLength={AGENT_ID_MAX + 10} autoCapitalize="none" autoCorrect="off"
            spellCheck={false} inputMode="url" placeholder="travel" data-testid="agent-id"
            onChange={(event) => set('id')(event.target.value)} aria-invalid={!!errors.id} />
        </Field>
        <Field label={t('agentName')} error={errors.name} htmlFor="agent-name">
          <input id="agent-name" value={draft.name} maxLength={AGENT_NAME_MAX + 10} placeholder={t('agentNamePlaceholder')}
            data-testid="agent-name-input" onChange={(event) => set('name')(event.target.value)} aria-invalid={!!errors.name} />
        </Field>
        <Field label={t('agentDescription')} error={errors.description} htmlFor="agent-description">
          <textarea id="agent-description" rows={2} value={draft.description} maxLength={AGENT_DESCRIPTION_MAX + 10}
            placeholder={t('agentDescriptionPlaceholder')} data-testid="agent-description"
            onChange={(event) => set('description')(event.target.value)} aria-invalid={!!errors.description} />
        </Field>
        <Field label={t('agentModel')} htmlFor="agent-model">
          <select id="agent-model" value={draft.model} data-testid="agent-model" onChange={(event) => set('model')(event.target.value)}>
            <option value="">{t('defaultModel')}</option>
            {models.map((model) => (
              <option key={model.id} value={model.id}>
                {model.name && model.name !== model.id ? `${model.name} (${model.id})` : model.id}
              </option>
            ))}
          </select>
        </Field>
        {formError && <p className="form-error" role="alert" data-testid="agent-form-error">{formError}</p>}
        <div className="sheet-actions">
          <button type="button" className="btn" onClick={onClose}>{t('cancel')}</button>
          <button type="submit" className="btn primary" disabled={busy} data-testid="agent-submit">
            {busy ? t('creating') : t('create')}
          </button>
        </div>
      </form>
    </div>
  )
}

function Field({ label, error, hint, htmlFor, children }: {
  label: string
  error?: string
  hint?: string
  htmlFor: string
  children: ReactNode
}) {
  return (
    <div className={error ? 'field invalid' : 'field'}>
      <label htmlFor={htmlFor}>{label}</label>
      {children}
      {error ? <p className="field-error" role="alert" data-testid={`${htmlFor}-error`}>{error}</p> : hint && <p className="field-hint">{hint}</p>}
    </div>
  )
}
