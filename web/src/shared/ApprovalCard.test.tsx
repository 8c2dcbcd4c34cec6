// The shared approval / question card, rendered with each UI's own dictionary: it offers exactly the
// item's allowed decisions, and each button hands `decide` the decision as both APIs take it.
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { translate as inboxText } from '../inbox/lib/i18n'
import { translate as workbenchText } from '../lib/i18n'
import { ApprovalCard } from './ApprovalCard'
import { rendered } from './rendered'
import type { ApprovalCardProps, CardTranslate } from './ApprovalCard'
import type { CardState, Decision, PendingQuestion, PendingTool } from './pending'

const ARGS = { command: 'echo hi' }
const TOOL: PendingTool = { kind: 'tool', approval_id: 'ap1', tool: 'terminal', args: ARGS, input: ARGS.command, allowed_decisions: ['approve', 'edit', 'reject'] }
const QUESTION: PendingQuestion = { kind: 'question', approval_id: 'q1', question: 'Which colour?', allowed_decisions: ['answer', 'reject'] }
const PENDING: CardState = { status: 'pending' }
const inboxT: CardTranslate = (key, vars) => inboxText('en', key, vars)
const inboxZh: CardTranslate = (key, vars) => inboxText('zh', key, vars)
const workbenchT: CardTranslate = (key, vars) => workbenchText('en', key, vars)

function render(props: Partial<ApprovalCardProps> & Pick<ApprovalCardProps, 'item'>) {
  const decided: Decision[] = []
  const card = rendered(
    <ApprovalCard state={PENDING} busy={false} t={workbenchT} decide={(decision) => decided.push(decision)} {...props} />,
  )
  return { decided, ...card }
}

beforeEach(() => {
  vi.stubGlobal('IS_REACT_ACT_ENVIRONMENT', true)
})

afterEach(() => {
  vi.unstubAllGlobals()
})

describe('the approval card in the inbox footer', () => {
  it('approves, and rejects in one tap with the reason typed', () => {
    const card = render({ item: TOOL, layout: 'footer', t: inboxT, hint: 'hint' })
    expect(card.text('approval-title')).toBe('Allow terminal to run?')
    expect(card.text('approval-input')).toBe('echo hi')
    card.click('approve-button')
    card.type('reject-reason', '  not here ')
    card.click('reject-button')
    expect(card.decided).toEqual([{ decision: 'approve' }, { decision: 'reject', message: 'not here' }])
  })

  it('edits the arguments as JSON, refusing what is not a JSON object', () => {
    const card = render({ item: TOOL, layout: 'footer', t: inboxT })
    card.click('edit-button')
    expect(card.one('args-editor').props.value).toBe('{\n  "command": "echo hi"\n}')
    card.type('args-editor', '{"command": ')
    expect(card.text('args-error')).toContain('Not valid JSON')
    expect(card.one('edit-submit').props.disabled).toBe(true)
    card.type('args-editor', '["ls"]')
    expect(card.text('args-error')).toContain('must be a JSON object')
    card.type('args-editor', '{"command": "echo changed"}')
    expect(card.all('args-error')).toHaveLength(0)
    card.click('edit-submit')
    expect(card.decided).toEqual([{ decision: 'edit', args: { command: 'echo changed' } }])
    expect(card.all('args-editor')).toHaveLength(0) // back to the buttons
  })

  it('offers only what the item allows, in Chinese too', () => {
    const card = render({ item: { ...TOOL, allowed_decisions: ['approve', 'reject'] }, layout: 'footer', t: inboxZh })
    expect(card.all('edit-button')).toHaveLength(0)
    expect(card.text('approval-title')).toBe('允许运行 terminal 吗？')
    expect(card.one('reject-reason').props.placeholder).toBe('拒绝理由（可选）')
  })

  it('waits while its decision is sent', () => {
    const card = render({ item: TOOL, layout: 'footer', t: inboxT, state: { status: 'sending' }, busy: true })
    expect(card.all('approve-button')).toHaveLength(0)
    expect(card.text('card-sending')).toContain('Sending…')
  })
})

describe('the approval card in a workbench chat', () => {
  it('asks for the reason after Reject', () => {
    const card = render({ item: TOOL })
    expect(card.text('approval-tool')).toBe('terminal')
    expect(card.text('approval-args')).toContain('"command": "echo hi"')
    card.click('reject-button')
    card.type('reject-message', 'no')
    card.click('reject-submit')
    expect(card.decided).toEqual([{ decision: 'reject', message: 'no' }])
  })

  it('shows a decided card read-only, an edit with its arguments', () => {
    const state: CardState = { status: 'decided', decision: { decision: 'edit', args: { command: 'ls' } } }
    const card = render({ item: TOOL, state })
    expect(card.all('approve-button')).toHaveLength(0)
    expect(card.text('card-decision')).toContain('Edited and approved')
    expect(card.text('card-decision')).toContain('"command": "ls"')
  })

  it('disables the buttons while another decision or turn runs', () => {
    const card = render({ item: TOOL, busy: true })
    expect(card.one('approve-button').props.disabled).toBe(true)
    expect(card.one('edit-button').props.disabled).toBe(true)
  })
})

describe('the question card', () => {
  it('answers (not with blanks) or declines', () => {
    const card = render({ item: QUESTION })
    expect(card.text('question-text')).toBe('Which colour?')
    expect(card.one('answer-submit').props.disabled).toBe(true)
    card.type('answer-input', ' green ')
    card.click('answer-submit')
    card.click('decline-button')
    expect(card.decided).toEqual([{ decision: 'answer', message: 'green' }, { decision: 'reject' }])
  })

  it('offers no decline where the item does not allow it', () => {
    const card = render({ item: { ...QUESTION, allowed_decisions: ['answer'] } })
    expect(card.all('decline-button')).toHaveLength(0)
  })
})
