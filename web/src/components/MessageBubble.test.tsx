// The chat bubbles as HTML (server-side rendering: no browser needed): the interrupted notice.
import { renderToStaticMarkup } from 'react-dom/server'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { historyToMessages } from '../lib/chat'
import { STORAGE_KEY } from '../lib/reducer'
import { WorkbenchProvider } from '../lib/store'
import type { ChatMessage } from '../lib/types'
import { MessageBubble } from './MessageBubble'

function interruptedBubble(): ChatMessage {
  const [, marker] = historyToMessages({
    id: 'a', title: '', created_at: 1, updated_at: 1, message_count: 2, running: false,
    compressed_context: '',
    messages: [
      { role: 'user', content: 'hello' },
      { role: 'assistant', content: '[interrupted: the server stopped before answering this message]', interrupted: true },
    ],
  })
  return marker
}

function render(message: ChatMessage, lang: 'en' | 'zh'): string {
  vi.stubGlobal('localStorage', { getItem: (key: string) => (key === STORAGE_KEY ? JSON.stringify({ lang }) : null) })
  return renderToStaticMarkup(
    <WorkbenchProvider>
      <MessageBubble message={message} />
    </WorkbenchProvider>,
  )
}

afterEach(() => {
  vi.unstubAllGlobals()
})

describe('MessageBubble', () => {
  it('says a turn was interrupted, in English', () => {
    const html = render(interruptedBubble(), 'en')
    expect(html).toContain('data-testid="interrupted-notice"')
    expect(html).toContain('Interrupted — the server stopped before answering.')
    expect(html).not.toContain('[interrupted:')  // the model's note is not shown
    expect(html).not.toContain('typing')
  })

  it('says a turn was interrupted, in Chinese', () => {
    expect(render(interruptedBubble(), 'zh')).toContain('已中断 —— 服务器在回答之前停止了。')
  })

  it('shows no notice on an ordinary answer', () => {
    const answer: ChatMessage = { id: 'x', role: 'assistant', content: 'hi', toolCalls: [], retrievals: [], streaming: false }
    expect(render(answer, 'en')).not.toContain('interrupted-notice')
  })
})
