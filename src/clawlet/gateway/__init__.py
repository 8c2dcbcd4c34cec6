"""The OpenClaw Gateway WebSocket protocol: shared frames, a client, and clawlet's own server."""
