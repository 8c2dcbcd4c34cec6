// Parts of a chat bubble: the dots while a reply has no words yet (both UIs), and a section that
// opens and closes under its title (the workbench's thought chain and memory retrievals).
import { useState } from 'react'
import type { ReactNode } from 'react'
import { ChevronIcon } from './Icons'

/** Three dots; `label` names them for screen readers (else they are decoration). */
export function TypingDots({ className, label }: { className: string; label?: string }) {
  return (
    <span className={className} {...(label ? { role: 'img', 'aria-label': label } : {})}><i /><i /><i /></span>
  )
}

export function Collapsible({ className, testId, title, initiallyOpen, children }: {
  className: string
  testId: string
  title: ReactNode
  initiallyOpen: boolean
  children: ReactNode
}) {
  const [open, setOpen] = useState(initiallyOpen)
  return (
    <div className={className} data-testid={testId}>
      <button className="collapser" onClick={() => setOpen(!open)} aria-expanded={open}>
        <ChevronIcon open={open} /> {title}
      </button>
      {open && children}
    </div>
  )
}
