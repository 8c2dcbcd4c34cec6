// Inline SVG icons of both UIs (bundled; no icon font, nothing fetched). The workbench draws them
// at 16 px, the inbox at 20 px unless a component asks for another size.
import type { ReactNode } from 'react'

interface Sized {
  size?: number
}

function Svg({ children, size = 16 }: { children: ReactNode; size?: number }) {
  return (
    <svg width={size} height={size} viewBox="0 0 24 24" fill="none" stroke="currentColor" strokeWidth="2"
      strokeLinecap="round" strokeLinejoin="round" aria-hidden="true" focusable="false">
      {children}
    </svg>
  )
}

// the workbench's
export const PlusIcon = ({ size = 16 }: Sized) => <Svg size={size}><path d="M12 5v14M5 12h14" /></Svg>
export const TrashIcon = () => <Svg><path d="M3 6h18M8 6V4h8v2M19 6l-1 14H6L5 6" /></Svg>
export const EditIcon = () => <Svg><path d="M12 20h9M16.5 3.5a2.1 2.1 0 0 1 3 3L7 19l-4 1 1-4z" /></Svg>
export const WrenchIcon = () => (
  <Svg><path d="M14.7 6.3a4 4 0 0 0-5.4 5.4L3 18l3 3 6.3-6.3a4 4 0 0 0 5.4-5.4l-2.5 2.5-2.4-.6-.6-2.4z" /></Svg>
)
export const SunIcon = () => (
  <Svg><circle cx="12" cy="12" r="4" /><path d="M12 2v2M12 20v2M4.9 4.9l1.4 1.4M17.7 17.7l1.4 1.4M2 12h2M20 12h2M4.9 19.1l1.4-1.4M17.7 6.3l1.4-1.4" /></Svg>
)
export const MoonIcon = () => <Svg><path d="M21 12.8A9 9 0 1 1 11.2 3a7 7 0 0 0 9.8 9.8z" /></Svg>
export const SendIcon = () => <Svg><path d="M22 2 11 13M22 2l-7 20-4-9-9-4z" /></Svg>
export const StopIcon = () => <Svg><rect x="6" y="6" width="12" height="12" rx="2" /></Svg>
export const ChevronIcon = ({ open }: { open: boolean }) => (
  <span className={open ? 'chev open' : 'chev'}><Svg size={14}><path d="m9 18 6-6-6-6" /></Svg></span>
)
export const ListIcon = () => <Svg><path d="M8 6h13M8 12h13M8 18h13M3 6h.01M3 12h.01M3 18h.01" /></Svg>
export const SaveIcon = () => <Svg><path d="M19 21H5a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h11l5 5v11a2 2 0 0 1-2 2zM17 21v-8H7v8M7 3v5h8" /></Svg>
export const ClawIcon = () => (
  <Svg size={20}><path d="M5 20c0-6 2-11 7-14M10 20c0-5 2-9 6-11M15 20c0-4 1.5-7 5-8" /></Svg>
)
export const ShieldIcon = () => <Svg><path d="M12 22s8-4 8-10V5l-8-3-8 3v7c0 6 8 10 8 10z" /><path d="m9 12 2 2 4-4" /></Svg>
export const QuestionIcon = () => (
  <Svg><circle cx="12" cy="12" r="10" /><path d="M9.1 9a3 3 0 0 1 5.8 1c0 2-3 3-3 3M12 17h.01" /></Svg>
)
export const PauseIcon = () => <Svg size={12}><path d="M9 5v14M15 5v14" /></Svg>

// the inbox's
export const BackIcon = () => <Svg size={20}><path d="M15 18l-6-6 6-6" /></Svg>
export const ArrowSendIcon = () => <Svg size={20}><path d="M5 12h14M13 6l6 6-6 6" /></Svg>
export const SearchIcon = () => <Svg size={20}><circle cx="11" cy="11" r="7" /><path d="M20 20l-3.5-3.5" /></Svg>
export const SignOutIcon = () => <Svg size={20}><path d="M15 4h3a2 2 0 0 1 2 2v12a2 2 0 0 1-2 2h-3M10 17l-5-5 5-5M5 12h11" /></Svg>
export const CloseIcon = () => <Svg size={20}><path d="M6 6l12 12M18 6L6 18" /></Svg>
export const FilledStopIcon = () => (
  <svg width="18" height="18" viewBox="0 0 24 24" aria-hidden="true" focusable="false">
    <rect x="6" y="6" width="12" height="12" rx="2" fill="currentColor" />
  </svg>
)
export const BinIcon = () => (
  <Svg size={20}><path d="M4 7h16M10 11v6M14 11v6M6 7l1 12a2 2 0 002 2h6a2 2 0 002-2l1-12M9 7V4h6v3" /></Svg>
)
export const BellIcon = ({ off = false }: { off?: boolean }) => (
  <Svg size={20}>
    <path d="M6 16V11a6 6 0 0112 0v5l2 2H4l2-2zM10 21h4" />
    {off && <path d="M3 3l18 18" />}
  </Svg>
)
export const InboxIcon = () => <Svg size={20}><path d="M4 13h4l2 3h4l2-3h4M5 5h14l1 8v6H4v-6l1-8z" /></Svg>
export const LockIcon = ({ size = 18 }: Sized) => (
  <Svg size={size}><rect x="5" y="11" width="14" height="10" rx="2" /><path d="M8 11V7a4 4 0 018 0v4" /></Svg>
)
