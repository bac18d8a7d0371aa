"""`DiscordPort` over the real discord.py client: history, cache, names, delivery, webhooks.

Delivery: the main persona speaks through the bot account, replying natively to the trigger;
every other persona speaks through one managed webhook per channel with its own name and avatar.
The webhook is created once and cached; it is recreated when Discord says it is gone (10015),
and when the channel is full of webhooks (30007) this bot's own old ones are cleared first. A
webhook's id joins the bot's own identity before its first message is sent, so the gateway echo
is recognised as ours even if it arrives before the send returns.

When Discord refuses an act for want of a permission (50001 Missing Access, 50013 Missing
Permissions), the `DeliveryError` carries a `DiscordRefusal`: the permission by name (the first
of those the act needs that the gateway cache says the bot lacks there, else the act's own) and
the channel whose permissions count (a thread's parent).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

import discord
import httpx
from asgiref.sync import sync_to_async

from chat import selectors
from chat.caches import BoundedCache
from chat.gateway.convert import convert_message
from chat.gateway.delivery_text import sanitize_webhook_name, split_reply
from chat.gateway.proxies import ProxyRecord, ProxyResolver
from chat.llm.tls import tls_context
from chat.pipeline.permissions import Permission, permission_name
from chat.pipeline.types import HistoryMessage, NameDirectory, ProxyIdentity
from chat.pipeline.window_reuse import GatewayCacheView
from chat.ports import (
    MISSING_ACCESS,
    MISSING_PERMISSIONS,
    ChannelPlace,
    Delivered,
    DeliveryError,
    DiscordRefusal,
    Speaker,
)
from chat.selectors import Attribution
from chat.services.message_index import proxied_message_record

logger = logging.getLogger(__name__)

WEBHOOK_NAME = "Persona bot"
UNKNOWN_WEBHOOK = 10015
MAX_WEBHOOKS = 30007
NO_MENTIONS_BUT_USERS = discord.AllowedMentions(everyone=False, roles=False, users=True)
MESSAGE_CHANNELS = (
    discord.TextChannel,
    discord.VoiceChannel,
    discord.StageChannel,
    discord.Thread,
    discord.DMChannel,
)
MessageChannel = (
    discord.TextChannel
    | discord.VoiceChannel
    | discord.StageChannel
    | discord.Thread
    | discord.DMChannel
)
"""The channels a message can be sent in (and read back from) by id."""
READING = (Permission.READ_MESSAGE_HISTORY,)
WEBHOOKS = (Permission.MANAGE_WEBHOOKS,)
REACTING = (Permission.ADD_REACTIONS, Permission.READ_MESSAGE_HISTORY)
REFRESH_URLS_PER_REQUEST = 50
"""Attachment URLs Discord signs anew per `POST /attachments/refresh-urls`."""
RECENT_DELIVERIES = 5000
"""How many of its own deliveries (and proxied messages) the adapter remembers for attributing
gateway-cache copies (the size of the gateway's message cache: an older one is no longer
cached); converting a cached message reads no database."""
THREAD_STARTERS = 256
"""How many threads' starter messages the adapter keeps (read once per thread)."""


def message_nonce(seed: str, index: int) -> str:
    """A deterministic nonce for piece ``index`` of the reply ``seed`` names (Discord takes at
    most 25 characters)."""
    return hashlib.sha256(f"{seed}:{index}".encode()).hexdigest()[:25]


def _native_reply_run(
    messages: Sequence[discord.Message], bot_user_id: int, reply_to: int
) -> list[discord.Message]:
    """The bot's reply to ``reply_to`` and the reference-less bot messages right after it (the
    further pieces of a split reply), from ``messages`` sorted oldest first."""
    run: list[discord.Message] = []
    for message in messages:
        reference = message.reference.message_id if message.reference else None
        if not run:
            if message.author.id == bot_user_id and reference == reply_to:
                run.append(message)
        elif message.author.id == bot_user_id and reference is None:
            run.append(message)
        else:
            break
    return run


class DiscordAdapter:
    """The loop's view of Discord through ``client``.

    Who spoke a message the bot delivered: history read over REST is attributed from the
    message index (`selectors.message_attributions`: the persona recorded with each
    delivery), so it stays right after a restart and across processes; messages converted
    from the gateway cache use ``recent`` (this process's newest deliveries, bounded). Then,
    for messages neither knows, a message of one of the bot's webhooks is the persona its
    username names, and the bot account's other messages are ``main_persona_name``'s (per
    guild).
    """

    def __init__(
        self,
        client: discord.Client,
        *,
        proxies: ProxyResolver | None = None,
        recent_messages: int = RECENT_DELIVERIES,
    ) -> None:
        self._client = client
        self._webhooks: dict[int, discord.Webhook] = {}
        self.webhook_ids: set[int] = set()
        self.recent: BoundedCache[int, str] = BoundedCache(recent_messages)
        self.main_persona_name: dict[int | None, str] = {}
        self.proxies = proxies
        """The proxy system's API (``PLURALKIT_API_BASE``); None: proxies are not recognised."""
        self.recent_proxies: BoundedCache[int, ProxyIdentity] = BoundedCache(recent_messages)
        self._lookups: set[asyncio.Future[ProxyIdentity | None]] = set()
        self._starters: BoundedCache[int, HistoryMessage] = BoundedCache(THREAD_STARTERS)

    @property
    def client(self) -> discord.Client:
        """The discord.py client behind the port (REST lookups the port does not offer)."""
        return self._client

    @property
    def bot_user_id(self) -> int:
        assert self._client.user is not None, "the client has not logged in"
        return self._client.user.id

    # -- reading -----------------------------------------------------------------------------

    def convert(
        self,
        message: discord.Message,
        *,
        persona_name: str | None = None,
        proxy: ProxyIdentity | None = None,
    ) -> HistoryMessage:
        """``message`` for the pipeline; ``persona_name`` (or the proxied member, ``proxy``)
        is who spoke it when the caller knows (from the message index or the proxy system),
        else it is worked out as the class says."""
        return convert_message(
            message,
            bot_user_id=self.bot_user_id,
            persona_name=persona_name or self._persona_name(message),
            proxy=proxy or self.recent_proxies.get(message.id),
        )

    async def convert_live(self, message: discord.Message) -> HistoryMessage:
        """A message from the gateway; a proxy system's webhook message is looked up first, so
        it arrives as its member's, accountable to its sender."""
        proxy = await self._proxy_identity(message) if self._may_be_proxied(message) else None
        return self.convert(message, proxy=proxy)

    async def convert_read(self, messages: Sequence[discord.Message]) -> list[HistoryMessage]:
        """Messages read over REST, converted and attributed from the message index (and, for
        a proxy system's messages not indexed yet, the proxy system)."""
        known = await self._attributions([m.id for m in messages])
        converted = []
        for message in messages:
            found = known.get(message.id)
            proxy = found.proxy if found else None
            if proxy is None and found is None and self._may_be_proxied(message):
                proxy = await self._proxy_identity(message)
            persona_name = found.persona_name if found else None
            converted.append(self.convert(message, persona_name=persona_name, proxy=proxy))
        return converted

    async def _attributions(self, message_ids: Sequence[int]) -> dict[int, Attribution]:
        if not message_ids:
            return {}
        return await sync_to_async(selectors.message_attributions)(message_ids=message_ids)

    def _may_be_proxied(self, message: discord.Message) -> bool:
        return (
            self.proxies is not None
            and message.webhook_id is not None
            and message.webhook_id not in self.webhook_ids
        )

    async def _proxy_identity(self, message: discord.Message) -> ProxyIdentity | None:
        """The member a proxy system's webhook message speaks as (indexed once known)."""
        lookup = asyncio.ensure_future(self._proxy_lookup(message))
        self._lookups.add(lookup)
        try:
            return await asyncio.shield(lookup)
        finally:
            if lookup.done():
                self._lookups.discard(lookup)
            else:
                lookup.add_done_callback(self._lookups.discard)

    async def _proxy_lookup(self, message: discord.Message) -> ProxyIdentity | None:
        assert self.proxies is not None
        record = await self.proxies.lookup(message.id)
        if record is None or record.proxied_id != message.id:
            return None
        await self._index_proxied(record, message.channel.id, message.guild, message.webhook_id)
        return record.identity

    async def _index_proxied(
        self,
        record: ProxyRecord,
        channel_id: int,
        guild: discord.Guild | None,
        webhook_id: int | None,
    ) -> None:
        self.recent_proxies.put(record.proxied_id, record.identity)
        await sync_to_async(proxied_message_record)(
            message_id=record.proxied_id,
            channel_id=channel_id,
            guild_id=guild.id if guild is not None else None,
            webhook_id=webhook_id,
            member_id=record.identity.member_id,
            member_name=record.identity.member_name,
            sender_id=record.identity.host_user_id,
            original_id=record.original_id,
        )

    async def superseded_originals(self, messages: Sequence[HistoryMessage]) -> frozenset[int]:
        """Those of ``messages`` (people's messages) that a proxy system replaced. The proxy
        reposts within a moment, and its webhook message is looked up as it arrives (which
        indexes the original it replaced); so once the newest of them is ``grace_seconds``
        old and the lookups under way have finished, the message index knows. No request per
        message. Empty when no proxy system is configured."""
        if self.proxies is None:
            return frozenset()
        candidates = [m.id for m in messages if m.author.webhook_id is None]
        if not candidates:
            return frozenset()
        newest = max(m.created_at for m in messages if m.author.webhook_id is None)
        age = (discord.utils.utcnow() - newest).total_seconds()
        if age < self.proxies.grace_seconds:
            await asyncio.sleep(self.proxies.grace_seconds - age)
        if self._lookups:
            await asyncio.gather(*list(self._lookups), return_exceptions=True)
        return await sync_to_async(selectors.superseded_original_ids)(message_ids=candidates)

    def _persona_name(self, message: discord.Message) -> str | None:
        recorded = self.recent.get(message.id)
        if recorded is not None:
            return recorded
        if message.webhook_id is not None and message.webhook_id in self.webhook_ids:
            return message.author.name
        if message.author.id == self.bot_user_id:
            guild_id = message.guild.id if message.guild else None
            return self.main_persona_name.get(guild_id)
        return None

    async def fetch_history(self, channel_id: int, limit: int) -> list[HistoryMessage]:
        channel = await self._channel(channel_id)
        return await self.convert_read([m async for m in channel.history(limit=limit)])

    async def fetch_history_before(
        self, channel_id: int, before_id: int, limit: int
    ) -> list[HistoryMessage]:
        return await self.convert_read(await self._read(channel_id, limit, before=before_id))

    async def fetch_history_after(
        self, channel_id: int, after_id: int, limit: int
    ) -> list[HistoryMessage]:
        return await self.convert_read(await self._read(channel_id, limit, after=after_id))

    async def _read(
        self, channel_id: int, limit: int, *, before: int | None = None, after: int | None = None
    ) -> list[discord.Message]:
        """Up to ``limit`` messages before or after an id over REST, oldest first. Raises
        DeliveryError when the channel cannot be read."""
        try:
            channel = await self._channel(channel_id)
            messages = [
                m
                async for m in channel.history(
                    limit=limit,
                    before=discord.Object(id=before) if before else None,
                    after=discord.Object(id=after) if after else None,
                )
            ]
        except discord.HTTPException as error:
            raise self._refused(error, channel_id, READING, permanent=False) from None
        return sorted(messages, key=lambda m: m.id)

    def cache_view(self, channel_id: int) -> GatewayCacheView[HistoryMessage]:
        """The cached messages of the channel. discord.py appends a message to its cache on
        every MESSAGE_CREATE, so a dispatch Discord sends twice is cached twice: the newest
        instance of each id wins."""
        latest = {m.id: m for m in self._client.cached_messages if m.channel.id == channel_id}
        return GatewayCacheView(messages=tuple(self.convert(latest[i]) for i in sorted(latest)))

    async def fetch_message(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        try:
            channel = await self._channel(channel_id)
            message = await channel.fetch_message(message_id)
        except (discord.HTTPException, DeliveryError):
            return None
        [converted] = await self.convert_read([message])
        return converted

    async def thread_starter(self, channel_id: int) -> HistoryMessage | None:
        try:
            channel = await self._channel(channel_id)
        except DeliveryError:
            return None
        if not isinstance(channel, discord.Thread) or channel.parent_id is None:
            return None
        # A thread started from a message has that message's id, in the parent channel; a
        # forum post's starter is the thread's own first message, with the same id.
        known = self._starters.get(channel.id)
        if known is not None:
            return known
        starter = await self.fetch_message(channel.parent_id, channel.id)
        starter = starter or await self.fetch_message(channel.id, channel.id)
        if starter is not None:
            self._starters.put(channel.id, starter)
        return starter

    async def find_delivery(
        self, *, channel_id: int, speaker: Speaker, reply_to: int, limit: int = 50
    ) -> list[Delivered]:
        messages = await self._read(channel_id, limit, after=reply_to)
        own_webhooks = set()
        try:
            channel = await self._channel(channel_id)
            hooked = channel.parent if isinstance(channel, discord.Thread) else channel
            if not speaker.is_main and isinstance(hooked, discord.TextChannel):
                own_webhooks = {
                    w.id
                    for w in await hooked.webhooks()
                    if w.user and w.user.id == self.bot_user_id
                }
        except discord.HTTPException as error:
            raise self._refused(error, channel_id, WEBHOOKS, permanent=False) from None
        if speaker.is_main:
            found = _native_reply_run(messages, self.bot_user_id, reply_to)
        else:
            name = sanitize_webhook_name(speaker.name)
            found = [m for m in messages if m.webhook_id in own_webhooks and m.author.name == name]
        self.webhook_ids.update(own_webhooks)
        for message in found:
            self.recent.put(message.id, speaker.name)
        return [
            Delivered(m.id, self.convert(m), author_id=m.author.id, webhook_id=m.webhook_id)
            for m in found
        ]

    async def locate_channel(self, channel_id: int) -> ChannelPlace | None:
        try:
            channel = await self._channel(channel_id)
        except DeliveryError:
            return None
        if isinstance(channel, discord.DMChannel | discord.GroupChannel):
            return ChannelPlace(guild_id=None)
        guild = getattr(channel, "guild", None)
        if guild is None:
            return None
        is_nsfw = getattr(channel, "is_nsfw", None)  # a thread asks its parent
        return ChannelPlace(guild_id=guild.id, nsfw=bool(is_nsfw and is_nsfw()))

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        guild = self._client.get_guild(guild_id) if guild_id else None
        users: dict[int, str] = {}
        for user_id in set(user_ids):
            member = guild.get_member(user_id) if guild else None
            user = member or self._client.get_user(user_id)
            if user is not None:
                users[user_id] = user.display_name
        return NameDirectory(
            users=users,
            channels={c.id: c.name for c in guild.channels} if guild else {},
            roles={r.id: r.name for r in guild.roles} if guild else {},
        )

    async def refresh_attachment_urls(self, urls: Sequence[str]) -> dict[str, str]:
        route = discord.http.Route("POST", "/attachments/refresh-urls")
        refreshed: dict[str, str] = {}
        try:
            for start in range(0, len(urls), REFRESH_URLS_PER_REQUEST):
                batch = list(urls[start : start + REFRESH_URLS_PER_REQUEST])
                answer = await self._client.http.request(route, json={"attachment_urls": batch})
                for entry in answer.get("refreshed_urls", []):
                    refreshed[entry["original"]] = entry["refreshed"]
        except discord.HTTPException as error:
            raise DeliveryError(f"{error.status} {error.text}", permanent=False) from None
        return refreshed

    async def read_attachment(self, url: str, *, max_bytes: int) -> bytes:
        try:
            async with (
                httpx.AsyncClient(timeout=10, verify=tls_context()) as http,
                http.stream("GET", url) as response,
            ):
                response.raise_for_status()
                data = bytearray()
                async for chunk in response.aiter_bytes():
                    data += chunk
                    if len(data) >= max_bytes:
                        break
                return bytes(data[:max_bytes])
        except httpx.HTTPStatusError as error:
            # The message names what went wrong, never the URL: it holds the channel and
            # attachment ids, and a tool hands this text to the model.
            status = error.response.status_code
            gone = status in (403, 404)
            expired = " (its link has expired or the file was deleted)" if gone else ""
            raise DeliveryError(
                f"the file could not be downloaded: HTTP {status}{expired}", permanent=status < 500
            ) from None
        except httpx.HTTPError as error:
            raise DeliveryError(
                f"the file could not be downloaded: {type(error).__name__}", permanent=False
            ) from None

    # -- acting ------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def typing(self, channel_id: int) -> AsyncIterator[None]:
        try:
            channel = await self._channel(channel_id)
            typing = channel.typing()
            await typing.__aenter__()
        except (discord.HTTPException, DeliveryError):
            logger.info("typing indicator unavailable in %s", channel_id)
            yield
            return
        try:
            yield
        finally:
            await typing.__aexit__(None, None, None)

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
        pieces = split_reply(text)
        try:
            if speaker.is_main:
                return await self._deliver_as_bot(
                    channel_id, speaker, pieces, reply_to, nonce_seed, silent=as_notice
                )
            notices = [notice] if notice else []
            if as_notice:
                notices, pieces = notices + list(pieces), []
            return await self._deliver_by_webhook(channel_id, speaker, pieces, notices)
        except discord.HTTPException as error:
            if speaker.is_main:
                needed = self._sending(channel_id, reply=reply_to is not None)
            else:
                needed = WEBHOOKS
            raise self._refused(error, channel_id, needed) from None

    async def edit_message(
        self, *, channel_id: int, speaker: Speaker, message_id: int, text: str
    ) -> None:
        try:
            channel = await self._channel(channel_id)
            if speaker.is_main:
                await channel.get_partial_message(message_id).edit(
                    content=text, allowed_mentions=NO_MENTIONS_BUT_USERS
                )
                return
            thread = channel if isinstance(channel, discord.Thread) else None
            webhook = await self._webhook(thread.parent_id if thread is not None else channel_id)
            await webhook.edit_message(
                message_id,
                content=text,
                allowed_mentions=NO_MENTIONS_BUT_USERS,
                thread=thread or discord.utils.MISSING,
            )
        except discord.HTTPException as error:
            raise self._refused(error, channel_id, () if speaker.is_main else WEBHOOKS) from None

    def guild_stickers(self, guild_id: int) -> list[tuple[int, str]]:
        guild = self._client.get_guild(guild_id)
        if guild is None:
            return []
        return [(sticker.id, sticker.name) for sticker in guild.stickers if sticker.available]

    async def send_sticker(
        self, *, channel_id: int, speaker: Speaker, sticker_id: int
    ) -> Delivered:
        if not speaker.is_main:
            raise DeliveryError("webhooks cannot send stickers", permanent=True)
        try:
            channel = await self._channel(channel_id)
            # discord.py sends any snowflake as a sticker; its annotation names only its models.
            sticker = discord.Object(id=sticker_id)
            sent = await channel.send(stickers=[sticker])  # type: ignore[list-item]
        except discord.HTTPException as error:
            raise self._refused(error, channel_id, self._sending(channel_id)) from None
        self.recent.put(sent.id, speaker.name)
        return Delivered(sent.id, self.convert(sent), author_id=sent.author.id)

    async def _deliver_as_bot(
        self,
        channel_id: int,
        speaker: Speaker,
        pieces: Sequence[str],
        reply_to: int | None,
        nonce_seed: str | None,
        *,
        silent: bool,
    ) -> list[Delivered]:
        channel = await self._channel(channel_id)
        delivered = []
        for index, piece in enumerate(pieces):
            options: dict[str, Any] = {}
            if index == 0 and reply_to is not None:
                options["reference"] = discord.MessageReference(
                    message_id=reply_to, channel_id=channel_id, fail_if_not_exists=False
                )
            if nonce_seed:
                options["nonce"] = message_nonce(nonce_seed, index)
            sent = await channel.send(
                piece, allowed_mentions=NO_MENTIONS_BUT_USERS, silent=silent, **options
            )
            self.recent.put(sent.id, speaker.name)
            delivered.append(Delivered(sent.id, self.convert(sent), author_id=sent.author.id))
        return delivered

    async def _deliver_by_webhook(
        self,
        channel_id: int,
        speaker: Speaker,
        pieces: Sequence[str],
        notices: Sequence[str],
    ) -> list[Delivered]:
        # In a thread, the parent channel's webhook posts into the thread.
        channel = await self._channel(channel_id)
        thread = channel if isinstance(channel, discord.Thread) else None
        hooked_id = thread.parent_id if thread is not None else channel_id
        delivered = []
        sends = [(notice, True) for notice in notices] + [(piece, False) for piece in pieces]
        for piece, silent in sends:
            sent = await self._webhook_send(hooked_id, speaker, piece, thread=thread, silent=silent)
            self.recent.put(sent.id, speaker.name)
            delivered.append(
                Delivered(
                    sent.id,
                    self.convert(sent),
                    author_id=sent.author.id,
                    webhook_id=sent.webhook_id,
                )
            )
        return delivered

    async def _webhook_send(
        self,
        channel_id: int,
        speaker: Speaker,
        text: str,
        *,
        thread: discord.Thread | None,
        silent: bool = False,
    ) -> discord.WebhookMessage:
        for attempt in range(2):
            webhook = await self._webhook(channel_id)
            try:
                return await webhook.send(
                    text,
                    username=sanitize_webhook_name(speaker.name),
                    avatar_url=speaker.avatar_url or discord.utils.MISSING,
                    allowed_mentions=NO_MENTIONS_BUT_USERS,
                    thread=thread or discord.utils.MISSING,
                    silent=silent,
                    wait=True,
                )
            except discord.NotFound as error:
                if error.code != UNKNOWN_WEBHOOK or attempt:
                    raise
                logger.info("webhook of %s is gone; creating a new one", channel_id)
                self._webhooks.pop(channel_id, None)
        raise AssertionError("unreachable")

    async def _webhook(self, channel_id: int) -> discord.Webhook:
        """The channel's managed webhook: cached, else found among the channel's webhooks
        this bot created, else created (clearing this bot's old ones when the channel is full)."""
        if channel_id in self._webhooks:
            return self._webhooks[channel_id]
        channel = await self._any_channel(channel_id)
        # A forum's (or media channel's) posts are threads: its webhook posts into them.
        if not isinstance(channel, discord.TextChannel | discord.ForumChannel):
            raise DeliveryError(
                "personas other than the main one need a server text or forum channel",
                permanent=True,
            )
        own = [w for w in await channel.webhooks() if w.user and w.user.id == self.bot_user_id]
        webhook = next((w for w in own if w.token), None)
        if webhook is None:
            try:
                webhook = await channel.create_webhook(name=WEBHOOK_NAME)
            except discord.HTTPException as error:
                if error.code != MAX_WEBHOOKS:
                    raise
                for old in own:
                    await old.delete()
                webhook = await channel.create_webhook(name=WEBHOOK_NAME)
        self.webhook_ids.add(webhook.id)
        self._webhooks[channel_id] = webhook
        return webhook

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        try:
            channel = await self._channel(channel_id)
            await channel.get_partial_message(message_id).add_reaction(emoji)
        except discord.HTTPException as error:
            raise self._refused(error, channel_id, REACTING, permanent=True) from None

    async def _any_channel(
        self, channel_id: int
    ) -> discord.abc.GuildChannel | discord.Thread | discord.abc.PrivateChannel:
        """The channel, from the gateway cache or Discord; raises `DeliveryError` when Discord
        refuses it."""
        channel = self._client.get_channel(channel_id)
        if channel is None:
            try:
                channel = await self._client.fetch_channel(channel_id)
            except discord.HTTPException as error:
                refusal = self._refusal(error, channel_id, ())
                text = str(refusal) if refusal else f"channel {channel_id}: {error.text}"
                raise DeliveryError(text, permanent=True, refusal=refusal) from None
        return channel

    async def _channel(self, channel_id: int) -> MessageChannel:
        """The channel the bot sends in; raises `DeliveryError` when Discord refuses it or it
        holds no messages (a category, a forum itself: its posts are threads)."""
        channel = await self._any_channel(channel_id)
        if not isinstance(channel, MESSAGE_CHANNELS):
            raise DeliveryError(
                f"channel {channel_id} holds no messages (a {type(channel).__name__})",
                permanent=True,
            )
        return channel

    # -- refusals ----------------------------------------------------------------------------

    def _sending(self, channel_id: int, *, reply: bool = False) -> tuple[Permission, ...]:
        """What sending a message in the channel needs (a reply reads history too)."""
        in_thread = isinstance(self._client.get_channel(channel_id), discord.Thread)
        send = Permission.SEND_MESSAGES_IN_THREADS if in_thread else Permission.SEND_MESSAGES
        return (send, Permission.READ_MESSAGE_HISTORY) if reply else (send,)

    def _refused(
        self,
        error: discord.HTTPException,
        channel_id: int,
        needed: Sequence[Permission],
        *,
        permanent: bool | None = None,
    ) -> DeliveryError:
        """The `DeliveryError` for ``error``, an act in ``channel_id`` that needs ``needed``
        (besides View Channel): with a `DiscordRefusal` when Discord said 50001 or 50013.
        ``permanent`` by default: a 4xx other than 429."""
        refusal = self._refusal(error, channel_id, needed)
        if permanent is None:
            permanent = 400 <= error.status < 500 and error.status != 429
        text = str(refusal) if refusal is not None else f"{error.status} {error.text}"
        return DeliveryError(text, permanent=permanent, refusal=refusal)

    def _refusal(
        self, error: discord.HTTPException, channel_id: int, needed: Sequence[Permission]
    ) -> DiscordRefusal | None:
        if error.code not in (MISSING_ACCESS, MISSING_PERMISSIONS):
            return None
        channel = self._client.get_channel(channel_id)
        if isinstance(channel, discord.Thread) and channel.parent is not None:
            channel = channel.parent  # a thread has its parent's permissions
        lacking = Permission.VIEW_CHANNEL
        if error.code == MISSING_PERMISSIONS:
            held = 0
            guild = getattr(channel, "guild", None)
            if isinstance(channel, discord.abc.GuildChannel) and guild is not None and guild.me:
                held = channel.permissions_for(guild.me).value
            unheld = [p for p in needed if not held & p]
            lacking = unheld[0] if unheld else (needed[0] if needed else Permission.SEND_MESSAGES)
        return DiscordRefusal(
            code=error.code,
            permission=permission_name(lacking),
            channel_id=channel.id if channel is not None else channel_id,
            channel_name=getattr(channel, "name", "") or "",
        )


if TYPE_CHECKING:
    from chat.ports import DiscordPort

    def _adapter_is_a_port(adapter: DiscordAdapter) -> DiscordPort:
        return adapter  # the type checker holds the adapter to the protocol
