"""The task inbox (seed 004): tasks and messages in SQL, the task state machine, the executor."""
