// A task in the inbox list: title, status, last-message preview, relative time (§2.1), and the
// swipe-left-to-delete gesture. Pointer events cover touch, pen and mouse alike; `touch-action:
// pan-y` keeps vertical scrolling native while horizontal drags reach this handler. A short swipe
// reveals the delete button; a long one (past 60% of the row) deletes at once.
import { useRef, useState } from 'react'
import type { KeyboardEvent, MouseEvent, PointerEvent, ReactNode } from 'react'
import { Link } from 'react-router-dom'
import { relativeTime } from '../lib/i18n'
import { useInbox } from '../lib/store'
import type { Task } from '../lib/types'
import { BinIcon } from '../../shared/Icons'
import { TaskStatusBadge } from './TaskStatusBadge'

const ACTION_WIDTH = 88
const SLOP = 8
const FULL_SWIPE = 0.6

interface Drag {
  pointerId: number
  x: number
  y: number
  base: number
  horizontal: boolean | null
  offset: number
}

/** Markdown marks make poor previews: "`ls` **ok**" reads "ls ok". */
export function plainPreview(text: string): string {
  return text.replace(/```[a-z]*\n?/gi, ' ').replace(/[`*_#>|]+/g, '').replace(/\s+/g, ' ').trim()
}

export function TaskItem({ task, now, onDelete }: { task: Task; now: number; onDelete: (task: Task) => Promise<void> }) {
  const { state, t } = useInbox()
  const [offset, setOffset] = useState(0)
  const [dragging, setDragging] = useState(false)
  const [removing, setRemoving] = useState(false)
  const drag = useRef<Drag | null>(null)
  const swiped = useRef(false)
  const row = useRef<HTMLDivElement>(null)
  const open = offset <= -ACTION_WIDTH

  const settle = (to: number) => {
    setDragging(false)
    setOffset(to)
  }

  const remove = async () => {
    setRemoving(true)
    setOffset(-(row.current?.offsetWidth ?? 400))
    try {
      await onDelete(task)
    } catch {
      setRemoving(false)
      settle(0)
    }
  }

  const onPointerDown = (event: PointerEvent<HTMLDivElement>) => {
    if (removing || (event.pointerType === 'mouse' && event.button !== 0)) return
    drag.current = { pointerId: event.pointerId, x: event.clientX, y: event.clientY, base: offset, horizontal: null, offset }
    swiped.current = false
  }

  const onPointerMove = (event: PointerEvent<HTMLDivElement>) => {
    const current = drag.current
    if (!current || current.pointerId !== event.pointerId) return
    const dx = event.clientX - current.x
    const dy = event.clientY - current.y
    if (current.horizontal === null) {
      if (Math.abs(dx) < SLOP && Math.abs(dy) < SLOP) return
      current.horizontal = Math.abs(dx) > Math.abs(dy)
      if (!current.horizontal) {
        drag.current = null // a vertical scroll: leave it to the browser
        return
      }
      try {
        event.currentTarget.setPointerCapture(event.pointerId)
      } catch {
        // synthetic or already-released pointers cannot be captured; the drag still works
      }
      setDragging(true)
    }
    const width = row.current?.offsetWidth ?? 400
    current.offset = Math.max(-width, Math.min(0, current.base + dx))
    swiped.current = true
    setOffset(current.offset)
  }

  const onPointerEnd = (event: PointerEvent<HTMLDivElement>) => {
    const current = drag.current
    if (!current || current.pointerId !== event.pointerId) return
    drag.current = null
    if (!current.horizontal) return
    const width = row.current?.offsetWidth ?? 400
    if (event.type === 'pointercancel') settle(current.base)
    else if (current.offset <= -width * FULL_SWIPE) void remove()
    else settle(current.offset <= -ACTION_WIDTH / 2 ? -ACTION_WIDTH : 0)
  }

  const onClickCapture = (event: MouseEvent) => {
    // the click that ends a swipe, or a tap on an opened row, must not open the task
    if (swiped.current || offset !== 0) {
      event.preventDefault()
      event.stopPropagation()
      if (!swiped.current) settle(0)
      swiped.current = false
    }
  }

  const onKeyDown = (event: KeyboardEvent) => {
    if (event.key === 'Delete' || (event.key === 'Backspace' && !open)) {
      event.preventDefault()
      settle(-ACTION_WIDTH)
    } else if (event.key === 'Escape' && offset !== 0) settle(0)
  }

  const last = task.lastMessage
  const preview: ReactNode = last ? (
    <>
      {last.senderType === 'user' && <span className="you">{t('you')}</span>}
      {plainPreview(last.content)}
    </>
  ) : null
  const when = last ? Math.max(last.timestamp, task.updatedAt) : task.updatedAt
  const showAction = offset < 0

  return (
    <li className={`task-row${removing ? ' removing' : ''}`} data-testid="task-item" data-task-id={task.id} data-status={task.status}>
      <button type="button" className="swipe-delete" onClick={() => void remove()} tabIndex={showAction ? 0 : -1}
        aria-hidden={!showAction} data-testid="swipe-delete"
        style={{ visibility: showAction ? 'visible' : 'hidden', width: Math.max(ACTION_WIDTH, -offset) + 16 }}>
        <span className="swipe-delete-label">
          <BinIcon />
          <span>{t('delete')}</span>
        </span>
      </button>
      <div ref={row} className={`task-swipe${dragging ? ' dragging' : ''}`} style={{ transform: `translateX(${offset}px)` }}
        onPointerDown={onPointerDown} onPointerMove={onPointerMove} onPointerUp={onPointerEnd} onPointerCancel={onPointerEnd}
        onClickCapture={onClickCapture} data-offset={offset}>
        <Link to={`/agents/${encodeURIComponent(task.agentId)}/tasks/${encodeURIComponent(task.id)}`} className="task-link"
          draggable={false} onKeyDown={onKeyDown} title={t('swipeHint')}>
          <div className="task-line">
            <span className="task-title" data-testid="task-title">{task.title}</span>
            <TaskStatusBadge status={task.status} />
          </div>
          <div className="task-line sub">
            <span className="task-preview" data-testid="task-preview">{preview}</span>
            <time className="task-time" dateTime={new Date(when).toISOString()} data-testid="task-time">
              {relativeTime(state.lang, when, now)}
            </time>
          </div>
        </Link>
      </div>
    </li>
  )
}
