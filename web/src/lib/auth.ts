// Signing in, for both UIs. When the server has a token (CLAWLET_API_TOKEN / API_KEYS), every
// /api request needs `Authorization: Bearer <token>`. GET /auth (public, always 200) says whether
// one is needed and whether a given token is accepted, so the UIs can show a sign-in screen first
// and check a typed token before keeping it. The token lives in localStorage (one key shared by the
// workbench and the inbox: same origin), never in a URL. Every request and stream goes through
// `auth.fetch`, which adds the header and, on a 401, forgets the token and tells the listeners
// (the sign-in gate), which go back to the sign-in screen.

export const TOKEN_KEY = 'clawlet.token'
export const AUTH_URL = '/auth'
/** A server that does not answer /auth within this long counts as unreachable. */
export const PROBE_TIMEOUT_MS = 10_000

/** Why the sign-in screen is shown after having been signed in. */
export type SignOutReason =
  | 'refused' // a 401 to the token we sent: it was changed on the server (or in storage)
  | 'required' // a 401 without a token: the server now wants one
  | 'user' // the Sign out button (here or in another tab)

export interface AuthProbe {
  required: boolean
  authenticated: boolean
}

export type SignInResult = 'ok' | 'refused' | 'unreachable'

interface TokenStore {
  getItem(key: string): string | null
  setItem(key: string, value: string): void
  removeItem(key: string): void
}

type FetchLike = (input: string, init?: RequestInit) => Promise<Response>
type Listener = (reason: SignOutReason) => void

function browserStorage(): TokenStore | null {
  try {
    return typeof localStorage === 'undefined' ? null : localStorage
  } catch {
    return null // storage disabled: the token then lasts as long as the page
  }
}

/** The token, the authenticated fetch and the sign-out signal. One instance per page (`auth`). */
export class AuthSession {
  private memory: string | null = null
  private listeners = new Set<Listener>()

  constructor(
    private readonly storage: () => TokenStore | null = browserStorage,
    private readonly fetcher: () => FetchLike = () => (input, init) => fetch(input, init),
  ) {}

  token(): string | null {
    const store = this.storage()
    if (!store) return this.memory
    try {
      return store.getItem(TOKEN_KEY) || null
    } catch {
      return this.memory
    }
  }

  private store(token: string | null): void {
    this.memory = token
    const store = this.storage()
    try {
      if (token) store?.setItem(TOKEN_KEY, token)
      else store?.removeItem(TOKEN_KEY)
    } catch {
      // kept in memory only
    }
  }

  /** `init.headers` plus the bearer token, when there is one. */
  headers(headers?: HeadersInit, token = this.token()): Headers {
    const out = new Headers(headers)
    if (token) out.set('authorization', `Bearer ${token}`)
    return out
  }

  /** fetch with the token. A 401 to the token currently kept (not to one replaced meanwhile)
   * signs out: the token is forgotten and the listeners hear why. The response is returned as
   * usual, so callers still fail the way they did. */
  async fetch(input: string, init: RequestInit = {}): Promise<Response> {
    const token = this.token()
    const response = await this.fetcher()(input, { ...init, headers: this.headers(init.headers, token) })
    if (response.status === 401 && this.token() === token) this.signOut(token ? 'refused' : 'required')
    return response
  }

  /** Ask the server whether a token is needed and whether `token` is accepted. Throws when the
   * server cannot be reached (or answers something else). */
  async probe(token: string | null = this.token()): Promise<AuthProbe> {
    const response = await this.fetcher()(AUTH_URL, {
      headers: this.headers({ accept: 'application/json' }, token),
      cache: 'no-store',
      signal: typeof AbortSignal.timeout === 'function' ? AbortSignal.timeout(PROBE_TIMEOUT_MS) : undefined,
    })
    if (!response.ok) throw new Error(`${AUTH_URL}: HTTP ${response.status}`)
    const body = (await response.json()) as Partial<AuthProbe>
    if (typeof body.required !== 'boolean' || typeof body.authenticated !== 'boolean') {
      throw new Error(`${AUTH_URL}: not a clawlet answer`)
    }
    return { required: body.required, authenticated: body.authenticated }
  }

  /** Check a typed token; keep it only if the server accepts it. */
  async signIn(typed: string): Promise<SignInResult> {
    const token = typed.trim()
    // a header carries visible ASCII only (the server compares bytes): anything else cannot match
    if (!token || !/^[\x21-\x7e]+$/.test(token)) return 'refused'
    let probe: AuthProbe
    try {
      probe = await this.probe(token)
    } catch {
      return 'unreachable'
    }
    if (!probe.authenticated) return 'refused'
    this.store(token)
    return 'ok'
  }

  /** Forget the token and tell the listeners. */
  signOut(reason: SignOutReason = 'user'): void {
    this.store(null)
    for (const listener of [...this.listeners]) listener(reason)
  }

  /** Forget the token without telling anyone (it was refused before the app started). */
  forget(): void {
    this.store(null)
  }

  onSignOut(listener: Listener): () => void {
    this.listeners.add(listener)
    return () => {
      this.listeners.delete(listener)
    }
  }
}

export const auth = new AuthSession()

/** What the gate shows: nothing yet, the app, or the sign-in screen (with why). */
export type GateState =
  | { phase: 'checking' }
  | { phase: 'in'; required: boolean }
  | { phase: 'out'; reason: SignOutReason | null }

/** Where a page starts: the app when no token is needed or the kept one is accepted; the sign-in
 * screen otherwise (saying the kept token was refused, when there was one, which is forgotten).
 * A server that cannot be reached does not stop the app: the inbox shows its saved tasks offline,
 * and the app's own requests sign out if they get a 401. */
export async function startSession(session: AuthSession = auth): Promise<GateState> {
  const token = session.token()
  let probe: AuthProbe
  try {
    probe = await session.probe(token)
  } catch {
    return { phase: 'in', required: token !== null }
  }
  if (!probe.required) return { phase: 'in', required: false }
  if (probe.authenticated) return { phase: 'in', required: true }
  if (token) {
    session.forget()
    return { phase: 'out', reason: 'refused' }
  }
  return { phase: 'out', reason: null }
}
