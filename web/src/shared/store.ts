// A reducer's state held outside React, so each component subscribes to just what it shows: a
// streamed token re-renders the chat, not every pane (useSelector compares what the selector
// returns, so it must return a part of the state or a primitive, never a new object).
import { useSyncExternalStore } from 'react'

export interface Store<S, A> {
  getState(): S
  dispatch(action: A): void
  /** Call `listener` after every change; returns the unsubscribe. */
  subscribe(listener: () => void): () => void
}

export function createStore<S, A>(reducer: (state: S, action: A) => S, initial: S): Store<S, A> {
  let state = initial
  const listeners = new Set<() => void>()
  return {
    getState: () => state,
    dispatch: (action) => {
      const next = reducer(state, action)
      if (next === state) return
      state = next
      for (const listener of [...listeners]) listener()
    },
    subscribe: (listener) => {
      listeners.add(listener)
      return () => listeners.delete(listener)
    },
  }
}

/** The part of the store's state `select` picks; the component re-renders only when it changes. */
export function useSelector<S, A, T>(store: Store<S, A>, select: (state: S) => T): T {
  const snapshot = () => select(store.getState())
  return useSyncExternalStore(store.subscribe, snapshot, snapshot)
}
