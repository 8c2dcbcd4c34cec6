// The agent's question in the inbox's task detail, with the real store and page: the footer shows
// it on the shared card (in the user's language) above the reply box; Answer / Decline post the
// decision to /api/v1 (the card shows it is sending meanwhile, and offers its buttons again if the
// server refused), offering only what the item allows.
import { MemoryRouter, Route, Routes } from 'react-router-dom'
import { act } from 'react-test-renderer'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { rendered, textOf } from '../../shared/rendered'
import { TaskDetailPage } from './TaskDetailPage'
import { InboxProvider, STORAGE_KEY } from '../lib/store'
import type { AgentQuestion, Task } from '../lib/types'

const QUESTION: AgentQuestion = { kind: 'question', approvalId: 'q 1', question: 'Which colour?', allowedDecisions: ['answer', 'reject'] }

interface Posted {
  url: string
  body: unknown
  answer: (response: Response) => void
}

let posted: Posted[] = []
let opened: ReturnType<typeof rendered> | undefined

function json(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } })
}

/** A browser whose server has task t1 waiting for `item`; decisions (POSTs) wait for the test. */
function stubBrowser(lang: 'en' | 'zh', item: AgentQuestion) {
  posted = []
  const task: Task = { id: 't1', agentId: 'main', title: 'Paint', titleLocked: false, status: 'waiting', createdAt: 1, updatedAt: 1, waitingFor: [item] }
  vi.stubGlobal('fetch', (url: string, init?: RequestInit) =>
    new Promise<Response>((resolve) => {
      if (init?.method === 'POST') posted.push({ url, body: JSON.parse(String(init.body)), answer: resolve })
      else if (url === '/api/v1/tasks/t1') resolve(json(task))
      else if (url === '/api/v1/tasks/t1/messages') resolve(json([]))
    }))
  vi.stubGlobal('localStorage', { getItem: (key: string) => (key === STORAGE_KEY ? JSON.stringify({ lang }) : null), setItem: () => undefined, removeItem: () => undefined })
  vi.stubGlobal('document', { documentElement: { dataset: {}, lang: '' }, title: '' })
  vi.stubGlobal('window', { addEventListener: () => undefined, removeEventListener: () => undefined })
  vi.stubGlobal('navigator', { onLine: true, language: lang })
  vi.stubGlobal('IS_REACT_ACT_ENVIRONMENT', true)
}

/** The task detail page of t1, once the task has loaded. */
async function openTask(lang: 'en' | 'zh', item: AgentQuestion = QUESTION) {
  stubBrowser(lang, item)
  const page = rendered(
    <MemoryRouter initialEntries={['/agents/main/tasks/t1']}>
      <InboxProvider events={false}>
        <Routes>
          <Route path="/agents/:agentId/tasks/:taskId" element={<TaskDetailPage />} />
        </Routes>
      </InboxProvider>
    </MemoryRouter>,
  )
  opened = page
  for (let turn = 0; turn < 50 && page.all('question-card').length === 0; turn += 1) await act(async () => undefined)
  return page
}

async function reply(response: Response) {
  await act(async () => {
    posted.at(-1)!.answer(response)
  })
}

afterEach(() => {
  opened?.unmount() // its polling stops
  opened = undefined
  vi.unstubAllGlobals()
})

describe('the inbox question card', () => {
  it('shows the question above the reply box, posts the answer and waits for the server meanwhile', async () => {
    const page = await openTask('en')
    expect(page.text('question-text')).toBe('Which colour?')
    expect(page.one('answer-input').props.placeholder).toBe('Type your answer… (Enter to send)')
    expect(page.all('reply')).toHaveLength(1) // the reply box answers too
    expect(page.all('approval-hint')).toHaveLength(0)
    page.type('answer-input', '  green ')
    page.click('answer-submit')
    expect(posted.map(({ url, body }) => [url, body])).toEqual([
      ['/api/v1/tasks/t1/approvals/q%201', { decision: 'answer', message: 'green' }],
    ])
    expect(page.text('card-sending')).toContain('Sending…')
    expect(page.all('decline-button')).toHaveLength(0)
    await reply(json({ ok: true }))
    expect(page.one('question-card').props['data-status']).toBe('pending')
  })

  it('declines, and can decline again when the server refused it', async () => {
    const page = await openTask('en')
    page.click('decline-button')
    expect(posted.map(({ body }) => body)).toEqual([{ decision: 'reject' }])
    await reply(json({ error: { code: 'approval_not_found', message: 'gone' } }, 404))
    expect(page.one('decline-button').props.disabled).toBe(false)
  })

  it('offers only what the item allows', async () => {
    const page = await openTask('en', { ...QUESTION, allowedDecisions: ['answer'] })
    expect(page.all('decline-button')).toHaveLength(0)
    expect(page.all('answer-submit')).toHaveLength(1)
  })

  it('speaks Chinese', async () => {
    const page = await openTask('zh')
    expect(textOf(page.one('question-card'))).toContain('智能体向你提问')
    expect(page.text('answer-submit')).toBe('回答')
    expect(page.text('decline-button')).toBe('不回答')
  })
})
