// One message: the user's on the right in blue, the agent's on the left in grey (§2.1), each with
// its time. Agent replies are Markdown; an optimistic message shows "sending…" or a retry link.
import { clockTime } from '../lib/i18n'
import { useInbox } from '../lib/store'
import type { ClientMessage } from '../lib/types'
import { Markdown } from '../../shared/Markdown'
import { TypingDots } from '../../shared/MessageBubble'

export function MessageBubble({ message }: { message: ClientMessage }) {
  const { t, actions } = useInbox()
  const user = message.senderType === 'user'
  return (
    <div className={`bubble-row ${user ? 'user' : 'agent'}${message.pending ? ` ${message.pending}` : ''}`}
      data-testid={user ? 'user-bubble' : 'agent-bubble'} data-message-id={message.id} data-pending={message.pending ?? ''}>
      <div className="bubble" data-testid="bubble-text">{user ? <p className="plain">{message.content}</p> : <Markdown text={message.content} />}</div>
      <div className="bubble-meta">
        {message.pending === 'failed' ? (
          <button type="button" className="link-btn danger" onClick={() => void actions.retryMessage(message)} data-testid="retry-send">
            {t('notSent', { error: message.error ?? '' })} · {t('retrySend')}
          </button>
        ) : (
          <time dateTime={new Date(message.timestamp).toISOString()}>
            {message.pending === 'sending' ? t('sending') : clockTime(message.timestamp)}
          </time>
        )}
      </div>
    </div>
  )
}

/** The reply while it streams (message.delta), or three dots before the first words. */
export function TypingBubble({ text }: { text: string }) {
  const { t } = useInbox()
  return (
    <div className="bubble-row agent typing" data-testid="typing-bubble" aria-live="polite">
      <div className="bubble">
        {text ? <Markdown text={text} /> : (
          <TypingDots className="dots" label={t('typing')} />
        )}
      </div>
      <div className="bubble-meta">{t('typing')}</div>
    </div>
  )
}
