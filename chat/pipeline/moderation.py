"""Which moderation categories may reach a channel: the policy a reply piece is judged by.

A moderation service (OpenAI's ``POST /moderations`` shape) names the categories a text falls
into; this module decides, from those categories, the kind of channel and the guild's setting,
whether the text may be shown. Pure: the service's answer, the channel's NSFW mark and the
guild's setting are passed in.

The rule, in order:

1. A guild that turned moderation off (`GuildModeration.checked` False) has nothing checked, so
   nothing is judged here (the caller never asks the service).
2. `ALWAYS_WITHHELD` (``sexual/minors``) never passes, whatever else is allowed.
3. In a channel Discord marks NSFW (and its threads, which inherit the mark), `NSFW_ALLOWED`
   (``sexual``, ``violence``, ``violence/graphic``) pass; `NSFW_NEVER_ALLOWED`
   (``sexual/minors``, ``self-harm/instructions``, ``hate/threatening``, ``illicit/violent``)
   do not: the NSFW mark relaxes nothing else.
4. The guild's own list (`GuildModeration.allowed`) passes everywhere; it can hold any known
   category but ``sexual/minors`` (`guild_allowed_problem` says why a list is refused).
5. Every other flagged category withholds the text. A service that says "flagged" without
   naming a category withholds it too (`UNNAMED_CATEGORY`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

CATEGORIES: tuple[str, ...] = (
    "harassment",
    "harassment/threatening",
    "hate",
    "hate/threatening",
    "illicit",
    "illicit/violent",
    "self-harm",
    "self-harm/intent",
    "self-harm/instructions",
    "sexual",
    "sexual/minors",
    "violence",
    "violence/graphic",
)
"""The categories of OpenAI's ``omni-moderation`` models, as its answer names them."""

ALWAYS_WITHHELD = frozenset({"sexual/minors"})
NSFW_ALLOWED = frozenset({"sexual", "violence", "violence/graphic"})
NSFW_NEVER_ALLOWED = frozenset(
    {"sexual/minors", "self-harm/instructions", "hate/threatening", "illicit/violent"}
)
UNNAMED_CATEGORY = "flagged"
"""Stands for a "flagged" answer that names no category (some OpenAI-compatible shims)."""


class Verdict(StrEnum):
    PASS = "pass"
    WITHHOLD = "withhold"


@dataclass(frozen=True)
class GuildModeration:
    """A guild's moderation setting: ``checked`` False when it turned moderation off;
    ``allowed`` the categories it lets through in every channel; ``check_input`` whether a
    triggering message is checked before it is answered."""

    checked: bool = True
    allowed: frozenset[str] = frozenset()
    check_input: bool = False


@dataclass(frozen=True)
class ModerationDecision:
    """What the policy made of one answer: the ``verdict``, the flagged categories that
    withhold the text here (``blocking``) and those let through here (``let_through``), each
    sorted."""

    verdict: Verdict
    blocking: tuple[str, ...] = ()
    let_through: tuple[str, ...] = ()

    @property
    def passes(self) -> bool:
        return self.verdict is Verdict.PASS


def allowed_categories(*, nsfw_channel: bool, guild: GuildModeration) -> frozenset[str]:
    """The categories that pass in a channel: NSFW_ALLOWED in an NSFW channel, plus the guild's
    list, less `ALWAYS_WITHHELD`."""
    allowed = set(guild.allowed)
    if nsfw_channel:
        allowed |= NSFW_ALLOWED
    return frozenset(allowed - ALWAYS_WITHHELD)


def moderation_decision(
    *,
    flagged: Iterable[str],
    service_flagged: bool,
    nsfw_channel: bool,
    guild: GuildModeration,
) -> ModerationDecision:
    """Judge one answer of the moderation service.

    ``flagged`` are the categories the service marked (its ``categories`` that are true);
    ``service_flagged`` its overall ``flagged``; ``nsfw_channel`` whether Discord marks the
    channel (or a thread's parent) NSFW; ``guild`` the guild's setting. Returns ``PASS`` when
    every flagged category is allowed there (see the module docstring), else ``WITHHOLD`` with
    the categories that decided it.
    """
    categories = set(flagged)
    if service_flagged and not categories:
        categories.add(UNNAMED_CATEGORY)
    allowed = allowed_categories(nsfw_channel=nsfw_channel, guild=guild)
    blocking = tuple(sorted(categories - allowed))
    let_through = tuple(sorted(categories & allowed))
    verdict = Verdict.WITHHOLD if blocking else Verdict.PASS
    return ModerationDecision(verdict=verdict, blocking=blocking, let_through=let_through)


def guild_allowed_problem(category: str) -> str | None:
    """Why ``category`` cannot be on a guild's list of categories allowed everywhere (None: it
    can): an unknown name, or one of `ALWAYS_WITHHELD`."""
    if category in ALWAYS_WITHHELD:
        return f"{category} can never be allowed"
    if category not in CATEGORIES:
        return f"is not a moderation category ({', '.join(CATEGORIES)})"
    return None
