// The inbox's service worker (scope /inbox/): the app installs and opens offline with the tasks
// it last saw. Served by clawlet at /inbox/sw.js without caching, so a new version is picked up.
//
// - pages under /inbox/ (navigations): network first, else the cached app page;
// - /assets/* (Vite's content-hashed files): cache first; those the cached page uses are cached
//   when the worker installs and whenever the page is fetched again;
// - GET /api/v1/* (not the event stream, not searches): network first, else the last answer,
//   marked with `x-clawlet-offline: 1` so the app says it is showing saved data.
// It also shows the app's notifications and opens the task when one is tapped.

const VERSION = 'v1'
const SHELL = `inbox-shell-${VERSION}`
const API = `inbox-api-${VERSION}`
const PAGE = '/inbox/'
const STATIC = ['/inbox/manifest.webmanifest', '/inbox/icon.svg', '/inbox/icon-192.png', '/inbox/icon-512.png']

/** The /assets/ files an HTML page refers to (scripts, styles, module preloads). */
function assetsOf(html) {
  return [...new Set([...html.matchAll(/(?:src|href)="(\/assets\/[^"]+)"/g)].map((match) => match[1]))]
}

/** Cache the page and its assets; drop cached assets it no longer uses. */
async function cachePage(response) {
  const cache = await caches.open(SHELL)
  const html = await response.clone().text()
  const wanted = assetsOf(html)
  await cache.put(PAGE, response.clone())
  await Promise.all(
    wanted.map(async (url) => {
      if (!(await cache.match(url))) await cache.add(url)
    }),
  )
  for (const request of await cache.keys()) {
    const path = new URL(request.url).pathname
    if (path.startsWith('/assets/') && !wanted.includes(path)) await cache.delete(request)
  }
}

self.addEventListener('install', (event) => {
  event.waitUntil(
    (async () => {
      const cache = await caches.open(SHELL)
      await cache.addAll(STATIC)
      const page = await fetch(PAGE, { cache: 'no-store' })
      if (page.ok) await cachePage(page)
      await self.skipWaiting()
    })(),
  )
})

self.addEventListener('activate', (event) => {
  event.waitUntil(
    (async () => {
      for (const name of await caches.keys()) {
        if (name.startsWith('inbox-') && name !== SHELL && name !== API) await caches.delete(name)
      }
      await self.clients.claim()
    })(),
  )
})

async function pageFirst(request) {
  try {
    const response = await fetch(request)
    if (response.ok && (response.headers.get('content-type') || '').includes('text/html')) {
      // keep the newest page (and its assets) for offline use, without delaying this answer
      cachePage(response.clone()).catch(() => undefined)
    }
    return response
  } catch (error) {
    const cached = await caches.match(PAGE, { cacheName: SHELL })
    if (cached) return cached
    throw error
  }
}

async function assetFirst(request) {
  const cache = await caches.open(SHELL)
  const cached = await cache.match(request)
  if (cached) return cached
  const response = await fetch(request)
  if (response.ok) cache.put(request, response.clone()).catch(() => undefined)
  return response
}

/** Network first; offline, the last good answer (marked as such). */
async function networkFirst(request, cacheName) {
  const cache = await caches.open(cacheName)
  try {
    const response = await fetch(request)
    if (response.ok) cache.put(request, response.clone()).catch(() => undefined)
    return response
  } catch (error) {
    const cached = await cache.match(request)
    if (!cached) throw error
    const headers = new Headers(cached.headers)
    headers.set('x-clawlet-offline', '1')
    return new Response(cached.body, { status: cached.status, statusText: cached.statusText, headers })
  }
}

self.addEventListener('fetch', (event) => {
  const request = event.request
  if (request.method !== 'GET') return
  const url = new URL(request.url)
  if (url.origin !== self.location.origin) return
  const path = url.pathname
  if (request.mode === 'navigate' && (path === '/inbox' || path.startsWith('/inbox/'))) {
    event.respondWith(pageFirst(request))
  } else if (path.startsWith('/assets/')) {
    event.respondWith(assetFirst(request))
  } else if (STATIC.includes(path)) {
    event.respondWith(networkFirst(request, SHELL))
  } else if (path.startsWith('/api/v1/') && !path.endsWith('/events') && !url.searchParams.has('q')) {
    event.respondWith(networkFirst(request, API))
  }
})

self.addEventListener('notificationclick', (event) => {
  event.notification.close()
  const target = new URL((event.notification.data && event.notification.data.url) || PAGE, self.location.origin).href
  event.waitUntil(
    (async () => {
      const windows = await self.clients.matchAll({ type: 'window', includeUncontrolled: true })
      for (const client of windows) {
        if (new URL(client.url).pathname.startsWith('/inbox')) {
          await client.focus()
          try {
            await client.navigate(target)
          } catch {
            // an uncontrolled window cannot be navigated from here; it is focused at least
          }
          return
        }
      }
      await self.clients.openWindow(target)
    })(),
  )
})
