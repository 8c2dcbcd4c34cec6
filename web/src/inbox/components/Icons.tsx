// Small inline icons (no icon font, nothing fetched).
import type { ReactNode } from 'react'

function Svg({ children, size = 20 }: { children: ReactNode; size?: number }) {
  return (
    <svg width={size} height={size} viewBox="0 0 24 24" fill="none" stroke="currentColor" strokeWidth="2"
      strokeLinecap="round" strokeLinejoin="round" aria-hidden="true" focusable="false">
      {children}
    </svg>
  )
}

export const BackIcon = () => <Svg><path d="M15 18l-6-6 6-6" /></Svg>
export const SendIcon = () => <Svg><path d="M5 12h14M13 6l6 6-6 6" /></Svg>
export const SearchIcon = () => <Svg><circle cx="11" cy="11" r="7" /><path d="M20 20l-3.5-3.5" /></Svg>
export const SignOutIcon = () => <Svg><path d="M15 4h3a2 2 0 0 1 2 2v12a2 2 0 0 1-2 2h-3M10 17l-5-5 5-5M5 12h11" /></Svg>
export const CloseIcon = () => <Svg><path d="M6 6l12 12M18 6L6 18" /></Svg>
export const PlusIcon = ({ size = 20 }: { size?: number }) => <Svg size={size}><path d="M12 5v14M5 12h14" /></Svg>
export const StopIcon = () => (
  <svg width="18" height="18" viewBox="0 0 24 24" aria-hidden="true" focusable="false">
    <rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor" />
  </svg>
)
export const TrashIcon = () => (
  <Svg><path d="M4 7h16M10 11v6M14 11v6M6 7l1 12a2 2 0 002 2h6a2 2 0 002-2l1-12M9 7V4h6v3" /></Svg>
)
export const BellIcon = ({ off = false }: { off?: boolean }) => (
  <Svg>
    <path d="M6 16V11a6 6 0 0112 0v5l2 2H4l2-2zM10 21h4" />
    {off && <path d="M3 3l18 18" />}
  </Svg>
)
export const InboxIcon = () => (
  <Svg><path d="M4 13h4l2 3h4l2-3h4M5 5h14l1 8v6H4v-6l1-8z" /></Svg>
)
export const LockIcon = ({ size = 18 }: { size?: number }) => (
  <Svg size={size}><rect x="5" y="11" width="14" height="10" rx="2" /><path d="M8 11V7a4 4 0 018 0v4" /></Svg>
)
export const QuestionIcon = ({ size = 16 }: { size?: number }) => (
  <Svg size={size}><circle cx="12" cy="12" r="9" /><path d="M9.5 9.5a2.5 2.5 0 014.8 1c0 1.7-2.3 2-2.3 3.5M12 17h.01" /></Svg>
)
