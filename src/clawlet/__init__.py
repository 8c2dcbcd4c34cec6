"""clawlet: a transparent, file-driven AI agent platform."""

__version__ = "0.1.0"
