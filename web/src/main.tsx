import { StrictMode } from 'react'
import { createRoot } from 'react-dom/client'
import App from './App'
import { AuthGate } from './lib/AuthGate'
import { translate } from './lib/i18n'
import { initialState, loadPersisted, STORAGE_KEY } from './lib/reducer'
import { WorkbenchProvider } from './lib/store'
import 'highlight.js/styles/github.css'
import './styles.css'

// the saved theme already on the sign-in screen (the store keeps it in step afterwards)
document.documentElement.dataset.theme = initialState(loadPersisted()).theme

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <AuthGate langKey={STORAGE_KEY} title={(lang) => `${translate(lang, 'appName')} ${translate(lang, 'workbench')}`}>
      <WorkbenchProvider>
        <App />
      </WorkbenchProvider>
    </AuthGate>
  </StrictMode>,
)
