"""Who takes part in the visible conversation (seed 000, "Participant context").

A pure scan of the simplified history: the authors people can see, the users they mention, and
the personas they address by name, alias or trigger word. The shell uses it to decide whose
profiles and memories to load; the turn record keeps it. Hidden users (full privacy, blacklist)
were dropped by simplification and are never listed, even when mentioned.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from enum import StrEnum

from chat.pipeline.simplify import EntryKind, SimplifiedEntry
from chat.pipeline.types import PersonaProfile


class ParticipantRole(StrEnum):
    AUTHOR = "author"
    """Wrote a visible message."""
    MENTIONED = "mentioned"
    """Did not write, but a visible message mentions them."""


@dataclass(frozen=True, slots=True)
class Participant:
    """``user_id`` is the Discord account (for a proxied member: the proxy's webhook account);
    ``persona_name`` is set for our personas."""

    name: str
    role: ParticipantRole
    user_id: int
    persona_name: str | None = None
    proxy_host_name: str | None = None
    """For a proxied member: the display name of the account that speaks for them."""
    is_proxied: bool = False


@dataclass(frozen=True, slots=True)
class _Scan:
    """What `prepare_participant_context` found in a run of entries, kept so the channel's
    next turn, whose window begins with the same entries, scans only what follows them."""

    entries: int
    authors: Mapping[tuple[int, str], Participant]
    mentioned: Mapping[int, Participant]
    addressed: frozenset[str]
    settings: tuple[object, ...]


@dataclass(frozen=True, slots=True)
class ParticipantContext:
    """``participants``: authors in order of first appearance, then mentioned users in order of
    first mention. ``addressed_personas``: personas named in visible text, in guild order."""

    participants: tuple[Participant, ...]
    addressed_personas: tuple[str, ...]
    _scan: _Scan | None = field(default=None, repr=False, compare=False)


def prepare_participant_context(
    history: Sequence[SimplifiedEntry],
    *,
    personas: Sequence[PersonaProfile],
    member_names: Mapping[int, str],
    hidden_user_ids: AbstractSet[int],
    previous: ParticipantContext | None = None,
    reused_entries: int = 0,
) -> ParticipantContext:
    """Resolve the visible conversation's participants to names.

    Args:
        history: Simplified history (hidden users already dropped, blocked runs as notices).
        personas: Every persona in the guild; a persona is addressed when its name, an alias or
            a trigger word appears as a whole word (case-insensitive) in a visible message.
        member_names: Display names of guild members, for mentioned users who did not write.
            A mentioned user with no known name is left out rather than shown as an id.
        hidden_user_ids: Users never to list, even when mentioned.
        previous: The channel's previous context, whose scan resumes (None: scan it all).
        reused_entries: How many leading entries of ``history`` are the previous turn's own
            entry objects. The previous scan (of its entries but the newest, which a new
            message may merge into) resumes when it covers no more than these, under the same
            personas, names and hidden users; the result is the same as a full scan.

    Returns:
        The `ParticipantContext`.
    """
    settings = (tuple(personas), dict(member_names), frozenset(hidden_user_ids))
    scan = previous._scan if previous is not None else None
    if scan is None or scan.entries > reused_entries or scan.settings != settings:
        scan = _Scan(0, {}, {}, frozenset(), settings)
    newest = max(scan.entries, len(history) - 1)
    kept = _scan_more(scan, history[scan.entries : newest], personas, member_names, hidden_user_ids)
    found = _scan_more(kept, history[newest:], personas, member_names, hidden_user_ids)
    author_ids = {participant.user_id for participant in found.authors.values()}
    mentioned_only = [p for user_id, p in found.mentioned.items() if user_id not in author_ids]
    return ParticipantContext(
        participants=(*found.authors.values(), *mentioned_only),
        addressed_personas=tuple(p.name for p in personas if p.name in found.addressed),
        _scan=kept,
    )


def _scan_more(
    scan: _Scan,
    entries: Sequence[SimplifiedEntry],
    personas: Sequence[PersonaProfile],
    member_names: Mapping[int, str],
    hidden_user_ids: AbstractSet[int],
) -> _Scan:
    """``scan`` extended over ``entries`` (the ones right after those it covers)."""
    if not entries:
        return scan
    authors = dict(scan.authors)
    mentioned = dict(scan.mentioned)
    for entry in entries:
        if entry.kind is not EntryKind.MESSAGE:
            continue
        author = (entry.author_id, entry.author_name)
        if author not in authors:
            host = entry.proxy_host_id
            authors[author] = Participant(
                name=entry.author_name,
                role=ParticipantRole.AUTHOR,
                user_id=entry.author_id,
                persona_name=entry.persona_name,
                proxy_host_name=member_names.get(host) if host is not None else None,
                is_proxied=host is not None,
            )
        for user_id in entry.mention_ids:
            name = member_names.get(user_id)
            if name is not None and user_id not in hidden_user_ids and user_id not in mentioned:
                mentioned[user_id] = Participant(
                    name=name, role=ParticipantRole.MENTIONED, user_id=user_id
                )
    prose = "\n".join(entry.prose for entry in entries if entry.kind is EntryKind.MESSAGE)
    addressed = scan.addressed | {
        persona.name
        for persona in personas
        if persona.name not in scan.addressed and _is_addressed(persona, prose)
    }
    return _Scan(scan.entries + len(entries), authors, mentioned, addressed, scan.settings)


def participant_note(context: ParticipantContext) -> str | None:
    """What the prompt says about the people in the conversation, beyond their lines: which
    speakers are proxied members and whose account speaks for them (the proxy namespace), and
    who is mentioned without speaking. None when there is nothing to say."""
    sentences = []
    for participant in context.participants:
        if not participant.is_proxied:
            continue
        if participant.proxy_host_name:
            sentences.append(
                f"{participant.name} is a proxied member: {participant.proxy_host_name}'s "
                "account speaks for them."
            )
        else:
            sentences.append(f"{participant.name} is a proxied member of someone's system.")
    mentioned = [p.name for p in context.participants if p.role is ParticipantRole.MENTIONED]
    if mentioned:
        sentences.append(f"Mentioned here but not speaking: {', '.join(mentioned)}.")
    return " ".join(sentences) or None


def _is_addressed(persona: PersonaProfile, prose: str) -> bool:
    pattern = _address_pattern(persona.name, persona.aliases, persona.triggers)
    return pattern is not None and pattern.search(prose) is not None


@functools.lru_cache(maxsize=256)
def _address_pattern(
    name: str, aliases: tuple[str, ...], triggers: tuple[str, ...]
) -> re.Pattern[str] | None:
    """A persona's name, aliases and trigger words as one whole-word, any-case pattern
    (compiled once per persona: every turn searches the window's prose with it)."""
    words = sorted({name, *aliases, *triggers} - {""}, key=len)
    if not words:
        return None
    alternatives = "|".join(re.escape(word) for word in reversed(words))
    return re.compile(rf"(?<!\w)(?:{alternatives})(?!\w)", re.IGNORECASE)
