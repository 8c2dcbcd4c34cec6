import { useCallback, useEffect, useMemo, useState } from 'react'
import { ApiError } from '../shared/api'
import { api } from '../lib/api'
import { useActions, useT, useWorkbenchState } from '../lib/store'
import type { SkillsResponse } from '../lib/types'
import { ApprovalPolicies } from './ApprovalPolicies'
import { SaveIcon } from '../shared/Icons'
import { MonacoEditor } from './MonacoEditor'

const CORE_FILES = [
  'workspace/SOUL.md',
  'workspace/IDENTITY.md',
  'workspace/USER.md',
  'workspace/AGENTS.md',
  'memory/MEMORY.md',
  'SKILLS_SNAPSHOT.md',
]

export function Inspector() {
  const theme = useWorkbenchState((state) => state.theme)
  const actions = useActions()
  const t = useT()
  const [skills, setSkills] = useState<SkillsResponse | null>(null)
  const [path, setPath] = useState('memory/MEMORY.md')
  const [content, setContent] = useState('')
  const [revision, setRevision] = useState(0) // bumped when a file's content is loaded into the editor
  const [saved, setSaved] = useState('')
  const [tokens, setTokens] = useState<number | null>(null)
  const [missing, setMissing] = useState(false)
  const [tab, setTab] = useState<'files' | 'skills' | 'approvals'>('files')
  const dirty = content !== saved

  const loadSkills = useCallback(() => {
    api.skills().then(setSkills).catch(() => setSkills(null))
  }, [])
  useEffect(loadSkills, [loadSkills])

  const files = useMemo(() => {
    const list = [...CORE_FILES]
    for (const skill of skills?.skills ?? []) if (!list.includes(skill.location)) list.push(skill.location)
    for (const problem of skills?.problems ?? []) if (!list.includes(problem.location)) list.push(problem.location)
    return list
  }, [skills])

  const [tokenMap, setTokenMap] = useState<Record<string, number>>({})
  useEffect(() => {
    api
      .fileTokens(files)
      .then((result) => setTokenMap(Object.fromEntries(result.files.map((f) => [f.path, f.tokens]))))
      .catch(() => setTokenMap({}))
  }, [files, saved])

  useEffect(() => {
    let live = true
    api
      .readFile(path)
      .then((file) => {
        if (!live) return
        setContent(file.content)
        setRevision((r) => r + 1)
        setSaved(file.content)
        setTokens(file.tokens)
        setMissing(false)
      })
      .catch((error: unknown) => {
        if (!live) return
        setContent('')
        setRevision((r) => r + 1)
        setSaved('')
        setTokens(0)
        if (error instanceof ApiError && error.status === 404) setMissing(true)
        else actions.notify({ kind: 'error', text: error instanceof Error ? error.message : String(error) })
      })
    return () => {
      live = false
    }
  }, [path, actions])

  const save = useCallback(async (text: string = content) => {
    try {
      const result = await api.saveFile(path, text)
      setContent(text)
      setSaved(text)
      setTokens(result.tokens)
      setMissing(false)
      actions.notify({ kind: 'info', text: t('saved', { path: result.path }) })
      if (path.startsWith('skills/')) loadSkills()
      void actions.refreshTokens()
    } catch (error) {
      actions.notify({ kind: 'error', text: error instanceof Error ? error.message : String(error) })
    }
  }, [path, content, actions, t, loadSkills])

  return (
    <div className="inspector">
      <div className="pane-head tabs">
        <button className={tab === 'files' ? 'tab active' : 'tab'} onClick={() => setTab('files')} data-testid="tab-files">
          {t('files')}
        </button>
        <button className={tab === 'skills' ? 'tab active' : 'tab'} onClick={() => setTab('skills')} data-testid="tab-skills">
          {t('skills')} {skills ? `(${skills.skills.length})` : ''}
        </button>
        <button className={tab === 'approvals' ? 'tab active' : 'tab'} onClick={() => setTab('approvals')}
          data-testid="tab-approvals">
          {t('approvalsTab')}
        </button>
      </div>
      <div className={tab === 'files' ? 'editor-pane' : 'editor-pane hidden'}>
        <div className="file-bar">
          <select value={path} data-testid="file-picker"
            onChange={(e) => {
              if (dirty && !window.confirm(`${t('unsaved')}: ${path}`)) return
              setPath(e.target.value)
            }}>
            {files.map((f) => (
              <option key={f} value={f}>
                {f}
                {tokenMap[f] !== undefined ? ` · ${tokenMap[f]}` : ''}
              </option>
            ))}
          </select>
          <button className="btn primary small" onClick={() => void save()} disabled={!dirty} data-testid="save-file"
            title="Ctrl/Cmd+S">
            <SaveIcon /> {t('save')}
          </button>
        </div>
        <div className="file-meta">
          <span data-testid="file-tokens">{tokens ?? '…'} {t('tokens')}</span>
          {dirty && <span className="dirty" data-testid="dirty-marker">● {t('unsaved')}</span>}
          {missing && <span className="muted">{t('fileMissing')}</span>}
        </div>
        <MonacoEditor path={path} value={content} revision={revision} theme={theme}
          onChange={setContent} onSave={(text) => void save(text)} />
      </div>
      {tab === 'approvals' && <ApprovalPolicies />}
      {tab === 'skills' && (
        <div className="skills" data-testid="skills-list">
          {(skills?.skills ?? []).map((skill) => (
            <div key={skill.location} className={skill.available ? 'skill' : 'skill unavailable'} data-testid="skill">
              <div className="skill-head">
                <strong>{skill.emoji ? `${skill.emoji} ` : ''}{skill.name}</strong>
                <span className={skill.available ? 'pill ok' : 'pill warn'}>
                  {skill.available ? t('available') : t('unavailable')}
                </span>
              </div>
              <div className="small">{skill.description}</div>
              {skill.missing.length > 0 && (
                <div className="small warn-text">{t('missing', { items: skill.missing.join(', ') })}</div>
              )}
              <button className="link small" onClick={() => { setPath(skill.location); setTab('files') }}>
                <code>{skill.location}</code>
              </button>
            </div>
          ))}
          {(skills?.problems ?? []).length > 0 && (
            <div className="skill unavailable">
              <strong>{t('problems')}</strong>
              {skills!.problems.map((p) => (
                <div key={p.location} className="small"><code>{p.location}</code>: {p.error}</div>
              ))}
            </div>
          )}
        </div>
      )}
    </div>
  )
}
