// A growing text box with a send button: Enter sends, Shift+Enter adds a line, and Enter while an
// input method is composing (Chinese, Japanese…) only confirms the characters.
import { useEffect, useRef } from 'react'
import type { KeyboardEvent, ReactNode } from 'react'
import { ArrowSendIcon } from '../../shared/Icons'

interface Props {
  value: string
  onChange: (value: string) => void
  onSubmit: () => void
  placeholder: string
  sendLabel: string
  canSend: boolean
  busy?: boolean
  testId: string
  /** Replaces the send button (e.g. a stop button while the agent works). */
  action?: ReactNode
  className?: string
}

export function Composer({ value, onChange, onSubmit, placeholder, sendLabel, canSend, busy, testId, action, className }: Props) {
  const box = useRef<HTMLTextAreaElement>(null)

  useEffect(() => {
    const el = box.current
    if (!el) return
    el.style.height = 'auto'
    el.style.height = `${Math.min(el.scrollHeight, 160)}px`
  }, [value])

  const onKeyDown = (event: KeyboardEvent<HTMLTextAreaElement>) => {
    if (event.key !== 'Enter' || event.shiftKey) return
    if (event.nativeEvent.isComposing || event.keyCode === 229) return
    event.preventDefault()
    if (canSend && value.trim()) onSubmit()
  }

  return (
    <form className={`composer ${className ?? ''}`} onSubmit={(event) => {
      event.preventDefault()
      if (canSend && value.trim()) onSubmit()
    }}>
      <textarea ref={box} rows={1} value={value} placeholder={placeholder} aria-label={placeholder}
        data-testid={testId} enterKeyHint="send" onChange={(event) => onChange(event.target.value)} onKeyDown={onKeyDown} />
      {action ?? (
        <button type="submit" className="send-btn" disabled={!canSend || !value.trim() || busy} aria-label={sendLabel}
          title={sendLabel} data-testid={`${testId}-send`}>
          <ArrowSendIcon />
        </button>
      )}
    </form>
  )
}
