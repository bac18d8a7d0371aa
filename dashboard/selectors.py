"""Reads behind the live screens: the overview, a channel's window, turns and "why (not)?".

Pages, htmx partials and the websocket consumers all render through these, so a fragment pushed
over a socket is the same HTML the page shows. Nothing here writes. Users with full privacy (or
blacklisted) are never shown by their words: their unread messages appear as counts only.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, QuerySet
from django.utils import timezone

from chat import selectors as chat_selectors
from chat.models import (
    EventQueue,
    PlannerStep,
    Turn,
    UnreadEvent,
    WorkerHeartbeat,
)
from chat.pipeline.items import ItemTag
from dashboard.names import Member, guild_members
from personas.models import ChannelConfig, GuildConfig

MEDIA_KEY = re.compile(r"\bmedia_\d+\b")
WINDOW_TAGS = {
    str(ItemTag.DIALOGUE_HISTORY),
    str(ItemTag.DATE_SPACER),
    str(ItemTag.CONTEXT_NOTE_INJECTION),
}


# -- the channel window -------------------------------------------------------------------------


@dataclass(frozen=True)
class WindowEntry:
    """One line of the window as the bot saw it: a dialogue entry (``refs`` its ``ref_N``
    keys, several when same-author messages were merged), a date spacer or a note."""

    tag: str
    role: str
    author: str
    text: str
    refs: tuple[str, ...]
    message_ids: tuple[str, ...]
    media: tuple[str, ...]
    tokens: int

    @property
    def merged(self) -> bool:
        return len(self.message_ids) > 1

    @property
    def dom_id(self) -> str:
        return f"entry-{self.message_ids[0]}" if self.message_ids else ""


@dataclass(frozen=True)
class UnreadEntry:
    """A message waiting in the unread pool; ``text`` is None for a hidden user."""

    message_id: str
    author: str
    text: str | None
    hidden: bool
    created_at: str


@dataclass(frozen=True)
class ChannelWindow:
    """What the channel page shows: the window of the latest turn, the unread pool since."""

    channel_id: int
    guild: GuildConfig | None
    configured: bool
    turn: Turn | None
    anchor_message_id: str | None
    rest_reason: str | None
    entries: tuple[WindowEntry, ...]
    left_out: tuple[dict[str, Any], ...]
    unread: tuple[UnreadEntry, ...]
    hidden_unread: int
    loop_state: str
    latest_turns: tuple[Turn, ...] = field(default_factory=tuple)
    planner_steps: tuple[PlannerStep, ...] = field(default_factory=tuple)

    @property
    def unread_count(self) -> int:
        return len(self.unread)

    @property
    def anchor_entry(self) -> WindowEntry | None:
        """The window entry holding the anchor message (None: not in the window)."""
        anchor = self.anchor_message_id
        return next((e for e in self.entries if anchor and anchor in e.message_ids), None)


def channel_window(*, channel_id: int) -> ChannelWindow:
    """The channel's live window (see `ChannelWindow`). ``loop_state`` is ``busy`` while a turn
    runs or messages wait, else ``idle`` (the live ``loop.state`` event says it sooner)."""
    config = ChannelConfig.objects.filter(channel_id=channel_id).select_related("guild").first()
    guild = config.guild if config else None
    if guild is None:
        known = chat_selectors.channel_guild_id(channel_id=channel_id)
        if known is not None and known.guild_id is not None:
            guild = GuildConfig.objects.filter(guild_id=known.guild_id).first()
    turns = Turn.objects.filter(channel_id=channel_id)
    turn = next((t for t in turns[:20] if t.context_items), None)
    entries = window_entries(turn) if turn else ()
    window = turn.window if turn else {}
    unread = unread_entries(channel_id=channel_id)
    running = turns.filter(status=Turn.Status.RUNNING).exists()
    return ChannelWindow(
        channel_id=channel_id,
        guild=guild,
        configured=config is not None,
        turn=turn,
        anchor_message_id=window.get("anchor_message_id"),
        rest_reason=window.get("rest_reason"),
        entries=entries,
        left_out=tuple(window.get("left_out", ())),
        unread=unread,
        hidden_unread=sum(1 for u in unread if u.hidden),
        loop_state="busy" if running or unread else "idle",
        latest_turns=tuple(turns[:10]),
        planner_steps=tuple(
            reversed(PlannerStep.objects.filter(channel_id=channel_id).order_by("-id")[:10])
        ),
    )


def window_entries(turn: Turn) -> tuple[WindowEntry, ...]:
    """The turn's dialogue items (and spacers and notes among them), oldest first."""
    refs: dict[str, str] = (turn.window or {}).get("refs", {})
    entries = []
    for item in turn.context_items:
        if item.get("tag") not in WINDOW_TAGS:
            continue
        text = item.get("text", "")
        author, _, body = text.partition(": ")
        is_dialogue = item["tag"] == str(ItemTag.DIALOGUE_HISTORY) and body
        ids = tuple(item.get("source_ids", ()))
        entries.append(
            WindowEntry(
                tag=item["tag"],
                role=item.get("role", ""),
                author=author if is_dialogue else "",
                text=body if is_dialogue else text,
                refs=tuple(refs[i] for i in ids if i in refs),
                message_ids=ids,
                media=tuple(dict.fromkeys(MEDIA_KEY.findall(text))),
                tokens=item.get("tokens", 0),
            )
        )
    return tuple(entries)


def unread_entries(*, channel_id: int) -> tuple[UnreadEntry, ...]:
    """The channel's unread pool, oldest first; hidden users' words left out."""
    rows = list(UnreadEvent.objects.filter(channel_id=channel_id).order_by("message_id"))
    standing = chat_selectors.user_standing(
        user_ids=[r.author_id for r in rows], guild_id=_guild_of(rows)
    )
    hidden = standing.full_privacy | standing.blacklisted
    entries = []
    for row in rows:
        author = row.event.get("author", {}) if isinstance(row.event, dict) else {}
        is_hidden = row.author_id in hidden
        entries.append(
            UnreadEntry(
                message_id=str(row.message_id),
                author="(hidden user)" if is_hidden else author.get("display_name", "?"),
                text=None if is_hidden else row.event.get("content", ""),
                hidden=is_hidden,
                created_at=str(row.event.get("created_at", "")),
            )
        )
    return tuple(entries)


# -- the overview -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChannelRow:
    channel_id: int
    mode: str
    unread: int
    queued: int
    loop_state: str


@dataclass(frozen=True)
class WorkerShards:
    """A live worker serving the guild: its id (host:pid:…) and the shards it holds."""

    holder: str
    shard_ids: tuple[int, ...]
    shard_count: int | None

    @property
    def label(self) -> str:
        """``shards 0, 1 of 4`` (``shard 0 of 1``): the shard numbers the worker holds."""
        ids = ", ".join(str(i) for i in self.shard_ids)
        word = "shard" if len(self.shard_ids) == 1 else "shards"
        return f"{word} {ids}" + (f" of {self.shard_count}" if self.shard_count else "")


@dataclass(frozen=True)
class GuildOverview:
    """``shards``: the shard numbers the serving workers hold; ``shard`` the one the guild
    lives on (Discord's ``(guild_id >> 22) % shard_count``; None when no worker says how many
    shards there are)."""

    guild: GuildConfig
    shards: tuple[int, ...]
    latency_ms: float | None
    workers: int
    channels: tuple[ChannelRow, ...]
    latest_turns: tuple[Turn, ...]
    errors: tuple[Turn, ...]
    shard: int | None = None
    shard_count: int | None = None
    serving: tuple[WorkerShards, ...] = ()


def overview(*, now: dt.datetime | None = None) -> tuple[GuildOverview, ...]:
    """Per configured guild: the shards live workers have connected for it and their mean
    gateway latency, and per channel (configured ones and any with messages waiting) the
    queue depth, the unread count and the loop state; the latest turns and failures."""
    now = now or timezone.now()
    fresh = WorkerHeartbeat.objects.filter(
        updated_at__gte=now - dt.timedelta(seconds=WorkerHeartbeat.STALE_AFTER_SECONDS)
    )
    beats = list(fresh)
    unread = dict(
        UnreadEvent.objects.values_list("channel_id")
        .annotate(n=Count("id"))
        .values_list("channel_id", "n")
    )
    queued = dict(
        EventQueue.objects.filter(status=EventQueue.Status.READY)
        .values_list("channel_id")
        .annotate(n=Count("id"))
        .values_list("channel_id", "n")
    )
    running = set(
        Turn.objects.filter(status=Turn.Status.RUNNING).values_list("channel_id", flat=True)
    )
    result = []
    for guild in GuildConfig.objects.order_by("name"):
        gid = str(guild.guild_id)
        serving = [b for b in beats if gid in b.guild_ids]
        shards = sorted({s for b in serving for s in b.shard_ids})
        latencies = [v for b in serving for v in b.latencies.values()]
        channel_ids = set(guild.channels.values_list("channel_id", flat=True))
        channel_ids |= set(
            UnreadEvent.objects.filter(guild_id=guild.guild_id).values_list("channel_id", flat=True)
        )
        modes = dict(guild.channels.values_list("channel_id", "mode"))
        rows = tuple(
            ChannelRow(
                channel_id=cid,
                mode=modes.get(cid, "reactive"),
                unread=unread.get(cid, 0),
                queued=queued.get(cid, 0),
                loop_state="busy" if cid in running or unread.get(cid) else "idle",
            )
            for cid in sorted(channel_ids)
        )
        turns = Turn.objects.filter(guild_id=guild.guild_id)
        shard_count = next((b.shard_count for b in serving if b.shard_count), None)
        result.append(
            GuildOverview(
                guild=guild,
                shard=(guild.guild_id >> 22) % shard_count if shard_count else None,
                shard_count=shard_count,
                serving=tuple(
                    WorkerShards(b.holder, tuple(sorted(b.shard_ids)), b.shard_count)
                    for b in serving
                ),
                shards=tuple(shards),
                latency_ms=round(sum(latencies) / len(latencies) * 1000, 1) if latencies else None,
                workers=len(serving),
                channels=rows,
                latest_turns=tuple(turns[:5]),
                errors=tuple(turns.filter(status=Turn.Status.FAILED)[:5]),
            )
        )
    return tuple(result)


def overview_channel_ids() -> list[int]:
    """Channels whose live updates the overview listens to: configured ones and those with
    turns or unread messages."""
    ids = set(ChannelConfig.objects.values_list("channel_id", flat=True))
    ids |= set(UnreadEvent.objects.values_list("channel_id", flat=True))
    ids |= set(Turn.objects.values_list("channel_id", flat=True).distinct()[:200])
    return sorted(ids)


# -- turns --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TurnFilters:
    guild: int | None = None
    channel: int | None = None
    persona: str = ""
    status: str = ""
    reason: str = ""
    since: dt.date | None = None
    until: dt.date | None = None


def turns_filtered(filters: TurnFilters) -> QuerySet[Turn]:
    """Turns, newest first, narrowed by every filter that is set (dates inclusive, UTC)."""
    turns = Turn.objects.all()
    if filters.guild:
        turns = turns.filter(guild_id=filters.guild)
    if filters.channel:
        turns = turns.filter(channel_id=filters.channel)
    if filters.persona:
        turns = turns.filter(persona_name__iexact=filters.persona)
    if filters.status:
        turns = turns.filter(status=filters.status)
    if filters.reason:
        turns = turns.filter(reason=filters.reason)
    if filters.since:
        turns = turns.filter(created_at__date__gte=filters.since)
    if filters.until:
        turns = turns.filter(created_at__date__lte=filters.until)
    return turns


def turn_timings(turn: Turn) -> list[dict[str, Any]]:
    """The turn's stages with their milliseconds and share of the whole (for the bar)."""
    stages = [
        ("history", turn.history_ms),
        ("participants", turn.participant_ms),
        ("build", turn.build_ms),
        ("limits", turn.limits_ms),
        ("model", turn.llm_ms),
        ("delivery", turn.deliver_ms),
    ]
    total = sum(ms or 0 for _, ms in stages) or 1
    return [
        {"stage": name, "ms": round(ms, 1), "percent": round((ms / total) * 100, 1)}
        for name, ms in stages
        if ms is not None
    ]


# -- why (not)? ---------------------------------------------------------------------------------


def recent_messages(*, limit: int = 20) -> list[dict[str, Any]]:
    """The newest recorded messages (for the "why (not)?" picker), newest first. Once consumed,
    the queue keeps only a message's key: its author and words then come from the turn it
    triggered (the line the persona saw), when there is one."""
    rows = list(EventQueue.objects.order_by("-message_id")[:limit])
    turns = {
        t.trigger_message_id: t
        for t in Turn.objects.filter(trigger_message_id__in=[r.message_id for r in rows])
    }
    hidden: set[int] = set()
    for guild_id in {r.guild_id for r in rows}:
        people = chat_selectors.user_standing(
            user_ids=[
                (r.event or {}).get("author", {}).get("id", 0)
                for r in rows
                if r.guild_id == guild_id
            ],
            guild_id=guild_id,
        )
        hidden |= people.full_privacy | people.blacklisted
    result = []
    for row in rows:
        author = (row.event or {}).get("author", {})
        is_hidden = author.get("id") in hidden
        turn = turns.get(row.message_id)
        text = "" if is_hidden else (row.event or {}).get("content", "")[:80]
        result.append(
            {
                "message_id": str(row.message_id),
                "channel_id": str(row.channel_id),
                "author": "(hidden user)" if is_hidden else author.get("display_name", ""),
                "author_id": turn.trigger_author_id if turn and not author else None,
                "text": text or (trigger_excerpt(turn) if turn and not author else ""),
                "at": row.created_at,
            }
        )
    return result


def channel_people(*, channel_id: int, guild_id: int | None, limit: int = 200) -> list[Member]:
    """Whom the preview offers as the author of a hypothetical message: the people who wrote
    in the channel recently (hidden users and bots left out), then the guild's other members
    the gateway named (`guild_members`: users with full privacy left out)."""
    rows = EventQueue.objects.filter(channel_id=channel_id).order_by("-message_id")[:limit]
    seen: dict[int, str] = {}
    for row in rows:
        author = (row.event or {}).get("author", {})
        if author.get("is_bot") or not author.get("id"):
            continue
        seen.setdefault(int(author["id"]), author.get("display_name", ""))
    standing = chat_selectors.user_standing(user_ids=seen, guild_id=_guild_of(rows))
    hidden = standing.full_privacy | standing.blacklisted
    writers = [Member(uid, name) for uid, name in seen.items() if uid not in hidden]
    others = [m for m in guild_members(guild_id=guild_id) if m.user_id not in seen]
    return writers + others


def _guild_of(rows: Iterable[EventQueue | UnreadEvent]) -> int | None:
    """The guild of one channel's ``rows`` (None: a DM, or nothing recorded, where the
    strictest privacy a user holds anywhere applies)."""
    return next((row.guild_id for row in rows if row.guild_id is not None), None)


def guild_filter_choices() -> Iterable[tuple[int, str]]:
    """(guild id, name) of every configured guild, for the turn filters."""
    return GuildConfig.objects.order_by("name").values_list("guild_id", "name")


def turn_channel_ids(*, limit: int = 200) -> list[int]:
    """The channels that have turns (at most ``limit``), for the turn filters."""
    ids = Turn.objects.order_by().values_list("channel_id", flat=True).distinct()[:limit]
    return sorted(ids)


EXCERPT_LENGTH = 80


def trigger_excerpt(turn: Turn, *, length: int = EXCERPT_LENGTH) -> str:
    """The start of the turn's trigger message as the persona saw it (its line in the recorded
    prompt, without the ``[ref_N]`` head); empty when the prompt does not hold it (no trigger,
    or a turn recorded without its items)."""
    if turn.trigger_message_id is None:
        return ""
    trigger = str(turn.trigger_message_id)
    ref = (turn.window or {}).get("refs", {}).get(trigger)
    for item in turn.context_items or ():
        if trigger not in item.get("source_ids", ()):
            continue
        _, _, content = item.get("text", "").partition(": ")
        lines = content.split("\n")
        line = next((x for x in lines if ref and x.startswith(f"[{ref}")), lines[-1])
        return _shorten(_without_head(line), length)
    return ""


def _without_head(line: str) -> str:
    """A dialogue line without its ``[ref_N …]`` head (a reply's head quotes its target)."""
    if not line.startswith("[ref_"):
        return line
    closing = '"] ' if ': "' in line.split("]", 1)[0] else "] "
    head_end = line.find(closing)
    if head_end < 0:
        return line
    return line[head_end + len(closing) :]


def _shorten(text: str, length: int) -> str:
    """``text`` on one line, cut to at most ``length`` characters at a word's end ("…")."""
    text = " ".join(text.split())
    if len(text) <= length:
        return text
    cut = text[: length - 1]
    if " " in cut[-20:]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" ,;:") + "…"
