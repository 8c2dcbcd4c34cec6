// Which panes re-render while a reply streams: each component selects the part of the store it
// shows, so a token re-renders the chat and leaves the session list and the navbar alone.
import { Profiler } from 'react'
import type { ReactNode } from 'react'
import { act, create } from 'react-test-renderer'
import type { ReactTestRenderer } from 'react-test-renderer'
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest'
import { initialState } from '../lib/reducer'
import type { Action } from '../lib/reducer'
import { createWorkbenchStore, WorkbenchProvider } from '../lib/store'
import { ChatPanel } from './ChatPanel'
import { Navbar } from './Navbar'
import { Sidebar } from './Sidebar'

/** Commits of each pane, counted by a React Profiler around it. */
function counted(renders: Record<string, number>, id: string, pane: ReactNode) {
  renders[id] = 0
  return <Profiler id={id} onRender={() => (renders[id] += 1)}>{pane}</Profiler>
}

beforeEach(() => {
  // the provider asks the API for the status and the sessions: those requests never answer here
  vi.stubGlobal('fetch', () => new Promise<Response>(() => undefined))
  vi.stubGlobal('localStorage', { getItem: () => null, setItem: () => undefined })
  vi.stubGlobal('document', { documentElement: { dataset: {}, lang: '' } })
  vi.stubGlobal('IS_REACT_ACT_ENVIRONMENT', true)
})

afterEach(() => {
  vi.unstubAllGlobals()
})

describe('panes while a reply streams', () => {
  it('re-renders the chat on a token, not the session list or the navbar', () => {
    const store = createWorkbenchStore(initialState({ theme: 'light', lang: 'en' }))
    const renders: Record<string, number> = {}
    let tree: ReactTestRenderer | undefined
    act(() => {
      tree = create(
        <WorkbenchProvider store={store}>
          {counted(renders, 'navbar', <Navbar />)}
          {counted(renders, 'sidebar', <Sidebar />)}
          {counted(renders, 'chat', <ChatPanel />)}
        </WorkbenchProvider>,
      )
    })
    const dispatch = (...actions: Action[]) => act(() => actions.forEach((action) => store.dispatch(action)))
    dispatch(
      { type: 'sessions', sessions: [{ id: 'a', title: 'first', created_at: 1, updated_at: 1, message_count: 0 }] },
      { type: 'select', id: 'a' },
      { type: 'send', text: 'hello' },
    )
    const before = { ...renders }
    expect(before.sidebar).toBeGreaterThan(1) // it does follow what it shows

    dispatch({ type: 'event', event: { type: 'token', content: 'Hel' } })
    dispatch({ type: 'event', event: { type: 'token', content: 'lo there' } })

    expect(renders.chat).toBe(before.chat + 2)
    expect(renders.sidebar).toBe(before.sidebar)
    expect(renders.navbar).toBe(before.navbar)
    expect(JSON.stringify(tree!.toJSON())).toContain('Hello there')
  })
})
