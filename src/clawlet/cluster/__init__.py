"""Cluster mode (seed 001): the execution plane on each user's machine and the control plane it
talks to over one WebSocket."""
