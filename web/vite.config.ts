/// <reference types="vitest/config" />
import { defineConfig } from 'vite'
import type { Plugin } from 'vite'
import react from '@vitejs/plugin-react'

// Two pages from one project: the workbench (index.html, served at `/`) and the mobile task inbox
// (inbox.html, served at `/inbox`), each with its own bundle. public/inbox/ (service worker,
// manifest, icons) is copied as is. The build lands in the Python package (src/clawlet/web).
const page = (name: string) => decodeURIComponent(new URL(name, import.meta.url).pathname)

/** `npm run dev`: /inbox and its routes answer inbox.html, as `clawlet serve` does (files such
 * as /inbox/sw.js, whose last segment has a dot, come from public/inbox/). */
function inboxDevRoutes(): Plugin {
  return {
    name: 'clawlet-inbox-dev-routes',
    configureServer(server) {
      server.middlewares.use((req, _res, next) => {
        const request = req as unknown as { url?: string }
        const path = (request.url ?? '').split('?')[0]
        const isRoute = path === '/inbox' || (path.startsWith('/inbox/') && !path.split('/').pop()?.includes('.'))
        if (isRoute) request.url = '/inbox.html'
        next()
      })
    },
  }
}

export default defineConfig({
  plugins: [react(), inboxDevRoutes()],
  base: '/',
  build: {
    outDir: '../src/clawlet/web',
    emptyOutDir: true,
    chunkSizeWarningLimit: 6000,
    sourcemap: false,
    rollupOptions: {
      input: {
        main: page('./index.html'),
        inbox: page('./inbox.html'),
      },
    },
  },
  worker: { format: 'es' },
  server: {
    // /auth: whether the UIs must ask for a token (lib/auth). changeOrigin: clawlet checks Host, so
    // the proxy sends the server's own (start it with CLAWLET_ALLOWED_ORIGINS=http://localhost:5173)
    proxy: {
      '/api': { target: 'http://127.0.0.1:8002', changeOrigin: true },
      '/auth': { target: 'http://127.0.0.1:8002', changeOrigin: true },
    },
  },
  test: {
    include: ['src/**/*.test.ts', 'src/**/*.test.tsx'],
    environment: 'node',
  },
})
