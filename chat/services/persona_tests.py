"""A persona test case as a turn: its request built through the same pipeline as a real turn,
and a recorded turn frozen into a case (DESIGN §3b, "Persona tests").

`case_prepare` is `chat.services.turns.turn_prepare` with ``dry_run`` over the case: the
case's history is the window (`chat.services.turn_request.FixedInputs`), its memories are
shown instead of recalled, and the Discord port is `CasePort`, which holds the case's
messages and reaches nothing. The guild's configuration is read as a real turn reads it
(its personas, its note and lorebook, its preset); the persona may be a draft (the persona
form's unsaved values) or the saved one on another model. Nothing is written anywhere.

`case_from_turn` is the other way: what a recorded turn was given (its window read again
from Discord, its recalled memories, its notes) and what it answered, as a case; full-privacy
and blacklisted users are left out, their mentions shown as the prompt shows them.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as dt
import re
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass

from chat import selectors
from chat.models import Turn
from chat.pipeline.markup import render_markup
from chat.pipeline.simplify import hidden_user_ids
from chat.pipeline.snowflakes import snowflake_at
from chat.pipeline.tokens import TokenCounter, default_token_counter
from chat.pipeline.triggers import TurnReason
from chat.pipeline.types import (
    Author,
    ContextNote,
    HistoryMessage,
    MessageReference,
    NameDirectory,
)
from chat.pipeline.window_reuse import GatewayCacheView
from chat.ports import ChannelPlace, Delivered, DeliveryError, Speaker
from chat.selectors import ChannelConfiguration, ChannelSettings
from chat.services.turn_request import FixedInputs, PreparedTurn, TurnRequest, TurnRuntime
from chat.services.turns import turn_prepare
from chat.windows import WindowRegistry
from personas.case_schema import (
    HISTORY_MAX,
    Baseline,
    CaseMessage,
    CaseNote,
    CaseNotes,
    EarlierMemories,
    Expectations,
    PersonaCaseSpec,
)
from personas.models import ChannelMode, GuildConfig, Persona

CASE_CHANNEL_ID = 1
"""The channel a case is said in: no Discord channel has this id, so nothing recorded for a
real channel (an anchor, a reset, a replied turn) reaches a case."""
CASE_BOT_USER_ID = 2
"""The bot account's id in a case (the main persona speaks through it)."""
CASE_WEBHOOK_ID = 3
"""The webhook other personas speak through in a case."""
FIRST_USER_ID = 1000
"""Members of a case get ids from here, in order of their first message."""
HAND_WRITTEN_GAP = dt.timedelta(minutes=1)
"""How far apart the messages of a case that gives no times are."""
USER_MENTION = re.compile(r"<@!?(\d+)>")


class CasePort:
    """The Discord port of a case: the case's messages and its members' names, and nothing
    else. It reads no channel and delivers nothing (a delivery, an edit, a reaction or a
    sticker raises `DeliveryError`, permanent)."""

    def __init__(
        self, *, guild_id: int, messages: Sequence[HistoryMessage], names: Mapping[int, str]
    ) -> None:
        self.bot_user_id = CASE_BOT_USER_ID
        self._guild_id = guild_id
        self._messages = {m.id: m for m in messages}
        self._names = dict(names)

    async def fetch_history(self, channel_id: int, limit: int) -> list[HistoryMessage]:
        return sorted(self._messages.values(), key=lambda m: m.id)[-limit:]

    async def fetch_history_before(
        self, channel_id: int, before_id: int, limit: int
    ) -> list[HistoryMessage]:
        older = sorted((m for m in self._messages.values() if m.id < before_id), key=lambda m: m.id)
        return older[-limit:]

    async def fetch_history_after(
        self, channel_id: int, after_id: int, limit: int
    ) -> list[HistoryMessage]:
        newer = sorted((m for m in self._messages.values() if m.id > after_id), key=lambda m: m.id)
        return newer[:limit]

    def cache_view(self, channel_id: int) -> GatewayCacheView[HistoryMessage]:
        return GatewayCacheView(messages=())

    async def fetch_message(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        return self._messages.get(message_id)

    async def thread_starter(self, channel_id: int) -> HistoryMessage | None:
        return None

    async def find_delivery(
        self, *, channel_id: int, speaker: Speaker, reply_to: int, limit: int = 50
    ) -> list[Delivered]:
        return []

    async def superseded_originals(self, messages: Sequence[HistoryMessage]) -> frozenset[int]:
        return frozenset()

    async def locate_channel(self, channel_id: int) -> ChannelPlace | None:
        return ChannelPlace(self._guild_id)

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        return NameDirectory(users={i: self._names[i] for i in user_ids if i in self._names})

    def typing(self, channel_id: int) -> contextlib.AbstractAsyncContextManager[None]:
        return _no_typing()

    async def deliver(
        self,
        *,
        channel_id: int,
        speaker: Speaker,
        text: str,
        reply_to: int | None,
        notice: str | None = None,
        nonce_seed: str | None = None,
        as_notice: bool = False,
    ) -> list[Delivered]:
        raise _NOTHING_SENT

    async def edit_message(
        self, *, channel_id: int, speaker: Speaker, message_id: int, text: str
    ) -> None:
        raise _NOTHING_SENT

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        raise _NOTHING_SENT

    def guild_stickers(self, guild_id: int) -> list[tuple[int, str]]:
        return []

    async def send_sticker(
        self, *, channel_id: int, speaker: Speaker, sticker_id: int
    ) -> Delivered:
        raise _NOTHING_SENT

    async def refresh_attachment_urls(self, urls: Sequence[str]) -> dict[str, str]:
        return {}

    async def read_attachment(self, url: str, *, max_bytes: int) -> bytes:
        raise DeliveryError("a persona test case has no files", permanent=True)


_NOTHING_SENT = DeliveryError("a persona test sends nothing to Discord", permanent=True)


@contextlib.asynccontextmanager
async def _no_typing() -> AsyncIterator[None]:
    yield


@dataclass(frozen=True)
class CaseTurn:
    """A case made into a turn: the request `turn_prepare` takes, the runtime that prepares it
    and the conversation as (author, content) lines (the judge is shown them)."""

    request: TurnRequest
    runtime: TurnRuntime
    conversation: tuple[tuple[str, str], ...]


def case_turn(
    *,
    case: PersonaCaseSpec,
    guild: GuildConfig,
    personas: Sequence[Persona],
    persona: Persona,
    now: dt.datetime,
    token_counter: TokenCounter | None = None,
) -> CaseTurn:
    """The turn ``persona`` would take on ``case`` in ``guild`` at ``now``.

    ``personas`` are the guild's enabled personas, main first, as a channel's configuration
    lists them; ``persona`` (the saved one, a draft of it, or it on another model) takes its
    saved self's place among them. Messages without times are a minute apart, the trigger at
    ``now``; a history author is a persona when the case says so, or, when it does not, when
    the name is one of the guild's personas (ignoring case).
    """
    cast = [persona if p.pk == persona.pk else p for p in personas]
    if all(p.pk != persona.pk for p in cast):
        cast.append(persona)
    by_name = {p.name.casefold(): p for p in cast}
    saved_name = next((p.name for p in personas if p.pk == persona.pk), persona.name)
    by_name.setdefault(saved_name.casefold(), persona)  # a draft may rename the persona

    lines = [*case.history, case.message]
    trigger_at = case.message.at or now
    user_ids: dict[str, int] = {}
    messages: list[HistoryMessage] = []
    last_id = 0
    for index, line in enumerate(lines):
        at = line.at or trigger_at - HAND_WRITTEN_GAP * (len(lines) - 1 - index)
        message_id = max(snowflake_at(at) + index, last_id + 1)
        last_id = message_id
        speaker = _persona_author(line, by_name)
        if speaker is not None:
            author = Author(
                id=CASE_BOT_USER_ID if speaker.is_main else CASE_WEBHOOK_ID,
                display_name=speaker.name,
                is_bot=True,
                webhook_id=None if speaker.is_main else CASE_WEBHOOK_ID,
                persona_name=speaker.name,
            )
        else:
            key = line.author.casefold()
            user_id = user_ids.setdefault(key, FIRST_USER_ID + len(user_ids))
            author = Author(id=user_id, display_name=line.author)
        reference = None
        if line.reply_to is not None:
            reference = MessageReference(messages[line.reply_to].id, CASE_CHANNEL_ID)
        messages.append(
            HistoryMessage(
                id=message_id,
                channel_id=CASE_CHANNEL_ID,
                author=author,
                content=line.content,
                created_at=at,
                reference=reference,
            )
        )
    history = tuple(messages)
    ids = {index: message.id for index, message in enumerate(history)}
    fixed = FixedInputs(
        history=history,
        memories=tuple(case.memories),
        memories_shown={
            ids[earlier.after]: (tuple(earlier.lines),) for earlier in case.earlier_memories
        },
        short_term_memory_text=case.short_term_memory,
    )
    notes = case.notes
    settings = ChannelSettings(
        channel_id=CASE_CHANNEL_ID,
        guild=guild,
        mode=ChannelMode(case.mode),
        enabled=True,
        fetch_limit=guild.message_fetch_limit,
        timezone=guild.timezone,
        channel_note=_note(notes.channel) if notes is not None else None,
        global_note=_note(notes.guild)
        if notes is not None
        else _note(CaseNote(text=guild.context_note, depth=guild.context_note_depth)),
    )
    configuration = ChannelConfiguration(
        settings=settings, personas=tuple(cast), blocks=(), read_at=now
    )
    names = {m.author.id: m.author.display_name for m in history if m.author.persona_name is None}
    port = CasePort(guild_id=guild.guild_id, messages=history, names=names)
    runtime = TurnRuntime(
        port=port,
        windows=WindowRegistry(fetch_history=port.fetch_history, cache_view=port.cache_view),
        llm=None,
        token_counter=token_counter or default_token_counter(),
        clock=lambda: now,
    )
    request = TurnRequest(
        configuration=configuration,
        persona=persona,
        trigger=history[-1],
        reason=TurnReason.TRIGGER_WORD,
        fixed=fixed,
    )
    return CaseTurn(
        request=request,
        runtime=runtime,
        conversation=tuple((line.author, line.content) for line in lines),
    )


def _persona_author(line: CaseMessage, personas: Mapping[str, Persona]) -> Persona | None:
    """The persona who wrote ``line``: by its name when the line says it is a persona's (or
    says nothing); None for a member."""
    if line.persona is False:
        return None
    return personas.get(line.author.casefold())


def _note(note: CaseNote | None) -> ContextNote | None:
    return ContextNote(text=note.text, depth=note.depth) if note and note.text.strip() else None


async def case_prepare(*, turn: CaseTurn) -> PreparedTurn:
    """The case's turn prepared as a dry run: the exact request a real turn would send."""
    return await turn_prepare(runtime=turn.runtime, request=turn.request, dry_run=True)


def persona_variant(*, persona: Persona, **changes: object) -> Persona:
    """An unsaved copy of ``persona`` (the same id, so it stands in for the saved one) with
    ``changes`` to its columns: the persona on another model. Never saved."""
    variant = copy.copy(persona)
    variant._state = copy.copy(persona._state)
    variant._state.adding = True  # unsaved: its lorebook is compiled, never cached by id
    for column, value in changes.items():
        setattr(variant, column, value)
    return variant


# --- A recorded turn as a case ----------------------------------------------------------------


@dataclass(frozen=True)
class FrozenCase:
    """A turn frozen as a case, and each history author's Discord id by the name the case
    shows (kept with the case to forget someone who later chooses full privacy)."""

    spec: PersonaCaseSpec
    author_ids: dict[str, int]
    left_out: int
    """Messages of the window not kept: full privacy or blacklisted users', notices, and the
    oldest ones past `personas.case_schema.HISTORY_MAX`."""


def case_from_turn(
    *,
    turn: Turn,
    prepared: PreparedTurn,
    name: str,
    expect: Expectations | None = None,
    known_names: Mapping[int, str] | None = None,
) -> FrozenCase:
    """``turn`` as a case named ``name``: ``prepared`` is the turn prepared again as a dry run
    over the window it recorded (`dashboard.preview.turn_replay`'s way: its trigger and its
    window's messages read from Discord), whose history becomes the case's. Kept with it: the
    memories the turn showed (its record), those earlier turns showed in that window, the
    short-term memory, the channel's and the guild's notes and mode, the turn's reply as the
    baseline, and the lorebook entries that fired.

    Mentions are written as the prompt shows them: by the names the window's read knows, else
    by ``known_names`` (what the worker last heard members called), a full-privacy or
    blacklisted user's as ``@someone``; their own messages, and notices the bot posted, are
    left out.
    """
    given = prepared.turn_input
    hidden = hidden_user_ids(given.privacy, given.blacklisted_user_ids)
    names = NameDirectory(
        users={**(known_names or {}), **given.names.users},
        channels=given.names.channels,
        roles=given.names.roles,
    )
    window = [
        m
        for m in given.history
        if m.id <= given.trigger_id and m.accountable_user_id not in hidden and not m.is_notice
    ]
    trigger = next(m for m in window if m.id == given.trigger_id)
    earlier = [m for m in window if m.id != trigger.id][-HISTORY_MAX:]
    left_out = len(given.history) - len(earlier) - 1
    index_of = {m.id: index for index, m in enumerate(earlier)}

    def line(message: HistoryMessage) -> CaseMessage:
        reply_to = None
        if message.reference is not None and message.reference.message_id in index_of:
            reply_to = index_of[message.reference.message_id]
        return CaseMessage(
            author=message.shown_name,
            content=render_markup(message.content, names, hidden),
            at=message.created_at,
            persona=True if message.author.persona_name else None,
            reply_to=reply_to,
        )

    settings = prepared.request.channel
    lore_fired = lore_labels(record=turn.lorebook or prepared.context.lore.as_record())
    spec = PersonaCaseSpec(
        name=name,
        history=[line(m) for m in earlier],
        message=line(trigger),
        notes=CaseNotes(
            channel=_note_spec(settings.channel_note), guild=_note_spec(settings.global_note)
        ),
        mode="autonomous" if settings.mode == ChannelMode.AUTONOMOUS else "reactive",
        memories=[str(m["line"]) for m in turn.recalled or [] if m.get("line")],
        earlier_memories=[
            EarlierMemories(after=index_of[message_id], lines=list(lines))
            for message_id, sets in sorted(given.memories_shown.items())
            if message_id in index_of
            for lines in sets
            if lines
        ],
        short_term_memory=given.short_term_memory_text,
        baseline=Baseline(reply=turn.reply_text, lorebook_fired=lore_fired)
        if turn.reply_text
        else None,
        expect=expect or Expectations(),
    )
    author_ids = {
        m.shown_name: m.accountable_user_id
        for m in (*earlier, trigger)
        if m.author.persona_name is None
    }
    return FrozenCase(spec=spec, author_ids=author_ids, left_out=left_out)


def mentioned_user_ids(*, prepared: PreparedTurn) -> frozenset[int]:
    """The users the prepared turn's messages mention (Discord's list and their markup)."""
    return frozenset(
        {i for m in prepared.turn_input.history for i in m.mention_ids}
        | {int(i) for m in prepared.turn_input.history for i in USER_MENTION.findall(m.content)}
    )


def lore_labels(*, record: Mapping[str, object]) -> list[str]:
    """The lorebook entries a record (`LoreActivation.as_record`) says were inserted, one
    label each: ``book: entry (key)``."""
    inserted = record.get("inserted")
    labels = []
    for hit in inserted if isinstance(inserted, list) else []:
        entry = hit.get("name") or hit.get("uid") or "an entry"
        key = f" ({hit['key']})" if hit.get("key") else ""
        labels.append(f"{hit.get('book', 'lorebook')}: {entry}{key}")
    return labels


def _note_spec(note: ContextNote | None) -> CaseNote | None:
    return CaseNote(text=note.text, depth=note.depth) if note is not None else None


def guild_cast(*, guild: GuildConfig) -> list[Persona]:
    """The guild's enabled personas, main first (what a channel's configuration lists)."""
    return selectors.guild_personas(guild=guild)
