"""The agent engine: LangChain ``create_agent`` plus clawlet's middleware, prompt and titles."""
