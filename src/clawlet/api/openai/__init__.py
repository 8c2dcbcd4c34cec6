"""The OpenAI-compatible surface (seed 003): ``/v1/chat/completions`` and ``/v1/models``."""
