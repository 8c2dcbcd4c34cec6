// For the vitest tests: render an element with react-test-renderer and reach its parts by
// `data-testid` (all / exactly one / its text), tap (`click`) and type into them (`type`); `unmount`
// ends it (its effects' timers too).
import type { ReactElement } from 'react'
import { act, create } from 'react-test-renderer'
import type { ReactTestInstance, ReactTestRenderer } from 'react-test-renderer'
import { expect } from 'vitest'

export function textOf(node: ReactTestInstance | string): string {
  return typeof node === 'string' ? node : node.children.map(textOf).join('')
}

export function rendered(element: ReactElement) {
  let tree: ReactTestRenderer | undefined
  act(() => {
    tree = create(element)
  })
  const all = (id: string): ReactTestInstance[] =>
    tree!.root.findAll((node) => typeof node.type === 'string' && node.props['data-testid'] === id)
  const one = (id: string): ReactTestInstance => {
    const found = all(id)
    expect(found, id).toHaveLength(1)
    return found[0]
  }
  return {
    all,
    one,
    text: (id: string): string => textOf(one(id)),
    click: (id: string) => act(() => one(id).props.onClick()),
    type: (id: string, value: string) => act(() => one(id).props.onChange({ target: { value } })),
    unmount: () => act(() => tree!.unmount()),
  }
}
