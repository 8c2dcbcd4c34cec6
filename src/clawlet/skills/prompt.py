"""The one ``<available_skills>`` renderer: the skill index the model sees, local or in a cluster.

Both the local engine (``SKILLS_SNAPSHOT.md``, :func:`clawlet.skills.scanner.render_snapshot`) and
an exec plane's session prompt (:func:`clawlet.execplane.skill_cache.available_skills_block`)
render through :func:`render_available_skills`, so the same skills read the same to the model:
one ``<skill>`` element each with ``<name>``, ``<description>`` and ``<location>`` (the skill's
``SKILL.md``), XML-escaped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from xml.sax.saxutils import escape


@dataclass(frozen=True)
class SkillListing:
    """One skill as the model sees it: its name, what it is for, and where its ``SKILL.md`` is."""

    name: str
    description: str
    location: str


def render_available_skills(skills: Iterable[SkillListing]) -> str:
    """The ``<available_skills>`` block listing ``skills`` in order (an empty block for none)."""
    lines = ["<available_skills>"]
    for skill in skills:
        lines += [
            "  <skill>",
            f"    <name>{escape(skill.name)}</name>",
            f"    <description>{escape(skill.description)}</description>",
            f"    <location>{escape(skill.location)}</location>",
            "  </skill>",
        ]
    lines.append("</available_skills>")
    return "\n".join(lines) + "\n"
