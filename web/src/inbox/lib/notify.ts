// Browser notifications for tasks that finish while the page is hidden (with permission).
// On phones `new Notification()` is not allowed, so the service worker shows them when it can.

export type Permission = NotificationPermission | 'unsupported'

export const ICON = '/inbox/icon-192.png'

export function permission(): Permission {
  return typeof Notification === 'undefined' ? 'unsupported' : Notification.permission
}

export async function requestPermission(): Promise<Permission> {
  if (typeof Notification === 'undefined') return 'unsupported'
  try {
    return await Notification.requestPermission()
  } catch {
    return Notification.permission
  }
}

export function pageHidden(): boolean {
  return typeof document !== 'undefined' && document.visibilityState === 'hidden'
}

/** Show a notification; a click opens `url` (an /inbox/… path). Resolves whether one was shown. */
export async function showNotification(
  title: string,
  body: string,
  url: string,
  tag: string,
  onClick: (url: string) => void,
): Promise<boolean> {
  if (permission() !== 'granted') return false
  const options: NotificationOptions = { body, tag, icon: ICON, data: { url } }
  try {
    const registration = await navigator.serviceWorker?.getRegistration('/inbox/')
    if (registration?.active) {
      await registration.showNotification(title, options)
      return true
    }
  } catch {
    // no service worker: fall back to a page notification
  }
  try {
    const notification = new Notification(title, options)
    notification.onclick = () => {
      window.focus()
      onClick(url)
      notification.close()
    }
    return true
  } catch {
    return false
  }
}
