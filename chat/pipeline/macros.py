"""The macro engine for configured text: identity macros and tool conditionals.

Templates the admins write (system prompts, sample dialogue, notes, prefill) and the pipeline's
own hint templates go through `expand_macros`:

- ``{bot}`` → the bot account's persona, ``{char}`` → the persona speaking this turn,
  ``{user}`` → the person this turn answers;
- ``{{if tool:NAME}}…{{else}}…{{/if}}`` keeps the first branch when the turn offers tool NAME,
  else the second (``{{else}}`` is optional; conditionals nest).

Message bodies never pass through here: a user drafting a prompt that contains ``{user}`` must
see it kept literally (seed 002, "Macro preservation"). Author labels do (seed 002: labels
"resolve", bodies "preserve").
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_IDENTITY = re.compile(r"(?<!\{)\{(bot|char|user)\}(?!\})")
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


def names_the_user(template: str) -> bool:
    """Whether ``template`` may expand ``{user}``: its text then changes with whoever the
    turn answers (a conditional's branch counts whether or not it is taken)."""
    return any(match[1] == "user" for match in _IDENTITY.finditer(template))


def expand_macros(template: str, context: MacroContext) -> str:
    """Expand conditionals (innermost first), then identity macros, in ``template``.

    Identity values are inserted in one final pass, so a name that looks like a macro is never
    expanded. Malformed or unbalanced conditionals, unknown ``{names}`` and double-braced
    ``{{user}}`` stay as written.
    Never raises.
    """
    if "{" not in template:
        return template
    text = template
    while True:
        expanded = _INNERMOST_CONDITIONAL.sub(lambda match: _branch(match, context.tools), text)
        if expanded == text:
            break
        text = expanded
    identities = {"bot": context.bot, "char": context.char, "user": context.user}
    return _IDENTITY.sub(lambda match: identities[match[1]], text)


def _branch(match: re.Match[str], tools: frozenset[str]) -> str:
    if match["tool"] in tools:
        return match["then"]
    return match["otherwise"] or ""
