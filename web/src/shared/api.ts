// What both API clients share: the error a failed request becomes ({"error": {"code", "message",
// "details"}} from the server), and reading a JSON object out of an SSE message's data.

export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    /** the error's `details` (e.g. `{approval_id, decision}` of a 409 approval_decided) */
    readonly details?: Record<string, unknown>,
  ) {
    super(message)
    this.name = 'ApiError'
  }
}

/** The ApiError for a response that is not ok: the server's code and message, else its status line. */
export async function failure(response: Response): Promise<ApiError> {
  let code = 'http_error'
  let message = `${response.status} ${response.statusText}`.trim()
  let details: Record<string, unknown> | undefined
  try {
    const body = (await response.json()) as {
      error?: { code?: string; message?: string; details?: Record<string, unknown> }
    }
    if (body.error) {
      code = body.error.code ?? code
      message = body.error.message ?? message
      details = body.error.details
    }
  } catch {
    // not JSON: keep the status line
  }
  return new ApiError(response.status, code, message, details)
}

/** `raw` parsed as a JSON object; null when it is not JSON or not an object. */
export function jsonObject(raw: string): Record<string, unknown> | null {
  let parsed: unknown
  try {
    parsed = JSON.parse(raw)
  } catch {
    return null
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) return null
  return parsed as Record<string, unknown>
}
