import { memo } from 'react'
import rehypeHighlight from 'rehype-highlight'
import { useT } from '../lib/store'
import type { ChatMessage } from '../lib/types'
import { ApprovalCardView } from './ApprovalCard'
import { PauseIcon } from '../shared/Icons'
import { Markdown } from '../shared/Markdown'
import type { Plugins } from '../shared/Markdown'
import { Collapsible, TypingDots } from '../shared/MessageBubble'

/** Code blocks highlighted (highlight.js, the language detected when not given). */
const HIGHLIGHT: Plugins = [[rehypeHighlight, { detect: true, ignoreMissing: true }]]

function ThoughtChain({ message }: { message: ChatMessage }) {
  const t = useT()
  return (
    <Collapsible className="thought-chain" testId="thought-chain" initiallyOpen
      title={t('thoughtChain', { n: message.toolCalls.length })}>
      <ol className="tool-calls">
        {message.toolCalls.map((call, index) => (
          <li key={index} className={call.isError ? 'tool-call error' : 'tool-call'} data-testid="tool-call">
            <div className="tool-name">
              <code>{call.tool}</code>
              {call.awaiting ? (
                <span className="pill awaiting" data-testid="tool-awaiting"><PauseIcon /> {t('awaiting')}</span>
              ) : (
                !call.done && <span className="spinner" aria-label={t('running')} />
              )}
            </div>
            <div className="tool-label">{t('input')}</div>
            <pre className="tool-input" data-testid="tool-input">{call.input}</pre>
            {call.done && (
              <>
                <div className="tool-label">{t('output')}</div>
                <pre className="tool-output" data-testid="tool-output">{call.output}</pre>
              </>
            )}
          </li>
        ))}
      </ol>
    </Collapsible>
  )
}

function RetrievalCard({ retrieval }: { retrieval: ChatMessage['retrievals'][number] }) {
  const t = useT()
  return (
    <Collapsible className="retrieval-card" testId="retrieval-card" initiallyOpen={false}
      title={t('retrieval', { n: retrieval.results.length })}>
      <div className="retrieval-body">
        <div className="muted small">{t('query')}: {retrieval.query}</div>
        {retrieval.results.map((r, i) => (
          <div key={i} className="retrieval-result">
            <div className="retrieval-meta"><code>{r.source}</code><span>{r.score.toFixed(3)}</span></div>
            <div className="retrieval-text">{r.text}</div>
          </div>
        ))}
      </div>
    </Collapsible>
  )
}

/** One bubble; memo: while a reply streams, only its own bubble re-renders. */
export const MessageBubble = memo(function MessageBubble({ message }: { message: ChatMessage }) {
  const t = useT()
  if (message.role === 'summary') {
    return (
      <div className="bubble summary" data-testid="summary-bubble">
        <div className="tool-label">{t('summary')}</div>
        <Markdown text={message.content} rehypePlugins={HIGHLIGHT} />
      </div>
    )
  }
  if (message.role === 'user') {
    return (
      <div className="row user">
        <div className="bubble user" data-testid="user-bubble">{message.content}</div>
      </div>
    )
  }
  const empty = !message.content && message.toolCalls.length === 0 && !message.error && !message.approvals?.length
  return (
    <div className="row assistant">
      <div className={message.streaming ? 'bubble assistant streaming' : 'bubble assistant'} data-testid="assistant-bubble">
        {message.retrievals.map((r, i) => <RetrievalCard key={i} retrieval={r} />)}
        {message.content && <Markdown text={message.content} rehypePlugins={HIGHLIGHT} />}
        {empty && message.streaming && <TypingDots className="typing" />}
        {message.toolCalls.length > 0 && <ThoughtChain message={message} />}
        {(message.approvals ?? []).map((card) => <ApprovalCardView key={card.item.approval_id} card={card} />)}
        {message.error && <div className="inline-error" role="alert" data-testid="chat-error">{t('error')}: {message.error}</div>}
        {message.cancelled && <div className="muted small">{t('cancelled')}</div>}
        {message.interrupted && (
          <div className="interrupted-notice" role="status" data-testid="interrupted-notice">{t('interrupted')}</div>
        )}
      </div>
    </div>
  )
})
