// Monaco from the local `monaco-editor` package; its worker is bundled by Vite (`?worker`).
import { useEffect, useRef } from 'react'
import * as monaco from 'monaco-editor/editor/editor.api.js'
import 'monaco-editor/languages/definitions/markdown/register.js'
import '../../node_modules/monaco-editor/esm/vs/base/browser/ui/codicons/codicon/codicon.css'
import EditorWorker from 'monaco-editor/editor/editor.worker.js?worker'
import { useLatest } from '../shared/hooks'

const scope = self as unknown as { MonacoEnvironment?: { getWorker: () => Worker } }
scope.MonacoEnvironment = { getWorker: () => new EditorWorker() }

// `value` is put into the editor only when `path` or `revision` changes (a file was loaded): the
// editor owns its text while the user types. Echoing every onChange back as `value` would reset the
// text (and move the cursor to the start) whenever React renders an older value after newer keystrokes.
export function MonacoEditor(props: {
  path: string
  value: string
  revision: number
  theme: 'light' | 'dark'
  onChange: (value: string) => void
  onSave: (value: string) => void
}) {
  const host = useRef<HTMLDivElement>(null)
  const editor = useRef<monaco.editor.IStandaloneCodeEditor | null>(null)
  const handlers = useLatest(props)
  // the text being put into the editor by the effect below (its change event is not the user's)
  const applying = useRef<string | null>(null)

  useEffect(() => {
    if (!host.current) return
    const instance = monaco.editor.create(host.current, {
      value: '',
      language: 'markdown',
      automaticLayout: true,
      minimap: { enabled: false },
      wordWrap: 'on',
      fontSize: 13,
      scrollBeyondLastLine: false,
      padding: { top: 8 },
      fontFamily: 'ui-monospace, SFMono-Regular, Menlo, Consolas, "Noto Sans Mono CJK SC", monospace',
    })
    instance.onDidChangeModelContent(() => {
      const value = instance.getValue()
      if (value !== applying.current) handlers.current.onChange(value)
    })
    // the editor's own text: the last keystrokes may not have reached the parent's state yet
    instance.addCommand(monaco.KeyMod.CtrlCmd | monaco.KeyCode.KeyS, () => handlers.current.onSave(instance.getValue()))
    editor.current = instance
    return () => {
      instance.getModel()?.dispose()
      instance.dispose()
      editor.current = null
    }
  }, [handlers])

  const value = useLatest(props.value)
  useEffect(() => {
    const instance = editor.current
    if (!instance || instance.getValue() === value.current) return
    applying.current = value.current
    instance.setValue(value.current)
    applying.current = null
  }, [props.revision, props.path, value])

  useEffect(() => {
    monaco.editor.setTheme(props.theme === 'dark' ? 'vs-dark' : 'vs')
  }, [props.theme])

  return <div className="monaco-host" ref={host} data-testid="monaco-host" />
}
