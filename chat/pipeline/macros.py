"""The macro engine for configured text: identity macros and tool conditionals.

Templates the admins write (system prompts, sample dialogue, notes, prefill) and the pipeline's
own hint templates go through `expand_macros`:

- ``{bot}`` → the bot account's persona, ``{char}`` → the persona speaking this turn,
  ``{user}`` → the person this turn answers; SillyTavern's spellings mean the same:
  ``{{char}}`` and ``<BOT>`` are ``{char}``, ``{{user}}`` and ``<USER>`` are ``{user}`` (any
  case, as SillyTavern reads them), so text pasted from a card or a preset works as written;
- ``{{if tool:NAME}}…{{else}}…{{/if}}`` keeps the first branch when the turn offers tool NAME,
  else the second (``{{else}}`` is optional; conditionals nest).

Message bodies never pass through here: a user drafting a prompt that contains ``{user}`` must
see it kept literally (seed 002, "Macro preservation"). Author labels do (seed 002: labels
"resolve", bodies "preserve").
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

_IDENTITY = re.compile(
    r"(?<!\{)\{(?P<name>bot|char|user)\}(?!\})"
    r"|\{\{(?P<tavern>char|user)\}\}"
    r"|<(?P<angle>bot|user)>",
    re.IGNORECASE,
)
_TAVERN_ANGLE = {"bot": "char", "user": "user"}
_INNERMOST_CONDITIONAL = re.compile(
    r"\{\{if tool:(?P<tool>[\w.-]+)\}\}"
    r"(?P<then>(?:(?!\{\{if tool:|\{\{/if\}\}).)*?)"
    r"(?:\{\{else\}\}(?P<otherwise>(?:(?!\{\{if tool:|\{\{/if\}\}).)*?))?"
    r"\{\{/if\}\}",
    re.DOTALL,
)


@dataclass(frozen=True, slots=True)
class MacroContext:
    """What macros resolve to in one turn. ``tools`` is the turn's tool allowlist."""

    bot: str
    char: str
    user: str
    tools: frozenset[str] = field(default_factory=frozenset)


@functools.lru_cache(maxsize=1024)
def names_the_user(template: str) -> bool:
    """Whether ``template`` may expand ``{user}``: its text then changes with whoever the
    turn answers (a conditional's branch counts whether or not it is taken)."""
    return any(_identity(match) == "user" for match in _IDENTITY.finditer(template))


def _identity(match: re.Match[str]) -> str | None:
    """Which identity a macro match names: ``bot``, ``char`` or ``user``; None for a
    ``{Bot}``-style spelling of this product's own macros, which are lower case only."""
    if match["name"] is not None:
        return match["name"] if match["name"].islower() else None
    if match["tavern"] is not None:
        return match["tavern"].lower()
    return _TAVERN_ANGLE[match["angle"].lower()]


def expand_macros(template: str, context: MacroContext) -> str:
    """Expand conditionals (innermost first), then identity macros, in ``template``.

    Identity values are inserted in one final pass, so a name that looks like a macro is never
    expanded. Malformed or unbalanced conditionals and unknown ``{names}`` or ``{{names}}``
    stay as written.
    Never raises.
    """
    if "{" not in template and "<" not in template:
        return template
    text = template
    while True:
        expanded = _INNERMOST_CONDITIONAL.sub(lambda match: _branch(match, context.tools), text)
        if expanded == text:
            break
        text = expanded
    identities = {"bot": context.bot, "char": context.char, "user": context.user}

    def identity(match: re.Match[str]) -> str:
        name = _identity(match)
        return match[0] if name is None else identities[name]

    return _IDENTITY.sub(identity, text)


def _branch(match: re.Match[str], tools: frozenset[str]) -> str:
    if match["tool"] in tools:
        return match["then"]
    return match["otherwise"] or ""
