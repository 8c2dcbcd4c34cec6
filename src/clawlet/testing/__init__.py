"""Test and benchmark helpers shipped with clawlet.

``clawlet.testing.scripted_openai`` is a real, offline OpenAI-compatible chat-completions server
that answers from a script, so the genuine provider path (langchain-openai over HTTP) can be
exercised without a network or an API key. ``clawlet.testing.function_model`` is an in-process
chat model a test writes as a function (for engine tests where the provider path is not what is
tested), and ``clawlet.testing.function_runtime`` a runtime adapter written the same way (for tests
above the runtime).
"""
