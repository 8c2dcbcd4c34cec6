"""The exec plane of cluster mode: the daemon on each user's machine (``clawlet exec-plane``). It
holds the user's conversations, files and memory, runs each session in a process of its own and
talks to the control plane over one reconnecting WebSocket."""
