"""The bot's discord.py client: converts gateway events and hands them to the loop.

Handlers stay thin (discord.py ``advanced_startup``): convert, await a service, return. The
client gets its collaborators through its constructor, starts the scheduler in ``setup_hook``
and stops it in ``close``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp
import discord
from asgiref.sync import sync_to_async
from django.db import DatabaseError
from django.utils import timezone

from chat import metrics
from chat.gateway.adapter import RECENT_DELIVERIES, DiscordAdapter
from chat.gateway.limits import SharedLimits, session_starts_check
from chat.gateway.names import channel_names, guild_name, guild_names, member_names
from chat.gateway.proxies import ProxyResolver
from chat.gateway.rights import member_permissions, rights_observe, rights_observe_people
from chat.loop.intake import Intake
from chat.loop.scheduler import Scheduler
from chat.services.discord_names import NameRecord, names_record
from chat.services.event_queue import Consumed, OwnIdentity
from chat.services.turn_record import window_anchors_reanchor_due
from chat.shards import ShardSet
from chat.windows import MAX_CHANNELS, WindowRegistry

logger = logging.getLogger(__name__)

GATEWAY_CACHE_MESSAGES = 5000
SHUTDOWN_GRACE_SECONDS = 10


def bot_intents() -> discord.Intents:
    """Guilds, guild and DM messages, message content, members, reactions and stickers."""
    intents = discord.Intents.none()
    intents.guilds = True
    intents.guild_messages = True
    intents.dm_messages = True
    intents.message_content = True
    intents.members = True
    intents.guild_reactions = True
    intents.emojis_and_stickers = True  # the guild's stickers, for `send_sticker`
    intents.dm_reactions = True
    return intents


def _rest_trace(limits: SharedLimits | None) -> aiohttp.TraceConfig:
    """An HTTP trace on discord.py's session (REST and webhooks, not the gateway's websocket)
    that counts every request by method and status class, and each 429 by its scope
    (`chat.metrics`). With ``limits`` it also starts each request only when the bot's global
    REST limit has room (counted with its other processes). That runs right before each
    attempt goes out: after discord.py's own per-route waits, and again for each retry, so
    neither can bunch requests counted earlier into one second."""

    async def paced(
        session: aiohttp.ClientSession,
        context: Any,
        params: aiohttp.TraceRequestStartParams,
    ) -> None:
        if limits is not None and not _is_gateway(params.headers):
            await limits.rest.acquire()

    async def answered(
        session: aiohttp.ClientSession,
        context: Any,
        params: aiohttp.TraceRequestEndParams,
    ) -> None:
        if not _is_gateway(params.headers):
            response = params.response
            metrics.discord_answered(
                method=params.method,
                status=response.status,
                scope=response.headers.get("X-RateLimit-Scope"),
            )

    async def unanswered(
        session: aiohttp.ClientSession,
        context: Any,
        params: aiohttp.TraceRequestExceptionParams,
    ) -> None:
        if not _is_gateway(params.headers):
            metrics.discord_answered(method=params.method, status=None)

    trace = aiohttp.TraceConfig()
    trace.on_request_start.append(paced)
    trace.on_request_end.append(answered)
    trace.on_request_exception.append(unanswered)
    return trace


def _is_gateway(headers: Any) -> bool:
    """Whether a request is the gateway's websocket upgrade (not a REST request)."""
    return headers.get("Upgrade", "").lower() == "websocket"


class PersonaBotClient(discord.AutoShardedClient):
    """The gateway connection of one worker (one or more shards)."""

    def __init__(
        self,
        *,
        shard_ids: list[int] | None = None,
        shard_count: int | None = None,
        on_start: Callable[[PersonaBotClient], Awaitable[None]] | None = None,
        proxies: ProxyResolver | None = None,
        window_channels: int = MAX_CHANNELS,
        recent_messages: int = RECENT_DELIVERIES,
        limits: SharedLimits | None = None,
    ) -> None:
        """``window_channels`` bounds the history windows kept (`WindowRegistry`),
        ``recent_messages`` the newest messages whose speaker is remembered (`BoundedCache`);
        ``limits`` paces IDENTIFYs and REST requests with the bot's other processes (None:
        discord.py paces this process alone)."""
        super().__init__(
            intents=bot_intents(),
            shard_ids=shard_ids,
            shard_count=shard_count,
            max_messages=GATEWAY_CACHE_MESSAGES,
            allowed_mentions=discord.AllowedMentions(everyone=False, roles=False),
            http_trace=_rest_trace(limits),
        )
        _guard_parsers(self._connection.parsers)
        self.adapter = DiscordAdapter(self, proxies=proxies, recent_messages=recent_messages)
        self.windows = WindowRegistry(
            fetch_history=self.adapter.fetch_history,
            cache_view=self.adapter.cache_view,
            max_channels=window_channels,
            dm_reactions_subscribed=self.intents.dm_reactions,
            shard_of=self._shard_of_channel,
        )
        self.scheduler: Scheduler | None = None
        self.shard_set = ShardSet.of(shard_ids, shard_count)
        self.intake = Intake(
            stored=self._took_in,
            read_after=self.adapter.fetch_history_after,
            own=self.own_identity,
            shards=self.shard_set,
        )
        self._on_start = on_start
        self.limits = limits
        self._background: set[asyncio.Task[None]] = set()
        self._closing = False
        self._catch_up_starts: dict[int, dict[int, int]] = {}
        self._handlers: set[asyncio.Task[Any]] = set()
        self.shards_ready: set[int] = set()
        """Shards whose gateway session is up and whose guilds are loaded (READY and its
        guilds, or RESUMED), until their socket drops or a new session begins."""

    def _shard_of_channel(self, channel_id: int) -> int | None:
        """The shard whose session carries the channel's events: its guild's (Discord sends
        DMs through shard 0); None for a channel the gateway has not cached."""
        channel = self.get_channel(channel_id)
        if channel is None:
            return None
        guild = getattr(channel, "guild", None)
        return guild.shard_id if guild is not None else 0

    def own_identity(self) -> OwnIdentity:
        return OwnIdentity(
            bot_user_id=self.adapter.bot_user_id,
            webhook_ids=frozenset(self.adapter.webhook_ids),
            application_id=self.application_id,
        )

    async def setup_hook(self) -> None:
        """Before any IDENTIFY: read ``GET /gateway/bot``, refuse to start when its session
        start limit leaves fewer starts than this worker has shards to identify
        (`SessionStartLimitReached`), take ``max_concurrency`` from it unless given; then the
        worker's own start."""
        recommended, _url, started = await self.http.get_bot_gateway()
        shards = len(self.shard_ids) if self.shard_ids else (self.shard_count or recommended)
        logger.info(
            "session starts left: %s of %s; %s shard(s) to identify; IDENTIFY buckets: %s",
            started["remaining"],
            started["total"],
            shards,
            started["max_concurrency"],
        )
        session_starts_check(started, shards=shards, now=dt.datetime.now(dt.UTC))
        if self.limits is not None and self.limits.identify.max_concurrency is None:
            self.limits.identify.max_concurrency = started["max_concurrency"]
        if self._on_start is not None:
            await self._on_start(self)

    async def before_identify_hook(self, shard_id: int | None, *, initial: bool = False) -> None:
        """Wait for the shard's IDENTIFY bucket, shared with the bot's other processes."""
        if self.limits is None:
            await super().before_identify_hook(shard_id, initial=initial)
            return
        await self.limits.identify.wait_turn(shard_id or 0, initial=initial)

    def _schedule_event(
        self,
        coro: Callable[..., Coroutine[Any, Any, Any]],
        event_name: str,
        *args: Any,
        **kwargs: Any,
    ) -> asyncio.Task:
        # discord.py (pinned in requirements.txt) creates one task per handled event here;
        # keeping them lets `handlers_settled` wait for every event received so far.
        task = super()._schedule_event(coro, event_name, *args, **kwargs)
        self._handlers.add(task)
        task.add_done_callback(self._handlers.discard)
        return task

    async def handlers_settled(self) -> None:
        """Wait until every gateway event handler started so far has finished (a barrier for
        tests and shutdown: after it, every message received is in the event queue)."""
        while pending := [t for t in self._handlers if t is not asyncio.current_task()]:
            await asyncio.wait(pending)

    def shards_expected(self) -> list[int]:
        """The shards this client runs (empty until it knows their count)."""
        if self.shard_ids is not None:
            return list(self.shard_ids)
        return list(range(self.shard_count or 0))

    def unready_reason(self) -> str | None:
        """Why this client does not serve every one of its shards now, or None when it does
        (started, every shard's session up): what ``/readyz`` answers."""
        if self._closing:
            return "the gateway client is closing"
        if self.scheduler is None:
            return "the worker is starting"
        expected = self.shards_expected()
        missing = [shard for shard in expected if shard not in self.shards_ready]
        if not expected or missing:
            return f"shard(s) {', '.join(map(str, missing or ['?']))} not connected"
        return None

    @property
    def closing(self) -> bool:
        """Whether `close` has begun (the client starts no more loops)."""
        return self._closing

    def background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` until the client closes (not at all once it is closing)."""
        if self._closing:
            work.close()
            return
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def close(self) -> None:
        """Stop the loops (turns in flight end ``aborted``), then the gateway. Bounded, so a
        SIGTERM always ends the worker even if a task ignores its cancellation."""
        self._closing = True
        try:
            async with asyncio.timeout(SHUTDOWN_GRACE_SECONDS):
                for task in list(self._background):
                    task.cancel()
                await asyncio.gather(*self._background, return_exceptions=True)
                if self.scheduler is not None:
                    await self.scheduler.stop()
        except TimeoutError:
            logger.error("the scheduler did not stop within %s s", SHUTDOWN_GRACE_SECONDS)
        await super().close()
        if self.scheduler is not None:
            await self.scheduler.stop()  # one that was set up while the loops were stopping
        if self.limits is not None:
            await self.limits.close()

    # -- messages ----------------------------------------------------------------------------

    async def on_message(self, message: discord.Message) -> None:
        guild_id = message.guild.id if message.guild else None
        try:
            converted = await self.adapter.convert_live(message)
        except Exception:
            logger.exception("could not read message %s in %s", message.id, message.channel.id)
            return
        self.intake.put(
            converted, guild_id, shard_id=message.guild.shard_id if message.guild else 0
        )

    def _took_in(self, moved: Consumed) -> None:
        """A batch is stored: the channels whose pools it grew run a pass (pools grown before
        the scheduler started are found by its first look at every pool)."""
        if self.scheduler is not None:
            self.scheduler.pools_grew(moved)

    # -- names for the dashboard -------------------------------------------------------------

    async def on_guild_available(self, guild: discord.Guild) -> None:
        await self._record_names(guild_names(guild))
        await rights_observe_people(guild, fresh=False)

    async def on_guild_join(self, guild: discord.Guild) -> None:
        await self._record_names(guild_names(guild))
        await rights_observe_people(guild, fresh=False)

    async def on_guild_update(self, before: discord.Guild, after: discord.Guild) -> None:
        await self._record_names([guild_name(after)])
        if before.owner_id != after.owner_id:
            owners = {i for i in (before.owner_id, after.owner_id) if i is not None}
            await rights_observe_people(after, only=owners)

    async def on_guild_channel_create(self, channel: discord.abc.GuildChannel) -> None:
        await self._record_names(channel_names([channel]))

    async def on_guild_channel_update(
        self, before: discord.abc.GuildChannel, after: discord.abc.GuildChannel
    ) -> None:
        await self._record_names(channel_names([after]))

    async def on_thread_create(self, thread: discord.Thread) -> None:
        await self._record_names(channel_names([thread]))

    async def on_thread_update(self, before: discord.Thread, after: discord.Thread) -> None:
        await self._record_names(channel_names([after]))

    async def on_member_join(self, member: discord.Member) -> None:
        await self._record_names(member_names([member]))

    async def on_member_update(self, before: discord.Member, after: discord.Member) -> None:
        await self._record_names(member_names([after]))
        if before.guild_permissions != after.guild_permissions:
            await rights_observe(after.guild.id, {after.id: member_permissions(after)})

    # -- the dashboard's rights (chat.gateway.rights) ----------------------------------------

    async def on_raw_member_remove(self, payload: discord.RawMemberRemoveEvent) -> None:
        await rights_observe(payload.guild_id, {payload.user.id: None})

    async def on_guild_role_update(self, before: discord.Role, after: discord.Role) -> None:
        if before.permissions != after.permissions:
            await rights_observe_people(after.guild)

    async def on_guild_role_delete(self, role: discord.Role) -> None:
        await rights_observe_people(role.guild)

    async def _record_names(self, names: list[NameRecord]) -> None:
        """Store names for the dashboard; a failure is logged and never stops the gateway."""
        try:
            await sync_to_async(names_record)(names=names)
        except Exception:
            logger.warning("could not store %d Discord names", len(names), exc_info=True)

    # -- change signals for window reuse -----------------------------------------------------

    async def on_raw_message_edit(self, payload: discord.RawMessageUpdateEvent) -> None:
        self.windows.record_change(payload.channel_id, payload.message_id)

    async def on_raw_message_delete(self, payload: discord.RawMessageDeleteEvent) -> None:
        self.windows.record_delete(payload.channel_id, [payload.message_id], bulk=False)

    async def on_raw_bulk_message_delete(self, payload: discord.RawBulkMessageDeleteEvent) -> None:
        self.windows.record_delete(payload.channel_id, list(payload.message_ids), bulk=True)

    async def on_raw_reaction_add(self, payload: discord.RawReactionActionEvent) -> None:
        self.windows.record_change(payload.channel_id, payload.message_id)

    async def on_raw_reaction_remove(self, payload: discord.RawReactionActionEvent) -> None:
        self.windows.record_change(payload.channel_id, payload.message_id)

    async def on_raw_reaction_clear(self, payload: discord.RawReactionClearEvent) -> None:
        self.windows.record_change(payload.channel_id, payload.message_id)

    async def on_raw_reaction_clear_emoji(
        self, payload: discord.RawReactionClearEmojiEvent
    ) -> None:
        self.windows.record_change(payload.channel_id, payload.message_id)

    async def on_shard_disconnect(self, shard_id: int) -> None:
        self.shards_ready.discard(shard_id)
        logger.warning("shard %s disconnected; history windows dropped", shard_id)
        self.windows.shard_disconnected(shard_id)
        await self._windows_dropped()

    async def _windows_dropped(self) -> None:
        """Every window was just dropped: the stored anchors of this worker's channels are due
        a new anchor (`window_anchors_reanchor_due`), so inspection (the preview, replay)
        reads them as this worker's next turns will. A database failure is logged: the
        worker's own reads re-anchor anyway (`WindowRegistry.reanchor_pending`)."""
        try:
            await sync_to_async(window_anchors_reanchor_due)(
                shards=self.shard_set, before=timezone.now()
            )
        except DatabaseError:
            logger.warning("could not mark the stored window anchors due", exc_info=True)

    async def on_shard_connect(self, shard_id: int) -> None:
        """A new gateway session (READY; a resume is not one) forgets the messages cached in
        the old one, as discord.py's single-session client does on READY. The gateway missed
        their edits, deletes and reactions while no session was open, and window reuse prefers
        a cached copy to the one a REST read returned: kept, a stale copy would come back into
        the prompts once the windows are reused again."""
        self.shards_ready.discard(shard_id)  # ready once its guilds are loaded
        cached = self._connection._messages  # discord.py's message cache (``max_messages``)
        if cached is not None:
            cached.clear()
        # Catch-up starts where the queue stood when this session began, not after what
        # arrives live before the shard is ready; what arrives live is held until it is done.
        self.intake.hold(shard_id)
        self._catch_up_starts[shard_id] = self.intake.session_starts(
            c for c, g in self.intake.guilds.items() if self._on_shard(g, shard_id)
        )

    def _on_shard(self, guild_id: int | None, shard_id: int) -> bool:
        if guild_id is None:
            return shard_id == 0
        return (guild_id >> 22) % (self.shard_count or 1) == shard_id

    async def on_shard_resumed(self, shard_id: int) -> None:
        self.shards_ready.add(shard_id)
        self.windows.shard_connected(shard_id)
        await self._windows_dropped()
        if self.scheduler is not None:
            self.scheduler.wake()

    async def on_shard_ready(self, shard_id: int) -> None:
        """A new gateway session (at start, or after Discord refused a resume): whatever was
        said while no session was open is read back over REST, in the shard's channels the
        queue has never seen too (`Intake.adopt`)."""
        await self.on_shard_resumed(shard_id)
        starts = self._catch_up_starts.pop(shard_id, {})
        self.intake.adopt(
            {
                channel.id: guild.id
                for guild in self.guilds
                if guild.shard_id == shard_id
                for channel in guild.text_channels
            },
            starts,
            shard_id=shard_id,
        )
        self.background(self.intake.catch_up(starts, starts=starts, shard_id=shard_id))


def _guard_parsers(parsers: dict[str, Callable[[Any], None]]) -> None:
    """Make every gateway dispatch parser drop a payload it cannot parse, with a log line.

    discord.py lets a parser's exception escape the gateway's read loop, which terminates the
    connection and the client: one malformed dispatch would stop the worker. Wrapped, the bad
    payload is logged and the connection goes on.
    """
    for name, parser in list(parsers.items()):
        parsers[name] = _guarded(name, parser)


def _guarded(name: str, parser: Callable[[Any], None]) -> Callable[[Any], None]:
    def parse(data: Any) -> None:
        try:
            parser(data)
        except Exception:
            logger.exception("dropped a %s dispatch that could not be parsed", name)

    return parse
