"""The agent's tools, registered in one place: :func:`clawlet.tools.registry.build_tools`."""
