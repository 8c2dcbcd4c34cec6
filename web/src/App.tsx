import { useDispatch, useT, useWorkbenchState } from './lib/store'
import { Navbar } from './components/Navbar'
import { Sidebar } from './components/Sidebar'
import { ChatPanel } from './components/ChatPanel'
import { Inspector } from './components/Inspector'
import { Splitter } from './components/Splitter'

export default function App() {
  const notice = useWorkbenchState((state) => state.notice)
  const widths = useWorkbenchState((state) => state.widths)
  const dispatch = useDispatch()
  const t = useT()
  return (
    <div className="app">
      <div className="backdrop" aria-hidden="true" />
      <Navbar />
      {notice && (
        <div className={`notice ${notice.kind}`} role={notice.kind === 'error' ? 'alert' : 'status'}
          data-testid="notice">
          <span>{notice.text}</span>
          <button className="btn ghost small" onClick={() => dispatch({ type: 'notice', notice: null })}>
            {t('dismiss')}
          </button>
        </div>
      )}
      <main className="panes">
        <aside className="pane glass" style={{ width: widths.left }} data-testid="sidebar">
          <Sidebar />
        </aside>
        <Splitter side="left" testId="splitter-left" width={widths.left}
          onResize={(left) => dispatch({ type: 'widths', left })} />
        <section className="pane glass center">
          <ChatPanel />
        </section>
        <Splitter side="right" testId="splitter-right" width={widths.right}
          onResize={(right) => dispatch({ type: 'widths', right })} />
        <aside className="pane glass" style={{ width: widths.right }} data-testid="inspector">
          <Inspector />
        </aside>
      </main>
    </div>
  )
}
