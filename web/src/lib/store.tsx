// The workbench's store: the reducer's state (lib/reducer.ts) held outside React, and the actions
// that talk to the API (lib/actions.ts), in one context. Components read only what they show
// (useWorkbenchState with a selector), so a streamed token re-renders the chat, not every pane.
import { createContext, useCallback, useContext, useEffect, useMemo } from 'react'
import type { ReactNode } from 'react'
import { htmlLang } from '../shared/i18n'
import type { Vars } from '../shared/i18n'
import { createStore, useSelector } from '../shared/store'
import { createActions, messageOf } from './actions'
import type { WorkbenchActions } from './actions'
import { api } from './api'
import { translate } from './i18n'
import type { MessageKey } from './i18n'
import { initialState, loadPersisted, reducer, STORAGE_KEY } from './reducer'
import type { Action, Persisted, WorkbenchState, WorkbenchStore } from './reducer'

interface Workbench {
  store: WorkbenchStore
  actions: WorkbenchActions
}

const WorkbenchContext = createContext<Workbench | null>(null)

export function createWorkbenchStore(state: WorkbenchState = initialState(loadPersisted())): WorkbenchStore {
  return createStore(reducer, state)
}

export function WorkbenchProvider({ children, store: given }: { children: ReactNode; store?: WorkbenchStore }) {
  const value = useMemo<Workbench>(() => {
    const store = given ?? createWorkbenchStore()
    return { store, actions: createActions(store) }
  }, [given])
  const { store, actions } = value
  const theme = useSelector(store, (state) => state.theme)
  const lang = useSelector(store, (state) => state.lang)
  const widths = useSelector(store, (state) => state.widths)

  useEffect(() => {
    const persisted: Persisted = { theme, lang, widths }
    localStorage.setItem(STORAGE_KEY, JSON.stringify(persisted))
    document.documentElement.dataset.theme = theme
    document.documentElement.lang = htmlLang(lang)
  }, [theme, lang, widths])

  useEffect(() => {
    api
      .status()
      .then((status) => store.dispatch({ type: 'status', status }))
      .catch((error: unknown) => store.dispatch({ type: 'notice', notice: { kind: 'error', text: messageOf(error) } }))
    void actions.refreshSessions()
  }, [store, actions])

  return <WorkbenchContext.Provider value={value}>{children}</WorkbenchContext.Provider>
}

function useWorkbench(): Workbench {
  const value = useContext(WorkbenchContext)
  if (!value) throw new Error('used outside WorkbenchProvider')
  return value
}

/** The part of the state `select` picks (a part of it or a primitive, never a new object); the
 * component re-renders when that changes and only then. */
export function useWorkbenchState<T>(select: (state: WorkbenchState) => T): T {
  return useSelector(useWorkbench().store, select)
}

export function useDispatch(): (action: Action) => void {
  return useWorkbench().store.dispatch
}

export function useActions(): WorkbenchActions {
  return useWorkbench().actions
}

/** The UI's text in the chosen language. */
export function useT(): (key: MessageKey, vars?: Vars) => string {
  const lang = useWorkbenchState((state) => state.lang)
  return useCallback((key: MessageKey, vars?: Vars) => translate(lang, key, vars), [lang])
}
