"""Test and benchmark helpers shipped with clawlet.

``clawlet.testing.scripted_openai`` is a real, offline OpenAI-compatible chat-completions server
that answers from a script, so the genuine provider path (langchain-openai over HTTP) can be
exercised without a network or an API key.
"""
