// Hooks both UIs use.
import { useRef } from 'react'
import type { MutableRefObject } from 'react'

/** A ref that always holds this render's `value`: effects and handlers set up once read the
 * newest one through it without listing it as a dependency. */
export function useLatest<T>(value: T): MutableRefObject<T> {
  const ref = useRef(value)
  ref.current = value
  return ref
}
