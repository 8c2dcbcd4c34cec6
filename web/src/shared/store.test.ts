import { describe, expect, it } from 'vitest'
import { createStore } from './store'

type Action = { type: 'add'; n: number } | { type: 'noop' }
const reducer = (state: { total: number }, action: Action) =>
  action.type === 'add' ? { total: state.total + action.n } : state

describe('createStore', () => {
  it('applies actions at once and tells subscribers, only when the state changed', () => {
    const store = createStore(reducer, { total: 0 })
    let calls = 0
    const off = store.subscribe(() => (calls += 1))
    store.dispatch({ type: 'add', n: 2 })
    expect(store.getState()).toEqual({ total: 2 })
    store.dispatch({ type: 'noop' })
    expect(calls).toBe(1)
    off()
    store.dispatch({ type: 'add', n: 1 })
    expect(calls).toBe(1)
    expect(store.getState().total).toBe(3)
  })
})
