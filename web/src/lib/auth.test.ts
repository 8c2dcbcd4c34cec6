import { describe, expect, it } from 'vitest'
import { AUTH_URL, AuthSession, startSession, TOKEN_KEY } from './auth'
import type { SignOutReason } from './auth'

/** A session over an in-memory localStorage and a scripted server. */
function setup(options: { required?: boolean; accept?: string[]; token?: string | null; down?: boolean } = {}) {
  const { required = true, accept = ['right'], down = false } = options
  const items = new Map<string, string>()
  if (options.token) items.set(TOKEN_KEY, options.token)
  const storage = {
    getItem: (key: string) => items.get(key) ?? null,
    setItem: (key: string, value: string) => void items.set(key, value),
    removeItem: (key: string) => void items.delete(key),
  }
  const requests: { url: string; authorization: string | null }[] = []
  let status: number | null = null // forced status of /api answers
  const fetcher = async (url: string, init?: RequestInit): Promise<Response> => {
    const authorization = new Headers(init?.headers).get('authorization')
    requests.push({ url, authorization })
    if (down) throw new TypeError('Failed to fetch')
    const token = authorization?.replace(/^Bearer /, '') ?? null
    const ok = !required || (token !== null && accept.includes(token))
    if (url === AUTH_URL) return Response.json({ required, authenticated: ok })
    if (status !== null) return new Response('{}', { status })
    return ok ? Response.json({ ok: true }) : Response.json({ error: { code: 'unauthorized' } }, { status: 401 })
  }
  const session = new AuthSession(() => storage, () => fetcher)
  const signOuts: SignOutReason[] = []
  session.onSignOut((reason) => signOuts.push(reason))
  return { session, items, requests, signOuts, force: (code: number | null) => (status = code) }
}

describe('AuthSession', () => {
  it('sends no Authorization header without a token, and the bearer token with one', async () => {
    const open = setup({ required: false })
    await open.session.fetch('/api/status', { headers: { accept: 'application/json' } })
    expect(open.requests[0].authorization).toBeNull()

    const signedIn = setup({ token: 'right' })
    const response = await signedIn.session.fetch('/api/status', { method: 'POST', headers: { 'content-type': 'application/json' } })
    expect(response.status).toBe(200)
    expect(signedIn.requests[0].authorization).toBe('Bearer right')
    expect(signedIn.signOuts).toEqual([])
  })

  it('signs out on a 401 to the kept token: forgets it and says it was refused', async () => {
    const { session, items, signOuts } = setup({ token: 'stale' })
    const response = await session.fetch('/api/status')
    expect(response.status).toBe(401) // callers still see the failure
    expect(items.has(TOKEN_KEY)).toBe(false)
    expect(session.token()).toBeNull()
    expect(signOuts).toEqual(['refused'])
  })

  it('says a token is now required when a 401 answers a request sent without one', async () => {
    const { session, signOuts } = setup()
    await session.fetch('/api/v1/events')
    expect(signOuts).toEqual(['required'])
  })

  it('ignores a 401 to a token that has been replaced since (a late answer)', async () => {
    const { session, items, signOuts, force } = setup({ token: 'old' })
    force(401)
    const pending = session.fetch('/api/sessions')
    items.set(TOKEN_KEY, 'new') // signed in again meanwhile
    await pending
    expect(items.get(TOKEN_KEY)).toBe('new')
    expect(signOuts).toEqual([])
  })

  it('other errors do not sign out', async () => {
    const { session, signOuts, force } = setup({ token: 'right' })
    for (const code of [403, 404, 500]) {
      force(code)
      expect((await session.fetch('/api/status')).status).toBe(code)
    }
    expect(signOuts).toEqual([])
    expect(session.token()).toBe('right')
  })

  it('keeps a typed token only when the server accepts it', async () => {
    const { session, items, requests, signOuts } = setup({ accept: ['right', 'other'] })
    expect(await session.signIn('wrong')).toBe('refused')
    expect(items.has(TOKEN_KEY)).toBe(false)
    expect(requests.at(-1)).toEqual({ url: AUTH_URL, authorization: 'Bearer wrong' })
    expect(await session.signIn('   ')).toBe('refused')
    expect(await session.signIn('令牌')).toBe('refused') // no header can carry it
    expect(await session.signIn('two words')).toBe('refused')
    expect(requests).toHaveLength(1) // none of these is even sent
    expect(await session.signIn('  right \n')).toBe('ok')
    expect(items.get(TOKEN_KEY)).toBe('right')
    expect(signOuts).toEqual([])
  })

  it('says when the server cannot be reached, keeping nothing', async () => {
    const { session, items } = setup({ down: true })
    expect(await session.signIn('right')).toBe('unreachable')
    expect(items.has(TOKEN_KEY)).toBe(false)
  })

  it('the Sign out button forgets the token and tells every listener once', async () => {
    const { session, items, signOuts } = setup({ token: 'right' })
    const heard: SignOutReason[] = []
    const off = session.onSignOut((reason) => heard.push(reason))
    session.signOut()
    off()
    session.signOut('refused')
    expect(items.has(TOKEN_KEY)).toBe(false)
    expect(signOuts).toEqual(['user', 'refused'])
    expect(heard).toEqual(['user'])
  })

  it('rejects a probe answer that is not clawlet’s', async () => {
    const session = new AuthSession(() => null, () => async () => new Response('<html>', { status: 200 }))
    await expect(session.probe()).rejects.toThrow()
    const notFound = new AuthSession(() => null, () => async () => new Response('', { status: 404 }))
    await expect(notFound.probe()).rejects.toThrow(/404/)
  })

  it('keeps the token in memory when there is no storage', async () => {
    let sent: string | null = null
    const session = new AuthSession(() => null, () => async (_url, init) => {
      sent = new Headers(init?.headers).get('authorization')
      return Response.json({ required: true, authenticated: true })
    })
    expect(await session.signIn('right')).toBe('ok')
    await session.fetch('/api/status')
    expect(sent).toBe('Bearer right')
  })
})

describe('startSession', () => {
  it('goes straight to the app when the server needs no token (loopback default)', async () => {
    const { session, items } = setup({ required: false, token: 'left over' })
    expect(await startSession(session)).toEqual({ phase: 'in', required: false })
    expect(items.get(TOKEN_KEY)).toBe('left over')
    expect(await startSession(setup({ required: false }).session)).toEqual({ phase: 'in', required: false })
  })

  it('goes to the app with an accepted kept token', async () => {
    const { session, requests } = setup({ token: 'right' })
    expect(await startSession(session)).toEqual({ phase: 'in', required: true })
    expect(requests).toEqual([{ url: AUTH_URL, authorization: 'Bearer right' }])
  })

  it('shows the sign-in screen without a token, with no message', async () => {
    expect(await startSession(setup().session)).toEqual({ phase: 'out', reason: null })
  })

  it('forgets a kept token the server refuses and says so', async () => {
    const { session, items, signOuts } = setup({ token: 'changed on the server' })
    expect(await startSession(session)).toEqual({ phase: 'out', reason: 'refused' })
    expect(items.has(TOKEN_KEY)).toBe(false)
    expect(signOuts).toEqual([]) // nothing to tear down yet
  })

  it('starts the app when the server cannot be reached (the inbox works offline)', async () => {
    expect(await startSession(setup({ down: true, token: 'right' }).session)).toEqual({ phase: 'in', required: true })
    expect(await startSession(setup({ down: true }).session)).toEqual({ phase: 'in', required: false })
  })
})
