"""The runtime layer: ``SessionManager`` → ``RuntimeAdapter``; every agent run goes through it."""
