import type { ReactNode } from 'react'
import { useEffect } from 'react'

export function Dialog(props: {
  title: string
  children: ReactNode
  confirmLabel: string
  cancelLabel: string
  danger?: boolean
  onConfirm: () => void
  onCancel: () => void
}) {
  useEffect(() => {
    const onKey = (e: KeyboardEvent) => {
      if (e.key === 'Escape') props.onCancel()
    }
    window.addEventListener('keydown', onKey)
    return () => window.removeEventListener('keydown', onKey)
  }, [props])
  return (
    <div className="dialog-backdrop" onClick={props.onCancel}>
      <div className="dialog glass" role="dialog" aria-modal="true" aria-label={props.title}
        onClick={(e) => e.stopPropagation()}>
        <h3>{props.title}</h3>
        <div className="dialog-body">{props.children}</div>
        <div className="dialog-actions">
          <button className="btn" onClick={props.onCancel} data-testid="dialog-cancel">{props.cancelLabel}</button>
          <button className={props.danger ? 'btn danger' : 'btn primary'} onClick={props.onConfirm}
            data-testid="dialog-confirm" autoFocus>
            {props.confirmLabel}
          </button>
        </div>
      </div>
    </div>
  )
}
