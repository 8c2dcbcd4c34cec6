// Hooks both UIs use.
import { useInsertionEffect, useRef } from 'react'
import type { MutableRefObject } from 'react'

/** A ref that holds the last committed render's `value`: effects and handlers set up once read the
 * newest one through it without listing it as a dependency. It is set as the render commits
 * (before any layout or passive effect runs), never during render, so render code must not read it. */
export function useLatest<T>(value: T): MutableRefObject<T> {
  const ref = useRef(value)
  useInsertionEffect(() => {
    ref.current = value
  })
  return ref
}
