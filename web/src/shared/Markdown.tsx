// Replies as Markdown (GitHub flavour) in both UIs. No raw HTML; links open in a new tab. The
// workbench adds code highlighting through `rehypePlugins` (the inbox's bundle goes without it).
import { memo } from 'react'
import ReactMarkdown from 'react-markdown'
import type { Components, Options } from 'react-markdown'
import remarkGfm from 'remark-gfm'

export type Plugins = Options['rehypePlugins']

const REMARK: Plugins = [remarkGfm]
const COMPONENTS: Components = { a: ({ node: _node, ...props }) => <a {...props} target="_blank" rel="noreferrer noopener" /> }

export const Markdown = memo(function Markdown({ text, rehypePlugins }: { text: string; rehypePlugins?: Plugins }) {
  return (
    <div className="markdown">
      <ReactMarkdown remarkPlugins={REMARK} rehypePlugins={rehypePlugins} components={COMPONENTS}>
        {text}
      </ReactMarkdown>
    </div>
  )
})
