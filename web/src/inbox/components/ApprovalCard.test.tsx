// The inbox's card for the agent's question, inside the real inbox store: it shows the question in
// the user's language, and Answer / Decline post the decision to /api/v1 (the card shows it is
// sending meanwhile, and offers its buttons again if the server refused).
import { MemoryRouter } from 'react-router-dom'
import { act } from 'react-test-renderer'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { rendered, textOf } from '../../shared/rendered'
import { InboxProvider, STORAGE_KEY } from '../lib/store'
import type { AgentQuestion } from '../lib/types'
import { ApprovalCard } from './ApprovalCard'

const QUESTION: AgentQuestion = { kind: 'question', approvalId: 'q 1', question: 'Which colour?', allowedDecisions: ['answer', 'reject'] }

interface Posted {
  url: string
  body: unknown
  answer: (response: Response) => void
}

let posted: Posted[] = []

function stubBrowser(lang: 'en' | 'zh') {
  posted = []
  // decisions are POSTs the test answers; the reloads after one (GETs) never answer here
  vi.stubGlobal('fetch', (url: string, init?: RequestInit) =>
    new Promise<Response>((resolve) => {
      if (init?.method === 'POST') posted.push({ url, body: JSON.parse(String(init.body)), answer: resolve })
    }))
  vi.stubGlobal('localStorage', { getItem: (key: string) => (key === STORAGE_KEY ? JSON.stringify({ lang }) : null), setItem: () => undefined, removeItem: () => undefined })
  vi.stubGlobal('document', { documentElement: { dataset: {}, lang: '' }, title: '' })
  vi.stubGlobal('window', { addEventListener: () => undefined, removeEventListener: () => undefined })
  vi.stubGlobal('navigator', { onLine: true, language: lang })
  vi.stubGlobal('IS_REACT_ACT_ENVIRONMENT', true)
}

function render(item: AgentQuestion) {
  return rendered(
    <MemoryRouter>
      <InboxProvider events={false}>
        <ApprovalCard taskId="t1" item={item} />
      </InboxProvider>
    </MemoryRouter>,
  )
}

async function reply(ok: boolean) {
  const response = ok
    ? new Response(JSON.stringify({ ok: true }), { status: 200, headers: { 'content-type': 'application/json' } })
    : new Response(JSON.stringify({ error: { code: 'approval_not_found', message: 'gone' } }), { status: 404, headers: { 'content-type': 'application/json' } })
  await act(async () => {
    posted.at(-1)!.answer(response)
  })
}

afterEach(() => {
  vi.unstubAllGlobals()
})

describe('the inbox question card', () => {
  beforeEach(() => stubBrowser('en'))

  it('shows the question, posts the answer and waits for the server meanwhile', async () => {
    const card = render(QUESTION)
    expect(card.text('question-text')).toBe('Which colour?')
    expect(card.one('answer-input').props.placeholder).toBe('Type your answer… (Enter to send)')
    expect(card.all('approval-hint')).toHaveLength(0)
    card.type('answer-input', '  green ')
    card.click('answer-submit')
    expect(posted.map(({ url, body }) => [url, body])).toEqual([
      ['/api/v1/tasks/t1/approvals/q%201', { decision: 'answer', message: 'green' }],
    ])
    expect(card.one('question-card').props['data-status']).toBe('sending')
    expect(card.text('card-sending')).toContain('Sending…')
    expect(card.all('decline-button')).toHaveLength(0)
    await reply(true)
    expect(card.one('question-card').props['data-status']).toBe('pending')
  })

  it('declines, and can decline again when the server refused it', async () => {
    const card = render(QUESTION)
    card.click('decline-button')
    expect(posted.map(({ body }) => body)).toEqual([{ decision: 'reject' }])
    await reply(false)
    expect(card.one('decline-button').props.disabled).toBe(false)
  })

  it('offers only what the item allows', () => {
    const card = render({ ...QUESTION, allowedDecisions: ['answer'] })
    expect(card.all('decline-button')).toHaveLength(0)
    expect(card.all('answer-submit')).toHaveLength(1)
  })
})

describe('the inbox question card in Chinese', () => {
  beforeEach(() => stubBrowser('zh'))

  it('speaks Chinese', () => {
    const card = render(QUESTION)
    expect(textOf(card.one('question-card'))).toContain('智能体向你提问')
    expect(card.text('answer-submit')).toBe('回答')
    expect(card.text('decline-button')).toBe('不回答')
  })
})
