// A draggable divider: reports the new width of the pane on its `side`.
import { useRef } from 'react'

export function Splitter(props: { side: 'left' | 'right'; width: number; onResize: (width: number) => void; testId: string }) {
  const start = useRef<{ x: number; width: number } | null>(null)
  return (
    <div
      className="splitter"
      role="separator"
      aria-orientation="vertical"
      data-testid={props.testId}
      onPointerDown={(e) => {
        start.current = { x: e.clientX, width: props.width }
        e.currentTarget.setPointerCapture(e.pointerId)
        document.body.classList.add('resizing')
      }}
      onPointerMove={(e) => {
        if (!start.current) return
        const delta = e.clientX - start.current.x
        const next = start.current.width + (props.side === 'left' ? delta : -delta)
        props.onResize(Math.max(180, Math.min(next, window.innerWidth * 0.6)))
      }}
      onPointerUp={(e) => {
        start.current = null
        e.currentTarget.releasePointerCapture(e.pointerId)
        document.body.classList.remove('resizing')
      }}
    />
  )
}
