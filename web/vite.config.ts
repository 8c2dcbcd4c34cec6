/// <reference types="vitest/config" />
import { defineConfig } from 'vite'
import react from '@vitejs/plugin-react'

// The build lands in the Python package (src/clawlet/web), which serves it at `/`.
export default defineConfig({
  plugins: [react()],
  base: '/',
  build: {
    outDir: '../src/clawlet/web',
    emptyOutDir: true,
    chunkSizeWarningLimit: 6000,
    sourcemap: false,
  },
  worker: { format: 'es' },
  server: {
    proxy: { '/api': 'http://127.0.0.1:8002' },
  },
  test: {
    include: ['src/**/*.test.ts', 'src/**/*.test.tsx'],
    environment: 'node',
  },
})
