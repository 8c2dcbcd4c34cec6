"""LLM providers (through ``init_chat_model``) and the built-in offline demo model."""
