"""Reads behind the dashboard's screens: the overview, a channel's window, turns, "why
(not)?", and a guild's personas, rows, memories and documents.

Every read takes the person's `GuildRights` and starts from what they may see: a guild's rows
from the guild `dashboard.access.guild_access` gave, everything else narrowed by the rights
(`visible_turns`, `visible_messages`, `GuildRights.scope`), so a check a view forgot shows
nothing rather than everything. Turns, messages and unread events of direct messages belong to
the guild of the persona that answers them (DESIGN's DM policy).

Pages, htmx partials and the websocket consumers all render through these, so a fragment pushed
over a socket is the same HTML the page shows. Nothing here writes. Users with full privacy (or
blacklisted) are never shown by their words: their unread messages appear as counts only.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import re
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from django.db import connection
from django.db.models import Count, F, Prefetch, Q, QuerySet, Window
from django.db.models.functions import RowNumber
from django.utils import timezone

from accounts.selectors import GuildRights
from chat import selectors as chat_selectors
from chat.models import (
    Document,
    EventQueue,
    Memory,
    MessageIndex,
    PlannerStep,
    Turn,
    UnreadEvent,
    WorkerHeartbeat,
)
from chat.pipeline.items import ItemTag
from chat.pipeline.triggers import TurnReason
from dashboard.names import Member, NameBook, ShownName, guild_members
from personas.models import ChannelConfig, GuildConfig, ModelPrice, Persona

MEDIA_KEY = re.compile(r"\bmedia_\d+\b")
WINDOW_TAGS = {
    str(ItemTag.DIALOGUE_HISTORY),
    str(ItemTag.DATE_SPACER),
    str(ItemTag.CONTEXT_NOTE_INJECTION),
}


# -- what a person sees -------------------------------------------------------------------------


def dm_guild_id() -> int | None:
    """The guild of the persona that answers direct messages now (None: DMs are off)."""
    return (
        Persona.objects.filter(answers_dms=True).values_list("guild__guild_id", flat=True).first()
    )


def visible_turns(*, rights: GuildRights) -> QuerySet[Turn]:
    """The turns the person may see: those of their guilds, and of direct messages answered
    by a persona of their guilds."""
    if rights.unrestricted:
        return Turn.objects.all()
    ids = sorted(rights.roles)
    return Turn.objects.filter(
        Q(guild_id__in=ids) | Q(guild_id__isnull=True, persona__guild__guild_id__in=ids)
    )


def visible_messages(
    *, rights: GuildRights, model: type[EventQueue] | type[UnreadEvent]
) -> QuerySet[Any]:
    """The recorded messages (queue or unread pool) the person may see: their guilds', and
    direct messages while the persona answering them is of their guilds."""
    if rights.unrestricted:
        return model.objects.all()
    ids = sorted(rights.roles)
    dms = Q(guild_id__isnull=True) if rights.may_view(dm_guild_id()) else Q(pk__in=[])
    return model.objects.filter(Q(guild_id__in=ids) | dms)


def channel_guild(*, channel_id: int) -> int | None:
    """The guild a channel's data belongs to: its configuration's, else the guild recorded
    with its messages or turns; for a direct-message channel, the guild of the persona that
    answered it last (or answers DMs now). None: nothing is known of the channel."""
    configured = (
        ChannelConfig.objects.filter(channel_id=channel_id)
        .values_list("guild__guild_id", flat=True)
        .first()
    )
    if configured is not None:
        return configured
    known = chat_selectors.channel_guild_id(channel_id=channel_id)
    if known is not None and known.guild_id is not None:
        return known.guild_id
    turn = (
        Turn.objects.filter(channel_id=channel_id)
        .values_list("guild_id", "persona__guild__guild_id")
        .first()
    )
    if turn is not None:
        return turn[0] if turn[0] is not None else turn[1]
    return dm_guild_id() if known is not None else None


def channel_configured_guild(*, channel_id: int) -> int | None:
    """The guild of a configured channel, else the one recorded at ingest; None: unknown (the
    prompt preview then answers "not configured")."""
    configured = (
        ChannelConfig.objects.filter(channel_id=channel_id)
        .values_list("guild__guild_id", flat=True)
        .first()
    )
    if configured is not None:
        return configured
    known = chat_selectors.channel_guild_id(channel_id=channel_id)
    return known.guild_id if known is not None else None


def may_view_channel(*, rights: GuildRights, channel_id: int) -> bool:
    """The person may open the channel's screens (operators: any channel, known or not)."""
    return rights.unrestricted or rights.may_view(channel_guild(channel_id=channel_id))


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


def channel_window(*, rights: GuildRights, channel_id: int) -> ChannelWindow:
    """The channel's live window (see `ChannelWindow`), of what the person may see.
    ``loop_state`` is ``busy`` while a turn runs or messages wait, else ``idle`` (the live
    ``loop.state`` event says it sooner)."""
    config = (
        rights.scope(ChannelConfig.objects.all(), "guild__guild_id")
        .filter(channel_id=channel_id)
        .select_related("guild")
        .first()
    )
    guild = config.guild if config else None
    if guild is None:
        known = chat_selectors.channel_guild_id(channel_id=channel_id)
        if known is not None and known.guild_id is not None:
            guild = rights.scope(GuildConfig.objects.all()).filter(guild_id=known.guild_id).first()
    turns = visible_turns(rights=rights).filter(channel_id=channel_id)
    turn = next((t for t in turns[:20] if t.context_items), None)
    entries = window_entries(turn=turn) if turn else ()
    window = turn.window if turn else {}
    unread = unread_entries(rights=rights, channel_id=channel_id)
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
            reversed(
                rights.scope(PlannerStep.objects.all())
                .filter(channel_id=channel_id)
                .order_by("-id")[:10]
            )
        ),
    )


def window_entries(*, turn: Turn) -> tuple[WindowEntry, ...]:
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


def unread_entries(*, rights: GuildRights, channel_id: int) -> tuple[UnreadEntry, ...]:
    """The channel's unread pool, oldest first; hidden users' words left out."""
    rows = list(
        visible_messages(rights=rights, model=UnreadEvent)
        .filter(channel_id=channel_id)
        .order_by("message_id")
    )
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
    version: str = ""
    """A digest of everything the guild's card shows (`overview_shown`; empty: not made)."""


LATEST_TURNS = 5


def overview(*, rights: GuildRights, now: dt.datetime | None = None) -> tuple[GuildOverview, ...]:
    """Per configured guild the person may see: the shards live workers have connected for it
    and their mean gateway latency, and per channel (configured ones and any with messages
    waiting) the queue depth, the unread count and the loop state; the latest turns and
    failures. A handful of reads for all guilds together, whatever their number
    (`newest_turns`)."""
    now = now or timezone.now()
    # What the cards show of a guild and its personas (not their prompts, lorebooks, presets).
    personas = Prefetch(
        "personas",
        queryset=Persona.objects.only("id", "guild_id", "name", "is_main").order_by(
            "-is_main", "name"
        ),
    )
    guilds = list(
        rights.scope(
            GuildConfig.objects.only("id", "guild_id", "name").order_by("name")
        ).prefetch_related(personas)
    )
    if not guilds:
        return ()
    ids = [guild.guild_id for guild in guilds]
    fresh = WorkerHeartbeat.objects.filter(
        updated_at__gte=now - dt.timedelta(seconds=WorkerHeartbeat.STALE_AFTER_SECONDS)
    )
    beats = list(fresh)
    modes: dict[int, dict[int, str]] = {gid: {} for gid in ids}
    for gid, channel_id, mode in rights.scope(
        ChannelConfig.objects.all(), "guild__guild_id"
    ).values_list("guild__guild_id", "channel_id", "mode"):
        modes.setdefault(gid, {})[channel_id] = mode
    unread_by_guild: dict[int, dict[int, int]] = {gid: {} for gid in ids}
    for gid, channel_id, n in (
        rights.scope(UnreadEvent.objects.filter(guild_id__isnull=False))
        .values_list("guild_id", "channel_id")
        .annotate(n=Count("id"))
        .values_list("guild_id", "channel_id", "n")
    ):
        unread_by_guild.setdefault(gid, {})[channel_id] = n
    queued = dict(
        rights.scope(EventQueue.objects.filter(status=EventQueue.Status.READY))
        .values_list("channel_id")
        .annotate(n=Count("id"))
        .values_list("channel_id", "n")
    )
    running = set(
        rights.scope(Turn.objects.filter(status=Turn.Status.RUNNING)).values_list(
            "channel_id", flat=True
        )
    )
    latest = newest_turns(rights=rights, guild_ids=ids, limit=LATEST_TURNS)
    errors = newest_turns(rights=rights, guild_ids=ids, limit=LATEST_TURNS, failed=True)
    result = []
    for guild in guilds:
        gid = str(guild.guild_id)
        serving = [b for b in beats if gid in b.guild_ids]
        shards = sorted({s for b in serving for s in b.shard_ids})
        latencies = [v for b in serving for v in b.latencies.values()]
        unread = unread_by_guild.get(guild.guild_id, {})
        guild_modes = modes.get(guild.guild_id, {})
        rows = tuple(
            ChannelRow(
                channel_id=cid,
                mode=guild_modes.get(cid, "reactive"),
                unread=unread.get(cid, 0),
                queued=queued.get(cid, 0),
                loop_state="busy" if cid in running or unread.get(cid) else "idle",
            )
            for cid in sorted(set(guild_modes) | set(unread))
        )
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
                latest_turns=tuple(latest.get(guild.guild_id, ())),
                errors=tuple(errors.get(guild.guild_id, ())),
            )
        )
    return tuple(result)


OVERVIEW_TURN_FIELDS = (
    "id",
    "guild_id",
    "channel_id",
    "persona_id",
    "persona_name",
    "status",
    "error",
    "trigger_message_id",
    "trigger_author_id",
    "created_at",
)
"""What the overview shows of a turn (its prompt record is read only for the excerpt)."""


def newest_turns(
    *, rights: GuildRights, guild_ids: list[int], limit: int, failed: bool = False
) -> dict[int, list[Turn]]:
    """Each guild's newest ``limit`` turns (``failed``: failed turns), newest first, with
    their trigger excerpts (`with_excerpts`). On PostgreSQL one read finds them all (a
    LATERAL join walking the ``turn_guild_recent`` or ``turn_guild_failed`` index once per
    guild); elsewhere one read ranking each guild's turns (a window function)."""
    if not guild_ids:
        return {}
    table = Turn._meta.db_table
    only_failed = "AND status = 'failed'" if failed else ""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute(
                f"SELECT newest.id FROM unnest(%s::bigint[]) AS g(guild_id) "
                f"CROSS JOIN LATERAL (SELECT id FROM {table} WHERE guild_id = g.guild_id "
                f"{only_failed} ORDER BY created_at DESC LIMIT %s) AS newest",
                [list(guild_ids), limit],
            )
            ids = [row[0] for row in cursor.fetchall()]
    else:
        turns = Turn.objects.filter(guild_id__in=list(guild_ids))
        if failed:
            turns = turns.filter(status=Turn.Status.FAILED)
        rank = Window(RowNumber(), partition_by=F("guild_id"), order_by=F("created_at").desc())
        ids = list(turns.annotate(rank=rank).filter(rank__lte=limit).values_list("pk", flat=True))
    rows = with_excerpts(
        turns=list(
            rights.scope(Turn.objects.filter(pk__in=ids))
            .only(*OVERVIEW_TURN_FIELDS)
            .order_by("-created_at", "-id")
        )
    )
    by_guild: dict[int, list[Turn]] = {}
    for turn in rows:
        by_guild.setdefault(turn.guild_id, []).append(turn)
    return by_guild


def overview_shown(
    *, overview: Iterable[GuildOverview], book: NameBook
) -> tuple[GuildOverview, ...]:
    """The overview as its cards show it: every trigger author's name read into ``book`` at
    once, and each row's ``version``, a digest of everything its card shows (names as
    ``book`` gives them), by which a card rendered once is kept (``{% kept %}``,
    `dashboard.templatetags.turns`) until any of it changes."""
    rows = tuple(overview)
    book.prefetch_users(
        t.trigger_author_id
        for row in rows
        for t in (*row.latest_turns, *row.errors)
        if t.trigger_author_id
    )
    return tuple(dataclasses.replace(row, version=_card_version(row, book)) for row in rows)


def _card_version(row: GuildOverview, book: NameBook) -> str:
    def shown(name: ShownName) -> tuple:
        return (name.text, name.known, name.hidden, name.avatar_url)

    card = (
        row.guild.guild_id,
        row.guild.name,
        [(p.name, p.is_main) for p in row.guild.personas.all()],
        row.workers,
        row.latency_ms,
        row.shard,
        row.shard_count,
        [(w.holder, w.label) for w in row.serving],
        [
            (
                c.channel_id,
                c.mode,
                c.unread,
                c.queued,
                c.loop_state,
                shown(book.channel(c.channel_id)),
            )
            for c in row.channels
        ],
        [
            (
                t.pk,
                t.persona_name,
                t.status,
                shown(book.channel(t.channel_id)),
                t.created_at.isoformat(),
                getattr(t, "excerpt", None),
                shown(book.user(t.trigger_author_id)) if t.trigger_author_id else None,
            )
            for t in row.latest_turns
        ],
        [(t.pk, t.persona_name, t.error) for t in row.errors],
    )
    return hashlib.blake2b(repr(card).encode(), digest_size=16).hexdigest()


def overview_channel_ids(*, rights: GuildRights) -> list[int]:
    """Channels whose live updates the person's overview listens to: configured ones and those
    with turns or unread messages, of the guilds they may see."""
    ids = set(
        rights.scope(ChannelConfig.objects.all(), "guild__guild_id").values_list(
            "channel_id", flat=True
        )
    )
    ids |= set(rights.scope(UnreadEvent.objects.all()).values_list("channel_id", flat=True))
    ids |= set(
        rights.scope(Turn.objects.filter(guild_id__isnull=False))
        .values_list("channel_id", flat=True)
        .distinct()[:200]
    )
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


def turns_filtered(*, filters: TurnFilters, rights: GuildRights) -> QuerySet[Turn]:
    """The person's turns, newest first, narrowed by every filter that is set (dates
    inclusive, UTC)."""
    turns = visible_turns(rights=rights)
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


@dataclass(frozen=True)
class ModerationCheckRow:
    """One moderation check as the turn page lists it: never its text (a withheld text is
    shown only on request, `withheld_texts`)."""

    number: int
    kind: str
    message: int | None
    verdict: str
    categories: tuple[str, ...]
    blocking: tuple[str, ...]
    top_scores: tuple[tuple[str, float], ...]
    latency_ms: float
    characters: int
    error: str


def moderation_checks(*, turn: Turn) -> list[ModerationCheckRow]:
    """The turn's moderation checks, in the order they were recorded, each with its three
    highest scores."""
    rows = []
    for number, check in enumerate((turn.moderation or {}).get("checks", []), start=1):
        scores = sorted(check.get("scores", {}).items(), key=lambda pair: pair[1], reverse=True)
        message = check.get("message")
        rows.append(
            ModerationCheckRow(
                number=number,
                kind=check.get("kind", ""),
                message=message + 1 if isinstance(message, int) else None,
                verdict=check.get("verdict", ""),
                categories=tuple(check.get("categories", ())),
                blocking=tuple(check.get("blocking", ())),
                top_scores=tuple(scores[:3]),
                latency_ms=check.get("latency_ms", 0.0),
                characters=len(check.get("text", "")),
                error=check.get("error", ""),
            )
        )
    return rows


@dataclass(frozen=True)
class WithheldTexts:
    """What moderation kept from Discord on a turn: each withheld check with its text, and the
    reply as the model wrote it (empty for a withheld trigger)."""

    pieces: tuple[tuple[ModerationCheckRow, str], ...]
    written: str


def withheld_texts(*, turn: Turn) -> WithheldTexts | None:
    """The texts moderation withheld on ``turn``; None when it withheld nothing."""
    record = turn.moderation or {}
    checks = record.get("checks", [])
    rows = moderation_checks(turn=turn)
    withheld = [
        (row, check["text"])
        for row, check in zip(rows, checks, strict=True)
        if check.get("verdict") == "withhold"
    ]
    written = (record.get("withheld") or {}).get("text", "")
    if not withheld and not written:
        return None
    return WithheldTexts(pieces=tuple(withheld), written=written)


def turn_timings(*, turn: Turn) -> list[dict[str, Any]]:
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


PARTICIPANT_READS = (
    ("hydration_ms", "people (privacy, blocks, notices)"),
    ("url_refresh_ms", "attachment URLs signed anew"),
    ("image_hash_ms", "image hashes"),
    ("recall_ms", "memory recall"),
)


def turn_participant_reads(*, turn: Turn) -> list[dict[str, Any]]:
    """The reads inside the turn's ``participants`` stage, each with its milliseconds (they
    run at once, so they may add up to more than the stage): where a slow stage's time went."""
    return [
        {"read": name.removesuffix("_ms"), "label": label, "ms": round(ms, 1)}
        for name, label in PARTICIPANT_READS
        if (ms := getattr(turn, name)) is not None
    ]


# -- why (not)? ---------------------------------------------------------------------------------


def recent_messages(*, rights: GuildRights, limit: int = 20) -> list[dict[str, Any]]:
    """The newest recorded messages the person may see (for the "why (not)?" picker), newest
    first. Once consumed, the queue keeps only a message's key: its author and words then come
    from the turn it triggered (the line the persona saw), when there is one."""
    rows = list(visible_messages(rights=rights, model=EventQueue).order_by("-message_id")[:limit])
    turns = {
        t.trigger_message_id: t
        for t in visible_turns(rights=rights).filter(
            trigger_message_id__in=[r.message_id for r in rows]
        )
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
                "text": text or (trigger_excerpt(turn=turn) if turn and not author else ""),
                "at": row.created_at,
            }
        )
    return result


def channel_people(
    *, rights: GuildRights, channel_id: int, guild_id: int | None, limit: int = 200
) -> list[Member]:
    """Whom the preview offers as the author of a hypothetical message: the people who wrote
    in the channel recently (hidden users and bots left out), then the guild's other members
    the gateway named (`guild_members`: users with full privacy left out); only of what the
    person may see."""
    rows = (
        visible_messages(rights=rights, model=EventQueue)
        .filter(channel_id=channel_id)
        .order_by("-message_id")[:limit]
    )
    seen: dict[int, str] = {}
    for row in rows:
        author = (row.event or {}).get("author", {})
        if author.get("is_bot") or not author.get("id"):
            continue
        seen.setdefault(int(author["id"]), author.get("display_name", ""))
    standing = chat_selectors.user_standing(user_ids=seen, guild_id=_guild_of(rows))
    hidden = standing.full_privacy | standing.blacklisted
    writers = [Member(uid, name) for uid, name in seen.items() if uid not in hidden]
    if guild_id is None or not rights.may_view(guild_id):
        return writers
    return writers + [m for m in guild_members(guild_id=guild_id) if m.user_id not in seen]


def _guild_of(rows: Iterable[EventQueue | UnreadEvent]) -> int | None:
    """The guild of one channel's ``rows`` (None: a DM, or nothing recorded, where the
    strictest privacy a user holds anywhere applies)."""
    return next((row.guild_id for row in rows if row.guild_id is not None), None)


def guild_filter_choices(*, rights: GuildRights) -> Iterable[tuple[int, str]]:
    """(guild id, name) of every configured guild the person may see, for the turn filters."""
    return rights.scope(GuildConfig.objects.order_by("name")).values_list("guild_id", "name")


def turn_channel_ids(*, rights: GuildRights, limit: int = 200) -> list[int]:
    """The channels that have turns the person may see (at most ``limit``), for the turn
    filters."""
    ids = (
        visible_turns(rights=rights)
        .order_by()
        .values_list("channel_id", flat=True)
        .distinct()[:limit]
    )
    return sorted(ids)


def persona_name_choices(*, rights: GuildRights) -> list[str]:
    """The names of the personas of the guilds the person may see, for the turn filters."""
    personas = rights.scope(Persona.objects.all(), "guild__guild_id")
    return sorted(set(personas.values_list("name", flat=True)))


def turn_personas(*, rights: GuildRights, turn: Turn) -> QuerySet[Persona]:
    """The personas a turn may be replayed as: those of its guild (of its persona's guild,
    for a direct message), by name."""
    guild_id = turn_guild(turn=turn)
    personas = rights.scope(Persona.objects.all(), "guild__guild_id")
    return personas.filter(guild__guild_id=guild_id).order_by("name")


def turn_guild(*, turn: Turn) -> int | None:
    """The guild a turn belongs to: its own, or for a direct message its persona's."""
    if turn.guild_id is not None:
        return turn.guild_id
    persona = turn.persona
    return persona.guild.guild_id if persona is not None else None


def bot_user_id() -> int | None:
    """The bot account's id, as recorded by the main persona's deliveries."""
    row = MessageIndex.objects.filter(webhook_id__isnull=True, author_id__isnull=False).first()
    return row.author_id if row else None


# -- a guild's configuration, memories and documents ---------------------------------------------
# Each starts from a guild `dashboard.access.guild_access` gave the person.


def guild_configured(*, guild_id: int) -> bool:
    """A guild of this id is configured (for adding one: operators only)."""
    return GuildConfig.objects.filter(guild_id=guild_id).exists()


def persona_with_guild(*, persona_id: int | None) -> Persona | None:
    """The persona of that id with its guild; None when there is none (or no id)."""
    if persona_id is None:
        return None
    return Persona.objects.select_related("guild").filter(pk=persona_id).first()


def persona_avatars(*, names: Iterable[str]) -> dict[str, str]:
    """The avatar address of each persona of ``names`` that has one, by name."""
    rows = Persona.objects.filter(name__in=list(names)).exclude(avatar_url="")
    return dict(rows.values_list("name", "avatar_url"))


def model_prices() -> QuerySet[ModelPrice]:
    """The price table, by model (the operators' usage page)."""
    return ModelPrice.objects.order_by("model")


def guild_personas_listed(*, guild: GuildConfig) -> QuerySet[Persona]:
    """The guild's personas, main first, then by name."""
    return guild.personas.order_by("-is_main", "name")


def guild_personas_by_name(*, guild: GuildConfig) -> list[Persona]:
    return list(guild.personas.order_by("name"))


def guild_rows(*, guild: GuildConfig, model: type[Any]) -> QuerySet[Any]:
    """The guild's configured rows of ``model`` (channels, blocks, user privacy)."""
    return model.objects.filter(guild=guild)


def speaking_personas(*, guild: GuildConfig) -> list[Persona]:
    """The guild's enabled personas, main first, then by name."""
    return list(guild.personas.filter(enabled=True).order_by("-is_main", "name"))


def guild_channels(*, guild: GuildConfig) -> QuerySet[ChannelConfig]:
    return guild.channels.order_by("channel_id")


def guild_memories(*, guild: GuildConfig) -> QuerySet[Memory]:
    return Memory.objects.filter(guild_id=guild.guild_id)


def guild_documents(*, guild: GuildConfig) -> QuerySet[Document]:
    return Document.objects.filter(guild_id=guild.guild_id)


def guild_extractions(*, guild: GuildConfig, limit: int) -> list[Turn]:
    """The guild's newest memory extractions (turns of reason ``extraction``)."""
    turns = Turn.objects.filter(guild_id=guild.guild_id, reason=TurnReason.EXTRACTION)
    return list(turns.order_by("-created_at")[:limit])


def person_members(*, guild: GuildConfig, user_id: int) -> list[str]:
    """The proxied members of ``user_id`` the guild's memories name."""
    memories = guild_memories(guild=guild).filter(user_id=user_id)
    return list(memories.values_list("member_id", flat=True))


EXCERPT_LENGTH = 80
EXCERPTS_KEPT = 20_000
FINISHED = frozenset({Turn.Status.REPLIED, Turn.Status.FAILED, Turn.Status.ABORTED})
_excerpts: OrderedDict[tuple[int, dt.datetime], str] = OrderedDict()
_excerpts_lock = threading.Lock()
"""Finished turns' trigger excerpts, by turn id and creation time (least recently used
dropped first): a finished turn's prompt record never changes, and reading it is most of what
a list of turns costs."""


def with_excerpts(*, turns: list[Turn]) -> list[Turn]:
    """Give each of ``turns`` its ``excerpt`` (`trigger_excerpt`): a finished turn's from the
    process's cache, the others' read in one query for them all; none for a trigger whose
    author has full privacy now (their words are scrubbed from the records, and a kept
    excerpt must not outlive that). Returns ``turns``."""
    with _excerpts_lock:
        return _with_excerpts(turns)


def _with_excerpts(turns: list[Turn]) -> list[Turn]:
    missing = [t for t in turns if _excerpt_key(t) not in _excerpts or t.status not in FINISHED]
    if missing:
        records = Turn.objects.filter(pk__in=[t.pk for t in missing]).values_list(
            "pk", "prompt_record", "window"
        )
        read = {pk: (record, window) for pk, record, window in records}
        for turn in missing:
            record, window = read.get(turn.pk, ({}, {}))
            shape = Turn(trigger_message_id=turn.trigger_message_id, window=window)
            shape.prompt_record = record or {}
            turn.excerpt = trigger_excerpt(turn=shape)  # type: ignore[attr-defined]
            if turn.status in FINISHED:
                _excerpts[_excerpt_key(turn)] = turn.excerpt  # type: ignore[attr-defined]
                if len(_excerpts) > EXCERPTS_KEPT:
                    _excerpts.popitem(last=False)
    authors = {t.trigger_author_id for t in turns if t.trigger_author_id}
    hidden = chat_selectors.user_standing(user_ids=authors, guild_id=None).full_privacy
    for turn in turns:
        key = _excerpt_key(turn)
        if turn.trigger_author_id in hidden:  # chose full privacy since: never shown
            _excerpts.pop(key, None)
            turn.excerpt = ""  # type: ignore[attr-defined]
        elif key in _excerpts and turn.status in FINISHED:
            _excerpts.move_to_end(key)
            turn.excerpt = _excerpts[key]  # type: ignore[attr-defined]
    return turns


def _excerpt_key(turn: Turn) -> tuple[int, dt.datetime]:
    return turn.pk, turn.created_at


def trigger_excerpt(*, turn: Turn, length: int = EXCERPT_LENGTH) -> str:
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
