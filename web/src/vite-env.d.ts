/// <reference types="vite/client" />
declare module 'monaco-editor/editor/editor.worker.js?worker' {
  const WorkerFactory: new () => Worker
  export default WorkerFactory
}
declare module 'monaco-editor/languages/definitions/markdown/register.js'
