// Helpers of the approval cards that need no React (unit-tested in approvals.test.ts).
import type { MessageKey } from './i18n'

/** Parse the edited arguments: a JSON object, or the reason it is not one. */
export function parseArgs(
  text: string,
): { ok: true; args: Record<string, unknown> } | { ok: false; key: MessageKey; error?: string } {
  let value: unknown
  try {
    value = JSON.parse(text)
  } catch (error) {
    return { ok: false, key: 'argsInvalidJson', error: error instanceof Error ? error.message : String(error) }
  }
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return { ok: false, key: 'argsNotObject' }
  return { ok: true, args: value as Record<string, unknown> }
}
