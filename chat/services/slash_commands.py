"""What the slash commands do: each use case a member can run on the bot from Discord.

The gateway's command module (`chat.gateway.slash_commands`) turns an interaction into one call here
with plain arguments (guild, channel, the caller's id and their permission bits as Discord
reported them) and the result into an ephemeral answer. Every rule lives here, so it holds
however the command arrives:

- permission checks (`require_permission`): the worker checks the member's permissions itself,
  whatever Discord's command settings say;
- `privacy_set` (``/privacy``), `member_memories` / `member_memory_add` /
  `member_memory_forget` (``/memory``), `persona_list` (``/persona list``), `channel_reset`
  (``/reset``), `prompt_dry_run` (``/prompt``), `message_why` (the ``Why (not)?`` message
  command);
- `CommandRateLimit`: a member running commands in a burst is slowed down.

A refusal is a `CommandRefused` whose message is the sentence the member reads. Writes happen
in one transaction each: a refusal leaves nothing half-written.

A member's personal memories in a guild are the long-term memories about them
(`chat.services.memory_store`, personal scope) and what the personas' short-term memories of
their direct messages hold; ``/memory`` lists both as one numbered list, adds to the long-term
store and forgets from either.
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.db import transaction
from django.db.models import Q

from chat import selectors
from chat.models import ChannelResetMarker, EventQueue, Memory, ShortTermMemory, UnreadEvent
from chat.pipeline.memory import SUMMARY_TTL
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import BlockType, PrivacyLevel
from chat.services import memory_store
from chat.services.memory_store import MemoryRefused, MemoryScope
from chat.services.short_term_memory import short_term_memories_forget_user
from chat.services.spend import usage_forget_user
from chat.services.turn_record import turn_records_redact, turn_records_scrub
from chat.services.turn_request import TurnRequest, TurnRuntime
from chat.services.turns import turn_prepare
from chat.why import MessageFetch, why_message
from personas.audit import ChangeAuthor, field_changes
from personas.config_schema import UserSpec
from personas.models import GuildConfig, PrivacySource, UserPrivacy
from personas.services import audit_record, user_privacy_save

ADMINISTRATOR = 1 << 3
MANAGE_GUILD = 1 << 5
MANAGE_MESSAGES = 1 << 13
PERMISSION_NAMES = {MANAGE_GUILD: "Manage Server", MANAGE_MESSAGES: "Manage Messages"}


class CommandRefused(Exception):
    """A command cannot do what was asked; the message is the sentence the member reads."""


def require_permission(*, permissions: int, needed: int) -> None:
    """Raise `CommandRefused` unless ``permissions`` (the member's bits in the channel, as the
    interaction carried them) include ``needed`` or administrator."""
    if permissions & ADMINISTRATOR or permissions & needed == needed:
        return
    name = PERMISSION_NAMES.get(needed, f"permission {needed}")
    raise CommandRefused(f"You need the {name} permission in this channel for that.")


class CommandRateLimit:
    """At most ``burst`` commands per member in any ``window`` seconds (per worker)."""

    def __init__(
        self,
        *,
        burst: int = 5,
        window: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.burst, self.window, self._clock = burst, window, clock
        self._recent: dict[int, deque[float]] = {}

    def check(self, user_id: int) -> None:
        """Count one command of ``user_id``; raise `CommandRefused` (saying when to try again)
        when it is over the limit. A refused command does not count."""
        now = self._clock()
        recent = self._recent.setdefault(user_id, deque())
        while recent and now - recent[0] >= self.window:
            recent.popleft()
        if len(recent) >= self.burst:
            wait = max(1, round(self.window - (now - recent[0])))
            raise CommandRefused(
                f"Slow down: at most {self.burst} commands in {self.window:g} seconds. "
                f"Try again in {wait} s."
            )
        recent.append(now)
        if len(self._recent) > 10_000:
            self._recent = {
                u: d for u, d in self._recent.items() if d and now - d[-1] < self.window
            }


# --- /privacy ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class PrivacyChange:
    level: PrivacyLevel
    previous: PrivacyLevel
    forgotten_memories: int = 0
    forgotten_messages: int = 0
    scrubbed_turns: int = 0
    """Turn records whose copy of their words (or of a summary drawn on them) was redacted."""
    cleared_summaries: int = 0
    """Channel short-term memories cleared because they may have drawn on their words."""

    def sentence(self) -> str:
        meaning = {
            PrivacyLevel.MINIMAL: "the personas see your messages and may remember them.",
            PrivacyLevel.PARTIAL: (
                "the personas still see your messages in conversation, but nothing about you is "
                "remembered or recalled."
            ),
            PrivacyLevel.FULL: (
                "the personas never see your messages, you never trigger them, and nothing of "
                "yours is stored."
            ),
        }[self.level]
        text = f"Your privacy is now **{self.level.value}**: {meaning}"
        if self.level is PrivacyLevel.FULL:
            text += (
                f" Deleted: {self.forgotten_memories} memory(ies) about you, "
                f"{self.forgotten_messages} stored message(s) of yours, your words in "
                f"{self.scrubbed_turns} turn record(s), and {self.cleared_summaries} channel "
                "summary(ies) that may have drawn on them."
            )
        elif self.level is PrivacyLevel.PARTIAL:
            text += f" Deleted: {self.forgotten_memories} memory(ies) about you."
        return text


def privacy_set(*, guild_id: int, user_id: int, level: str) -> PrivacyChange:
    """Set the caller's own privacy in this guild (in direct messages the strictest level they
    hold in any guild applies) as set by the user.

    ``partial`` and ``full`` delete, in the same transaction, their personal memories (the
    long-term ones about them, and the short-term memories of their direct messages); ``full``
    also their messages still waiting in the event queue or an unread pool. Running workers are
    told after the commit, as for a dashboard change, so the next message is judged by the new
    level. The change is recorded in the guild's audit trail as the caller's (``/privacy``).
    Raises `CommandRefused` for a level that is not one of minimal, partial, full, or an
    unconfigured guild.
    """
    try:
        wanted = PrivacyLevel(level)
    except ValueError:
        raise CommandRefused(
            f"{level!r} is not a privacy level: choose minimal, partial or full."
        ) from None
    guild = _guild(guild_id)
    with transaction.atomic():
        row = UserPrivacy.objects.select_for_update().filter(guild=guild, user_id=user_id).first()
        previous = PrivacyLevel(row.level) if row else PrivacyLevel.MINIMAL
        blacklisted = row.blacklisted if row else False
        spec = UserSpec(id=str(user_id), privacy=wanted, blacklisted=blacklisted)
        memories = messages = turns = cleared = 0
        private = wanted is not PrivacyLevel.MINIMAL
        if private:
            # Long-term memories about them go with the privacy row's save
            # (`chat.models.forget_memories_on_private`); they are counted here first.
            memories = Memory.objects.filter(
                kind=Memory.Kind.PERSONAL, user_id=user_id, guild_id=guild_id
            ).count()
        user_privacy_save(
            guild=guild,
            spec=spec,
            set_by=PrivacySource.USER,
            actor=ChangeAuthor.command(discord_id=user_id, command="/privacy"),
        )
        if private:
            memories += ShortTermMemory.objects.filter(user_id=user_id).delete()[0]
        if wanted is PrivacyLevel.FULL:
            # This guild's, and their direct messages' (where the strictest level applies).
            here = Q(guild_id=guild_id) | Q(guild_id__isnull=True)
            unread, _ = UnreadEvent.objects.filter(here, author_id=user_id).delete()
            queued, _ = EventQueue.objects.filter(here, event__author__id=user_id).delete()
            messages = unread + queued
            scrub = turn_records_scrub(user_id=user_id, guild_id=guild_id)
            cleared, summaries = short_term_memories_forget_user(
                guild_id=guild_id, turn_ids=scrub.turn_ids
            )
            quoted = turn_records_redact(guild_id=guild_id, texts=summaries)
            turns = len(scrub.turn_ids | quoted)
            usage_forget_user(guild_id=guild_id, user_id=user_id)
    return PrivacyChange(wanted, previous, memories, messages, turns, cleared)


def _guild(guild_id: int) -> GuildConfig:
    guild = GuildConfig.objects.filter(guild_id=guild_id).first()
    if guild is None:
        raise CommandRefused("The bot is not configured for this server yet.")
    return guild


def _privacy(user_id: int, guild_id: int) -> PrivacyLevel:
    level = (
        UserPrivacy.objects.filter(user_id=user_id, guild__guild_id=guild_id)
        .values_list("level", flat=True)
        .first()
    )
    return PrivacyLevel(level) if level else PrivacyLevel.MINIMAL


# --- /memory -------------------------------------------------------------------------------------

LONG_TERM = "long-term"
SHORT_TERM = "short-term"
_SOURCES: dict[str, str] = {
    Memory.Source.COMMAND: "added by you with /memory",
    Memory.Source.TOOL: "remembered by a persona in conversation",
    Memory.Source.EXTRACTION: "noticed in conversation",
    Memory.Source.ADMIN: "added by an admin",
}


@dataclass(frozen=True)
class MemoryItem:
    """One numbered personal memory: its text and where it came from."""

    number: int
    text: str
    source: str
    store: str
    """`LONG_TERM` (a stored memory about the person) or `SHORT_TERM` (a part of the
    short-term memory of their direct messages with a persona)."""
    memory_id: int
    part: str = ""
    """For a short-term memory: ``summary`` or the name of a note."""

    def line(self) -> str:
        return f"{self.number}. {self.text} — {self.source}"


def member_memories(*, guild_id: int, user_id: int, now: dt.datetime) -> list[MemoryItem]:
    """The caller's personal memories in this guild, numbered from 1 in a stable order: the
    long-term memories about them (oldest first), then what the personas' short-term memories
    of their direct messages hold (persona by name; summary, then notes by name; not once
    expired)."""
    items: list[MemoryItem] = []
    for row in MemoryScope.personal(guild_id, user_id).rows().order_by("id"):
        origin = _SOURCES.get(row.source, str(row.source))
        items.append(
            MemoryItem(0, row.text, f"{origin}, {row.created_at:%Y-%m-%d}", LONG_TERM, row.id)
        )
    memories = (
        ShortTermMemory.objects.filter(user_id=user_id, persona__guild__guild_id=guild_id)
        .select_related("persona")
        .order_by("persona__name", "id")
    )
    for memory in memories:
        persona = memory.persona
        if persona is None or memory.refreshed_at is None:
            continue
        if now - memory.refreshed_at >= SUMMARY_TTL:
            continue
        where = f"{persona.name}'s short-term memory of your direct messages"
        if memory.summary.strip():
            items.append(
                MemoryItem(0, memory.summary.strip(), where, SHORT_TERM, memory.id, "summary")
            )
        categories = memory.categories if isinstance(memory.categories, dict) else {}
        for name, text in sorted(categories.items()):
            if str(text).strip():
                source = f"{where} ({name})"
                items.append(MemoryItem(0, str(text).strip(), source, SHORT_TERM, memory.id, name))
    return [replace(item, number=n) for n, item in enumerate(items, 1)]


def member_memory_add(
    *, guild_id: int, user_id: int, text: str, name: str, now: dt.datetime
) -> MemoryItem:
    """Remember ``text`` about the caller in this guild (a long-term personal memory, source
    ``command``; ``name`` is how they are called). A near duplicate of one they have updates
    it. Raises `CommandRefused` for empty or over-long text, a caller whose privacy is partial
    or full (nothing about them is remembered), or a full scope."""
    if not " ".join(text.split()):
        raise CommandRefused("The memory text is empty: write what the personas should remember.")
    _require_remembered(user_id, guild_id)
    _guild(guild_id)
    try:
        written = memory_store.memory_add(
            scope=MemoryScope.personal(guild_id, user_id, name=name),
            text=text,
            source=Memory.Source.COMMAND,
        )
    except MemoryRefused as refused:
        raise CommandRefused(_sentence(str(refused))) from None
    items = member_memories(guild_id=guild_id, user_id=user_id, now=now)
    return next(i for i in items if i.store == LONG_TERM and i.memory_id == written.memory.id)


def member_memory_forget(*, guild_id: int, user_id: int, which: str, now: dt.datetime) -> int:
    """Forget the caller's memory number ``which`` (as `member_memories` numbers them), or all of
    them with ``all``, in one transaction. Returns how many were forgotten. Raises
    `CommandRefused` for an id that is not a number of theirs."""
    items = member_memories(guild_id=guild_id, user_id=user_id, now=now)
    which = which.strip().lower()
    if which == "all":
        chosen = items
    else:
        if not which.isdigit():
            raise CommandRefused(f"{which!r} is not a memory number: give a number or 'all'.")
        chosen = [i for i in items if i.number == int(which)]
        if not chosen:
            listed = f"yours are 1–{len(items)}" if items else "you have none"
            raise CommandRefused(
                f"There is no memory {which} of yours ({listed}; see /memory show)."
            )
    scope = MemoryScope.personal(guild_id, user_id)
    with transaction.atomic():
        for item in chosen:
            if item.store == LONG_TERM:
                memory_store.memory_forget(scope=scope, memory_id=item.memory_id)
                continue
            row = ShortTermMemory.objects.select_for_update().filter(id=item.memory_id).first()
            if row is None:
                continue
            if item.part == "summary":
                row.summary = ""
            elif isinstance(row.categories, dict):
                row.categories = {k: v for k, v in row.categories.items() if k != item.part}
            row.save(update_fields=["summary", "categories", "updated_at"])
    return len(chosen)


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."


def _require_remembered(user_id: int, guild_id: int) -> None:
    level = _privacy(user_id, guild_id)
    if level is not PrivacyLevel.MINIMAL:
        raise CommandRefused(
            f"Your privacy is {level.value}: nothing about you is remembered. "
            "Use /privacy level:minimal to allow memories."
        )


# --- /persona list -------------------------------------------------------------------------------


@dataclass(frozen=True)
class PersonaLine:
    name: str
    main: bool
    triggers: tuple[str, ...]
    description: str
    blocked: bool

    def line(self) -> str:
        triggers = ", ".join(f"`{t}`" for t in self.triggers) or "no trigger words"
        marks = " (main)" if self.main else ""
        marks += " — blocks you" if self.blocked else ""
        return f"**{self.name}**{marks}: {triggers}. {self.description}".rstrip()


def persona_list(*, guild_id: int, user_id: int, now: dt.datetime) -> list[PersonaLine]:
    """The guild's enabled personas (main first), each with its trigger words and the first
    sentence of its system prompt. Raises `CommandRefused` when the caller is blacklisted or
    blocked from every persona, or the guild has none."""
    guild = _guild(guild_id)
    standing = selectors.user_standing(user_ids=[user_id], guild_id=guild_id)
    if user_id in standing.blacklisted:
        raise CommandRefused("You are blocked from this bot's personas on this server.")
    personas = selectors.guild_personas(guild=guild)
    blocked = {
        b.persona_name
        for b in selectors.active_blocks(guild=guild, now=now)
        if b.user_id == user_id and b.type == BlockType.BLOCK
    }
    if personas and all(p.name in blocked for p in personas):
        raise CommandRefused("You are blocked from this bot's personas on this server.")
    if not personas:
        raise CommandRefused("This server has no enabled persona.")
    return [
        PersonaLine(
            name=p.name,
            main=p.is_main,
            triggers=tuple(str(t) for t in (p.triggers or [])),
            description=_first_sentence(p.system_prompt),
            blocked=p.name in blocked,
        )
        for p in personas
    ]


def _first_sentence(text: str, limit: int = 120) -> str:
    first = re.split(r"(?<=[.!?])\s", " ".join(text.split()), maxsplit=1)[0]
    return first if len(first) <= limit else first[: limit - 1].rstrip() + "…"


# --- /reset --------------------------------------------------------------------------------------


def channel_reset(
    *, guild_id: int, channel_id: int, user_id: int, marker_id: int, permissions: int
) -> ChannelResetMarker:
    """Store the channel's reset marker (replacing an older one): every persona's next window
    starts after ``marker_id``; recorded in the guild's audit trail. Needs Manage Messages."""
    require_permission(permissions=permissions, needed=MANAGE_MESSAGES)
    _guild(guild_id)
    with transaction.atomic():
        before = ChannelResetMarker.objects.filter(channel_id=channel_id).first()
        marker, _ = ChannelResetMarker.objects.update_or_create(
            channel_id=channel_id,
            defaults={"guild_id": guild_id, "marker_id": marker_id, "reset_by": user_id},
        )
        audit_record(
            author=ChangeAuthor.command(discord_id=user_id, command="/reset"),
            guild_id=guild_id,
            action="reset",
            object_type="channel",
            object_label=str(channel_id),
            changes=field_changes(
                ["history starts after message"],
                {"history starts after message": before.marker_id if before else None},
                {"history starts after message": marker_id},
            ),
        )
    return marker


# --- /prompt -------------------------------------------------------------------------------------


async def prompt_dry_run(
    *,
    runtime: TurnRuntime,
    guild_id: int,
    channel_id: int,
    persona_name: str,
    permissions: int,
    now: dt.datetime,
) -> dict[str, Any]:
    """The exact Chat Completions body ``persona_name``'s next turn in the channel would send,
    answering the channel's newest message: `turn_prepare(dry_run=True)`, the prompt preview's
    dry run (nothing stored, sent or moved). Needs Manage Server. Raises `CommandRefused` for
    an unknown persona (naming the valid ones) or an empty channel."""
    require_permission(permissions=permissions, needed=MANAGE_GUILD)
    configuration = await sync_to_async(selectors.channel_configuration)(
        channel_id=channel_id, guild_id=guild_id, now=now
    )
    if configuration is None:
        raise CommandRefused("The bot is not configured for this server yet.")
    persona = configuration.persona_named(persona_name.strip())
    if persona is None:
        names = ", ".join(p.name for p in configuration.personas) or "none"
        raise CommandRefused(f"There is no persona {persona_name!r} here. Personas: {names}.")
    newest = await runtime.port.fetch_history(channel_id, 1)
    if not newest:
        raise CommandRefused("This channel has no message to answer yet.")
    request = TurnRequest(
        configuration=configuration,
        persona=persona,
        trigger=newest[-1],
        reason=TurnReason.TRIGGER_WORD,
    )
    prepared = await turn_prepare(runtime=runtime, request=request, dry_run=True)
    return prepared.body


# --- Why (not)? ----------------------------------------------------------------------------------


def message_why(
    *,
    message_id: int,
    permissions: int,
    bot_user_id: int | None,
    now: dt.datetime,
    fetch: MessageFetch | None = None,
) -> str:
    """The why-trace of a message, as the dashboard's why page answers it (`chat.why`): the
    summary, then one line per persona. Needs Manage Messages. ``fetch`` gives the message
    when its stored event is gone (the worker passes the one the command was used on)."""
    require_permission(permissions=permissions, needed=MANAGE_MESSAGES)
    answer = why_message(message_id=message_id, bot_user_id=bot_user_id, now=now, fetch=fetch)
    lines = [answer.summary]
    if answer.record.delivered_by:
        lines[0] += f" It was sent by {answer.record.delivered_by}."
    for persona in answer.answers:
        mark = "replied" if persona.replied else "did not reply"
        rule = f" (rule: {persona.rule})" if persona.rule and not persona.replied else ""
        lines.append(f"**{persona.persona}** {mark}: {persona.why}{rule}")
    return "\n".join(lines)
