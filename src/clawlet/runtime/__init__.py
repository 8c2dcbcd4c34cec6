"""The runtime layer, where a session's turns run: ``SessionManager`` → ``RuntimeAdapter``; every
agent run goes through it (in-process on clawlet's engine, in a session process of its own
(:mod:`clawlet.execplane.session_process`) or on OpenClaw (:mod:`clawlet.runtime.openclaw_bridge`))."""
