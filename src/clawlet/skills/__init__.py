"""Markdown skills: ``skills/<name>/SKILL.md`` directories in OpenClaw/ClawHub format."""
