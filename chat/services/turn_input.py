"""The read side of a turn: the anchored history window, what the database says about the
people in it, the reply targets it points at, and the render function the attempt runner calls.

Nothing here writes a row except the channel's window anchor (never in a dry run).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import functools
import hashlib
import json
import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from chat import selectors
from chat.llm.attempts import AttemptPlan, Render
from chat.llm.base import ModelApi
from chat.llm.tools import TOOL_DEFINITIONS
from chat.pipeline.context import TurnContext, TurnInput
from chat.pipeline.instruct import InstructPrompt, fit_instruct_prompt, to_instruct_prompt
from chat.pipeline.memory import short_term_memory_maintenance_due, visible_memory_text
from chat.pipeline.projections import AttemptProfile, to_openai_messages
from chat.pipeline.recall import RecalledMemory, memory_line, recall_query, window_people
from chat.pipeline.simplify import hidden_user_ids
from chat.pipeline.tokens import TokenCounter
from chat.pipeline.tools import ToolName
from chat.pipeline.truncation import context_budget, item_tokens, truncate_dialogue_history
from chat.pipeline.types import (
    Attachment,
    HistoryMessage,
    PrivacyLevel,
    ReferenceKind,
    signed_url_expiry,
    with_attachment_hashes,
    with_attachment_urls,
)
from chat.pipeline.window import ReanchorReason, history_window_stride, select_anchored_history
from chat.pipeline.window_reuse import RestReason
from chat.ports import DeliveryError, DiscordPort, messages_fetch, reads_at_most
from chat.selectors import ChannelSettings, lore
from chat.selectors.notice_bodies import minimal_notice_memory_ids
from chat.selectors.short_term_memory import short_term_memory
from chat.services.memory_recall import memories_recall_for_turn, memories_shown_before
from chat.services.turn_record import ms_since, window_anchor_store
from chat.services.turn_request import ParticipantScope, TurnRequest, TurnRuntime
from personas.models import ChannelMode

ANCHOR_IDLE_TTL = dt.timedelta(minutes=5)
URL_REFRESH_MARGIN = dt.timedelta(minutes=10)
"""An attachment URL whose signature runs out within this is signed anew before a turn hands
it to a model or a tool (a kept window outlives Discord's day-long signatures)."""

IMAGE_HASH_MAX_BYTES = 25 * 1024 * 1024
"""Largest image whose bytes are read to hash it (Discord's upload limit without boosts);
a larger one keeps its URL as its identity."""
IMAGE_READS_AT_ONCE = 4

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class WindowReasons:
    """How a turn's window was obtained: why it was read over REST (None: reused), why it
    was re-anchored (None: the stored anchor kept), where it starts, how far the stride
    rule moved it, how many messages it holds and how many newer than the trigger it
    leaves to their own turns."""

    rest_reason: RestReason | None
    reanchor_reason: ReanchorReason | None
    anchor_id: int | None
    advanced_by: int
    message_count: int
    after_trigger: int = 0

    def as_record(self) -> dict[str, object]:
        return {
            "rest_reason": str(self.rest_reason) if self.rest_reason else None,
            "reanchor_reason": str(self.reanchor_reason) if self.reanchor_reason else None,
            "anchor_message_id": str(self.anchor_id) if self.anchor_id is not None else None,
            "advanced_by": self.advanced_by,
            "message_count": self.message_count,
            "after_trigger": self.after_trigger,
        }


async def turn_window_read(
    *,
    runtime: TurnRuntime,
    channel: ChannelSettings,
    trigger: HistoryMessage,
    now: dt.datetime,
    dry_run: bool,
    pinned_anchor_id: int | None = None,
) -> tuple[tuple[HistoryMessage, ...], WindowReasons]:
    """The anchored window for this turn, ending at its trigger, and how it was read (REST or
    reused, re-anchored or not); the anchor is stored for the channel unless ``dry_run``.
    Originals a proxy system replaced (seed 002: "Superseded originals are excluded") are left
    out.

    The anchor is the channel's stored one (`ChannelWindowAnchor`), read the same way by the
    worker and by inspection (a dry run: the preview, ``/prompt``, a memory refresh), so both
    get the same window. It is chosen anew when the row says so (``reanchor_due``: the worker
    serving the channel dropped its windows since), and on the worker also when its own
    registry says so (`WindowRegistry.reanchor_pending`: the gateway reconnected before the
    row could be marked). ``pinned_anchor_id`` (a replay) is a recorded turn's anchor: the
    window starts there whatever the channel's row says, and a reset made after the trigger
    is not applied.

    Every turn's window starts at the channel's stored anchor and ends at its own trigger
    (`select_anchored_history` with ``end_id``): the messages after it wait for their own
    queued turns (DESIGN §5). Queued turns run in arrival order, so the turns of a busy
    stretch share their prompt's start, the anchor moving by a stride only when a window up
    to its trigger would exceed the limit, exactly as an ordinary conversation's do.

    The channel's window (`WindowRegistry.read`) holds the newest ``limit`` messages. A queued
    trigger older than all of them, or one with later messages whose window starts at an
    anchor the newest window has moved past, takes the messages up to the trigger from the
    window registry (`_up_to_trigger`), which keeps what the window moved past and reads
    further back at most once for a stretch of such turns; the turn then records
    ``older_than_window`` if that read went to Discord. An ordinary turn (its trigger the
    newest message) reads no further back: an anchor the window has moved past is chosen anew.
    """
    limit = channel.fetch_limit
    read = await runtime.windows.read(
        channel.channel_id, limit=limit, is_dm=channel.guild is None, dry_run=dry_run
    )
    messages = await _without_never_shown(read.messages)
    after_trigger = sum(1 for m in messages if m.id > trigger.id)
    reset = await sync_to_async(selectors.channel_reset_marker)(channel_id=channel.channel_id)
    reset_marker_id = reset.marker_id if reset is not None else None
    anchor_id: int | None
    anchor_limit: int | None
    if pinned_anchor_id is not None:
        anchor_id, anchor_limit, force_reanchor = pinned_anchor_id, None, False
        if reset_marker_id is not None and reset_marker_id > trigger.id:
            reset_marker_id = None  # a reset after the replayed turn
    else:
        anchor = await sync_to_async(selectors.window_anchor)(channel_id=channel.channel_id)
        if anchor is not None and now - anchor.updated_at >= ANCHOR_IDLE_TTL:
            anchor = None
        anchor_id = anchor.anchor_message_id if anchor is not None else None
        anchor_limit = anchor.limit if anchor is not None else None
        force_reanchor = read.force_reanchor or (anchor is not None and anchor.reanchor_due)

    read_older = False
    trigger_before_window = bool(messages) and trigger.id < messages[0].id
    anchor_before_window = (  # a queued trigger inside the window; not an ordinary turn's
        bool(messages)
        and anchor_id is not None
        and anchor_id < messages[0].id
        and trigger.id < messages[-1].id
    )
    if trigger_before_window or anchor_before_window:
        held = await _up_to_trigger(runtime, channel, trigger, anchor_id, dry_run=dry_run)
        if held is None and trigger_before_window:
            earlier = await runtime.port.fetch_history_before(
                channel.channel_id, trigger.id, limit - 1
            )
            held = ((*earlier, trigger), True)
        if held is not None:
            up_to_trigger, read_older = held
            messages = await _without_never_shown(tuple(sorted(up_to_trigger, key=lambda m: m.id)))
    if trigger.id not in {m.id for m in messages}:
        messages = tuple(sorted((*messages, trigger), key=lambda m: m.id))
    selection = select_anchored_history(
        messages,
        limit=limit,
        anchor_id=anchor_id,
        anchor_limit=anchor_limit,
        required_ids=frozenset({trigger.id}),
        force_reanchor=force_reanchor,
        reset_marker_id=reset_marker_id,
        end_id=trigger.id,
    )
    if selection.anchor_id is not None and not dry_run:
        await sync_to_async(window_anchor_store)(
            channel_id=channel.channel_id,
            anchor_id=selection.anchor_id,
            limit=limit,
            guild_id=channel.guild.guild_id if channel.guild is not None else None,
            # the gateway reconnected while this turn ran: its next turn re-anchors
            reanchor_due=runtime.windows.reanchor_pending(channel.channel_id),
        )
    reasons = WindowReasons(
        rest_reason=read.rest_reason or (RestReason.OLDER_THAN_WINDOW if read_older else None),
        reanchor_reason=selection.reanchor_reason,
        anchor_id=selection.anchor_id,
        advanced_by=selection.advanced_by,
        message_count=len(selection.messages),
        after_trigger=after_trigger,
    )
    return await _with_thread_starter(runtime.port, channel, selection.messages), reasons


async def _up_to_trigger(
    runtime: TurnRuntime,
    channel: ChannelSettings,
    trigger: HistoryMessage,
    anchor_id: int | None,
    *,
    dry_run: bool,
) -> tuple[tuple[HistoryMessage, ...], bool] | None:
    """The messages up to ``trigger`` that the window registry holds or reads further back
    (`WindowRegistry.read_up_to`), and whether it read over REST: the fetch limit's worth, and
    when the channel's anchor is older than those, a stride more, enough to find an anchor
    that is due a stride. None: the registry does not hold the trigger."""
    limit = channel.fetch_limit
    read = functools.partial(
        runtime.windows.read_up_to,
        channel.channel_id,
        trigger.id,
        fetch_before=runtime.port.fetch_history_before,
        dry_run=dry_run,
    )
    held = await read(count=limit)
    if held is None or anchor_id is None or held[0][0].id <= anchor_id:
        return held
    further = await read(count=limit + history_window_stride(limit))
    if further is None:
        return held
    return further[0], held[1] or further[1]


async def _without_never_shown(
    messages: tuple[HistoryMessage, ...],
) -> tuple[HistoryMessage, ...]:
    """``messages`` less the originals a proxy system replaced with a member's message, and
    less the triggers moderation withheld (`chat.services.reply_moderation`)."""
    never_shown = await sync_to_async(_never_shown_ids)([m.id for m in messages])
    return tuple(m for m in messages if m.id not in never_shown)


def _never_shown_ids(message_ids: list[int]) -> frozenset[int]:
    return selectors.superseded_original_ids(
        message_ids=message_ids
    ) | selectors.moderation_withheld_message_ids(message_ids=message_ids)


async def _with_thread_starter(
    port: DiscordPort, channel: ChannelSettings, window: tuple[HistoryMessage, ...]
) -> tuple[HistoryMessage, ...]:
    """A thread's window with the message the thread was started from first, when the
    thread's own start (Discord's starter message pointing at it, or a forum post's first
    message) has left the window: the thread's prompts always show what it is about."""
    if channel.guild is None or any(
        m.id == channel.channel_id
        or (m.reference is not None and m.reference.kind is ReferenceKind.THREAD_STARTER)
        for m in window
    ):
        return window
    starter = await port.thread_starter(channel.channel_id)
    return window if starter is None else (starter, *window)


async def turn_attachment_urls_refresh(
    *, runtime: TurnRuntime, messages: Sequence[HistoryMessage], now: dt.datetime
) -> dict[str, str]:
    """Every attachment URL of ``messages`` that expires within `URL_REFRESH_MARGIN`, signed
    anew (original → refreshed; remembered ones reused, the others asked of Discord in one
    go). A refresh that fails leaves the URLs as they were: the model is then told a file
    could not be read."""
    stale = {
        a.url
        for a in _attachments(messages)
        if (ex := a.url_expires_at) is not None and ex - now < URL_REFRESH_MARGIN
    }
    if not stale:
        return {}
    urls = runtime.caches.refreshed_urls
    fresh = {url: new for url in stale if (new := urls.get(url)) is not None}
    fresh = {
        url: new
        for url, new in fresh.items()
        if (ex := signed_url_expiry(new)) is None or ex - now >= URL_REFRESH_MARGIN
    }
    missing = sorted(stale - fresh.keys())
    if missing:
        try:
            fetched = await runtime.port.refresh_attachment_urls(missing)
        except DeliveryError:
            logger.warning("could not refresh %d attachment URLs", len(missing), exc_info=True)
            fetched = {}
        for url, new in fetched.items():
            urls.put(url, new)
        fresh |= fetched
    return fresh


async def turn_image_hashes(
    *, runtime: TurnRuntime, messages: Sequence[HistoryMessage], urls: Mapping[str, str]
) -> dict[int, str]:
    """A ``content_hash`` (SHA-256 of the bytes) for every image attachment of ``messages``
    that can be read, by attachment id, so an image posted again is recognised as the same
    picture (seed 002, "Deduplication": only its latest occurrence renders, and it counts once
    toward the rendered-image limit). ``urls`` are those signed anew (original → refreshed).

    Discord gives attachments no hash and a new URL per upload, so the worker reads each image
    once (at most `IMAGE_READS_AT_ONCE` at a time) and remembers its hash by attachment id
    (`TurnCaches.image_hashes`). An image that cannot be read, or is larger than
    `IMAGE_HASH_MAX_BYTES`, keeps no hash: its URL stays its identity."""
    images = {a.id: urls.get(a.url, a.url) for a in _attachments(messages) if a.is_image}
    if not images:
        return {}
    known = runtime.caches.image_hashes
    unread = [i for i in images if i not in known]

    async def digest(url: str) -> str | None:
        try:
            data = await runtime.port.read_attachment(url, max_bytes=IMAGE_HASH_MAX_BYTES + 1)
        except DeliveryError as error:
            logger.info("an image could not be read to hash it: %s", error)
            return None
        return None if len(data) > IMAGE_HASH_MAX_BYTES else hashlib.sha256(data).hexdigest()

    digests = await reads_at_most(
        IMAGE_READS_AT_ONCE, [functools.partial(digest, images[i]) for i in unread]
    )
    for attachment_id, digest_value in zip(unread, digests, strict=True):
        known.put(attachment_id, digest_value)
    return {i: h for i in images if (h := known.get(i)) is not None}


def _attachments(messages: Sequence[HistoryMessage]) -> list[Attachment]:
    """Every attachment of ``messages`` (forwarded ones' too)."""
    return [
        a
        for m in messages
        for a in (*m.attachments, *(a for s in m.snapshots for a in s.attachments))
    ]


def _each_message(
    turn_input: TurnInput, change: Callable[[HistoryMessage], HistoryMessage]
) -> TurnInput:
    """``turn_input`` with ``change`` applied to each of its messages and reply targets."""
    return replace(
        turn_input,
        history=tuple(change(m) for m in turn_input.history),
        reply_targets={i: change(m) for i, m in turn_input.reply_targets.items()},
    )


@dataclass(frozen=True)
class TurnParticipants:
    """A turn's input as its auxiliary reads completed it, the long-term memories it shows,
    and how long each read took (`PreparedTurn.participant_timings`)."""

    turn_input: TurnInput
    recalled: tuple[RecalledMemory, ...]
    timings: Mapping[str, float]


async def turn_participants_read(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    history: tuple[HistoryMessage, ...],
    now: dt.datetime,
    dry_run: bool,
    anchor_id: int | None,
) -> TurnParticipants:
    """Everything the database and Discord say about the turn's window, read concurrently
    (seed 000: "These reads run concurrently before simplification"), each timed.

    Steps:
        1. The reply targets the window points at (`_reply_targets`; those fetched for an
           earlier turn come from the window registry).
        2. At once: on the event loop, the attachment URLs that expire soon signed anew (not
           in a dry run: `turn_attachment_urls_refresh`), then the window's images hashed
           (`turn_image_hashes`); on the database thread, the people in the window
           (`turn_input_gather`: privacy and blacklist shared with the co-responding turns
           through ``request.participants``, short-term memory, presence, notice bodies,
           follow-up tools), then the long-term memories that bear on the trigger
           (`turn_memories_recall`; a persona test case's ``request.fixed`` gives them instead).
        3. The input with the refreshed URLs, the image hashes and the memories.

    Timings, by the `Turn` field that keeps each: ``hydration_ms`` (1 and the people),
    ``url_refresh_ms``, ``image_hash_ms``, ``recall_ms``.
    """
    timings: dict[str, float] = {}

    @contextlib.contextmanager
    def timed(name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        finally:
            timings[name] = timings.get(name, 0.0) + ms_since(started=started)

    with timed("hydration_ms"):
        reply_targets = await _reply_targets(
            runtime, request.channel.channel_id, [m for m in history if m.id <= request.trigger.id]
        )
    messages = (*history, *reply_targets.values())

    async def media() -> tuple[dict[str, str], dict[int, str]]:
        urls: dict[str, str] = {}
        if not dry_run:
            with timed("url_refresh_ms"):
                urls = await turn_attachment_urls_refresh(
                    runtime=runtime, messages=messages, now=now
                )
        with timed("image_hash_ms"):
            hashes = await turn_image_hashes(runtime=runtime, messages=messages, urls=urls)
        return urls, hashes

    recalled: tuple[RecalledMemory, ...] = ()
    shown: dict[int, tuple[tuple[str, ...], ...]] = {}
    reading_media = asyncio.create_task(media())
    try:
        with timed("hydration_ms"):
            turn_input = await turn_input_gather(
                runtime=runtime,
                request=request,
                history=history,
                reply_targets=reply_targets,
                now=now,
            )
        if request.fixed is None:
            with timed("recall_ms"):
                recalled, shown = await sync_to_async(turn_memories_recall)(
                    runtime=runtime, request=request, turn_input=turn_input, anchor_id=anchor_id
                )
        urls, hashes = await reading_media
    finally:
        if not reading_media.done():
            reading_media.cancel()
            await asyncio.gather(reading_media, return_exceptions=True)
    if urls or hashes:
        turn_input = _each_message(
            turn_input,
            lambda m: with_attachment_hashes(with_attachment_urls(m, urls), hashes),
        )
    if request.fixed is not None:  # a persona test case: its memories as they were saved
        return TurnParticipants(
            turn_input=replace(
                turn_input,
                memories=request.fixed.memories,
                memories_shown=request.fixed.memories_shown,
                short_term_memory_text=request.fixed.short_term_memory_text,
            ),
            recalled=(),
            timings=timings,
        )
    turn_input = replace(
        turn_input,
        memories=tuple(memory_line(m.record) for m in recalled),
        memories_shown=shown,
    )
    return TurnParticipants(turn_input=turn_input, recalled=recalled, timings=timings)


async def turn_input_gather(
    *,
    runtime: TurnRuntime,
    request: TurnRequest,
    history: tuple[HistoryMessage, ...],
    reply_targets: Mapping[int, HistoryMessage],
    now: dt.datetime,
) -> TurnInput:
    """The turn's input before its media and memories are read: the window, its reply
    targets, and what the database says about the people in it (`_gather_people`, one trip
    to the database thread)."""
    channel, persona = request.channel, request.persona
    people = await sync_to_async(_gather_people)(request, history, reply_targets, now)
    user_ids = [i for m in history for i in (m.author.id, m.accountable_user_id, *m.mention_ids)]
    previous = runtime.caches.warm_context(channel.channel_id, persona.id)
    return TurnInput(
        persona=selectors.persona_profile(persona=persona),
        history=history,
        trigger_id=request.trigger.id,
        now=now,
        timezone=channel.timezone,
        token_counter=runtime.token_counter,
        personas=tuple(
            selectors.persona_profile(persona=p) for p in request.configuration.personas
        ),
        reply_targets=reply_targets,
        is_queued_turn=request.is_queued_turn,
        later_queued_trigger_ids=request.later_queued_trigger_ids,
        fetch_limit=channel.fetch_limit,
        media_window=channel.fetch_limit,
        names=runtime.port.names(request.configuration.guild_id, user_ids),
        privacy=people.privacy,
        blacklisted_user_ids=people.blacklisted,
        blocks=request.configuration.blocks,
        channel_note=channel.channel_note,
        global_note=channel.global_note,
        short_term_memory_text=people.short_term_memory_text,
        short_term_memory_depth=persona.short_term_memory_depth,
        configured_tools=_configured_tools(runtime, request),
        tool_schema_tokens=tool_schema_tokens(counter=runtime.token_counter),
        follow_up_tools=people.follow_up_tools,
        notice_bodies=people.notice_bodies,
        autonomous=channel.mode == ChannelMode.AUTONOMOUS,
        tools_enabled=persona.tools_enabled,
        verbatim_tool_nudge=persona.verbatim_tool_nudge,
        reunion_last_seen=people.last_seen,
        short_term_memory_maintenance_due=people.short_term_memory_due,
        lorebooks=lore.lorebooks(persona=persona, guild=channel.guild),
        preset=selectors.chat_preset(persona=persona, guild=channel.guild),
        previous=previous,
    )


_TOOL_SCHEMA_TOKENS: dict[str, Mapping[str, int]] = {}


def tool_schema_tokens(*, counter: TokenCounter) -> Mapping[str, int]:
    """What each tool's definition costs in a request's ``tools`` list, by tool name (counted
    once per tokenizer)."""
    known = _TOOL_SCHEMA_TOKENS.get(counter.name)
    if known is None:
        known = _TOOL_SCHEMA_TOKENS[counter.name] = {
            name.value: counter.count(json.dumps(spec.definition(), ensure_ascii=False))
            for name, spec in TOOL_DEFINITIONS.items()
        }
    return known


def _configured_tools(runtime: TurnRuntime, request: TurnRequest) -> frozenset[str]:
    """The tools whose outside service this turn has: ``analyze_image`` and ``process_gif``
    with a vision model, ``process_youtube_video`` with a transcript service, ``remember`` in
    a guild (long-term memories are kept per guild), and ``send_sticker`` in an autonomous
    channel of a guild that has stickers, for the persona speaking through the bot account
    (webhooks cannot send stickers)."""
    configured = (
        {ToolName.ANALYZE_IMAGE, ToolName.PROCESS_GIF} if runtime.vision is not None else set()
    )
    if runtime.videos is not None:
        configured.add(ToolName.PROCESS_YOUTUBE_VIDEO)
    guild_id = request.configuration.guild_id
    if guild_id is not None:
        configured.add(ToolName.REMEMBER)
        if (
            request.channel.mode == ChannelMode.AUTONOMOUS
            and request.persona.is_main
            and runtime.port.guild_stickers(guild_id)
        ):
            configured.add(ToolName.SEND_STICKER)
    return frozenset(configured)


@dataclass(frozen=True)
class _People:
    """What the database says about the people in a turn's window, and the persona's memory."""

    privacy: Mapping[int, PrivacyLevel]
    blacklisted: frozenset[int]
    short_term_memory_text: str | None
    short_term_memory_due: bool
    last_seen: dt.datetime | None
    notice_bodies: Mapping[int, str]
    follow_up_tools: frozenset[str] = frozenset()


def _gather_people(
    request: TurnRequest,
    history: tuple[HistoryMessage, ...],
    reply_targets: Mapping[int, HistoryMessage],
    now: dt.datetime,
) -> _People:
    """Privacy and blacklist for everyone in the window, this scope's short-term memory (its
    text unless expired, and whether maintenance is due: `chat.pipeline.memory`), the bodies
    of the window's minimal-verbosity notices (`selectors.notice_bodies`), and the tools the
    reply the trigger answers was offered (seed 000's follow-up admission). The standing and
    the notice bodies are read through ``request.participants``, once for every turn that
    answers the same message."""
    messages = [*history, *reply_targets.values()]
    user_ids = {m.accountable_user_id for m in messages} | {
        i for m in messages for i in m.mention_ids
    }
    scope = request.participants or ParticipantScope()
    guild_id = request.configuration.guild_id
    standing = scope.standing(user_ids=user_ids, guild_id=guild_id)
    persona = request.persona
    memory = short_term_memory(
        persona=persona,
        channel_id=request.channel.channel_id,
        user_id=request.memory_user_id,
    )
    scope_user_id = request.memory_user_id
    if scope_user_id is not None and not standing.remembers(scope_user_id):
        memory = None  # partial or full privacy: nothing about them is remembered or recalled
    state = memory.state if memory is not None else None
    trigger = request.trigger
    last_seen = None
    if trigger.author.persona_name is None and not request.reason.answers_no_message:
        last_seen = selectors.last_presence(
            persona_id=persona.id, user_id=trigger.accountable_user_id
        )
    reference = trigger.reference
    follow_up_tools: frozenset[str] = frozenset()
    if reference is not None and reference.kind is ReferenceKind.REPLY:
        follow_up_tools = selectors.replied_turn_tools(
            channel_id=request.channel.channel_id,
            persona_id=persona.id,
            message_id=reference.message_id,
        )
    return _People(
        notice_bodies=scope.notice_bodies(
            guild_id=guild_id, memory_ids=minimal_notice_memory_ids(messages=messages)
        ),
        follow_up_tools=follow_up_tools,
        last_seen=last_seen,
        privacy=standing.privacy,
        blacklisted=standing.blacklisted,
        short_term_memory_text=visible_memory_text(state, now=now),
        short_term_memory_due=short_term_memory_maintenance_due(
            state,
            refresh_every=persona.short_term_memory_refresh_every,
            tools_on=persona.tools_enabled,
            now=now,
        ),
    )


async def _reply_targets(
    runtime: TurnRuntime, channel_id: int, history: Sequence[HistoryMessage]
) -> dict[int, HistoryMessage]:
    """Messages the turn's own window (up to its trigger: the pipeline leaves later messages
    to their own turns) points at but does not hold: same-channel reply
    targets, and a thread's starter message, fetched from the parent channel with its id
    (seed 000, "Thread starter media"). Those fetched for an earlier turn come from the window
    registry; the rest are fetched at most four at a time and kept there. One that cannot be
    fetched, or that moderation withheld as a trigger, is left out (its annotation is
    omitted)."""
    present = {m.id for m in history}
    wanted = sorted(
        {
            (m.reference.channel_id, m.reference.message_id)
            for m in history
            if m.reference is not None
            and m.reference.message_id not in present
            and (
                m.reference.channel_id == channel_id
                or m.reference.kind is ReferenceKind.THREAD_STARTER
            )
        }
    )
    if not wanted:
        return {}
    withheld = await sync_to_async(selectors.moderation_withheld_message_ids)(
        message_ids=[i for _, i in wanted]
    )
    wanted = [(where, i) for where, i in wanted if i not in withheld]
    known = {(where, i): runtime.windows.reply_target(channel_id, i) for where, i in wanted}
    missing = [key for key, target in known.items() if target is None]
    for key, target in zip(missing, await messages_fetch(runtime.port, missing), strict=True):
        known[key] = target
        if target is not None:
            runtime.windows.remember_reply_target(channel_id, target)
    return {target.id: target for target in known.values() if target is not None}


def turn_renderer(
    *,
    context: TurnContext,
    limit: int,
    budget: int | None = None,
    counter: TokenCounter | None = None,
) -> Render:
    """The attempt runner's ``render``: projects the context for each attempt's model.

    ``budget`` is the persona's whole budget (`context_budget` of its context window); what
    the context was fitted to is less by the offered tools' definitions. A model with a
    smaller context window of its own (a fallback's ``context_window``) gets its history
    truncated to its own budget, less the same tools. A text-completion model's prompt is
    counted as sent, its whole text with ``counter``, and fitted to its budget (its own, else
    ``budget``; it is offered no tools) in the same stride batches, from the history before
    the chat items' truncation (`instruct.fit_instruct_prompt`); without a counter or a
    budget it is written from the chat items as they are."""
    stride = history_window_stride(limit)
    reserved = 0 if budget is None else max(0, budget - context.truncation.budget)

    def render(plan: AttemptPlan) -> list[dict[str, Any]] | InstructPrompt:
        own = budget
        if plan.model.context_window is not None:
            own = context_budget(plan.model.context_window, plan.model.max_output_tokens)
        if plan.model.api is ModelApi.COMPLETIONS and counter is not None and own is not None:
            return fit_instruct_prompt(
                context,
                plan.model.template(),
                budget=own,
                stride=stride,
                counter=counter,
                extra_batches=plan.shorten_batches,
            )
        shortened = _shorten(context, batches=plan.shorten_batches, stride=stride)
        if (
            plan.model.context_window is not None
            and own is not None
            and own - reserved < context.truncation.budget
        ):
            items, _report = truncate_dialogue_history(
                shortened.items, budget=max(0, own - reserved), stride=stride
            )
            shortened = replace(shortened, items=items)
        if plan.model.api is ModelApi.COMPLETIONS:
            return to_instruct_prompt(shortened, plan.model.template())
        profile = AttemptProfile(
            model=plan.model.name,
            supports_vision=plan.model.supports_vision,
            supports_prefill=plan.model.supports_prefill,
            tools=frozenset(plan.tools),
            merge_same_role=plan.model.merge_same_role,
        )
        return to_openai_messages(shortened, profile)

    return render


def _shorten(context: TurnContext, *, batches: int, stride: int) -> TurnContext:
    """``context`` with ``batches`` more stride batches of the oldest history removed (an
    empty answer is retried on shorter history)."""
    items = context.items
    for _ in range(batches):
        items, _report = truncate_dialogue_history(
            items, budget=max(0, item_tokens(items) - 1), stride=stride
        )
    return context if items is context.items else replace(context, items=items)


def turn_memories_recall(
    *, runtime: TurnRuntime, request: TurnRequest, turn_input: TurnInput, anchor_id: int | None
) -> tuple[tuple[RecalledMemory, ...], dict[int, tuple[tuple[str, ...], ...]]]:
    """The long-term memories this turn shows (`memory_recall.memories_recall_for_turn`), and
    what the persona's earlier turns of this window (``anchor_id``) showed and is still
    remembered (`memories_shown_before`: the prompt keeps those where they were). The query
    is what the person asks: the trigger and the message it replies to, without the
    personas' names and trigger words (`recall.recall_query`); the personal memories of the
    people speaking in the window are eligible, except of those with partial or full privacy
    or on the blacklist; at most ``MEMORY_RECALL_BUDGET_PERCENT`` of the prompt budget. A
    memory the window already shows is not shown again."""
    unremembered = frozenset(
        user_id
        for user_id, level in turn_input.privacy.items()
        if level in (PrivacyLevel.PARTIAL, PrivacyLevel.FULL)
    ) | frozenset(turn_input.blacklisted_user_ids)
    hidden = hidden_user_ids(turn_input.privacy, turn_input.blacklisted_user_ids)
    model = turn_input.persona.model
    budget = context_budget(model.context_window, model.max_output_tokens)
    recalled = memories_recall_for_turn(
        guild_id=request.configuration.guild_id,
        persona_id=request.persona.id,
        people=window_people(
            turn_input.history, trigger_id=turn_input.trigger_id, unremembered=unremembered
        ),
        query=_recall_query(request, turn_input, hidden),
        token_budget=budget * settings.MEMORY_RECALL_BUDGET_PERCENT // 100,
        count_tokens=runtime.token_counter.count,
        embedder=runtime.embeddings,
    )
    if request.configuration.guild_id is None:
        return recalled, {}
    shown = memories_shown_before(
        guild_id=request.configuration.guild_id,
        embedder=runtime.embeddings,
        persona_id=request.persona.id,
        channel_id=request.channel.channel_id,
        anchor_id=anchor_id,
        message_ids=[message.id for message in turn_input.history],
        trigger_id=turn_input.trigger_id,
    )
    already = {line for sets in shown.values() for lines in sets for line in lines}
    return tuple(m for m in recalled if memory_line(m.record) not in already), shown


def _recall_query(request: TurnRequest, turn_input: TurnInput, hidden: frozenset[int]) -> str:
    """`recall.recall_query` for this turn: its trigger and the message the trigger replies to
    (in the window, or fetched as a reply target), without the names and trigger words of the
    guild's personas."""
    messages = {message.id: message for message in turn_input.history}
    trigger = messages.get(turn_input.trigger_id, request.trigger)
    replied = None
    reference = trigger.reference
    if reference is not None and reference.kind is ReferenceKind.REPLY:
        replied = messages.get(reference.message_id) or turn_input.reply_targets.get(
            reference.message_id
        )
    addressing = [
        word
        for persona in request.configuration.personas
        for word in (persona.name, *persona.triggers)
    ]
    return recall_query(trigger, replied, hidden=hidden, addressing=addressing)
