// The mobile task inbox, a second entry of the web project (inbox.html → /inbox). It loads none
// of the workbench (no Monaco), and registers a service worker so it installs and opens offline.
import { StrictMode } from 'react'
import { createRoot } from 'react-dom/client'
import App, { BASENAME } from './App'
import './inbox.css'

// the service worker's scope is /inbox/: the bare /inbox becomes /inbox/ (same page, no reload)
if (window.location.pathname === BASENAME) {
  window.history.replaceState(window.history.state, '', `${BASENAME}/${window.location.search}${window.location.hash}`)
}

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <App />
  </StrictMode>,
)

if (import.meta.env.PROD && 'serviceWorker' in navigator) {
  window.addEventListener('load', () => {
    navigator.serviceWorker.register(`${BASENAME}/sw.js`, { scope: `${BASENAME}/` }).catch((error: unknown) => {
      // the app works without it (only offline use and installing need it)
      console.info('inbox: no service worker:', error)
    })
  })
}
