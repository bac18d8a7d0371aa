"""The tools a turn offers the model, each backed by what it needs: attachments read through
the Discord port, message metadata in the prompt's keys, the short-term memory of the turn's
scope, the vision model, the transcript service, and the guild's stickers.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Mapping

from asgiref.sync import sync_to_async

from chat import selectors
from chat.llm.embeddings import EmbeddingModel
from chat.llm.metering import UNMETERED, CallMeter
from chat.llm.tools import MessageMetadata, ToolAttachment, ToolBox, ToolError
from chat.models import Memory
from chat.pipeline.context import TurnContext, TurnInput
from chat.pipeline.markup import scrub_snowflakes
from chat.pipeline.recall import fact_names, names_someone_else
from chat.pipeline.tools import ToolName
from chat.pipeline.types import HistoryMessage
from chat.ports import DeliveryError, DiscordPort
from chat.selectors import ChannelSettings
from chat.services.memory_store import MemoryRefused, MemoryScope, memory_add, user_is_private
from chat.services.short_term_memory import short_term_memory_write
from chat.services.turn_delivery import persona_speaker
from chat.services.turn_lifecycle import turn_extra_delivered
from chat.services.turn_request import TurnRequest, TurnRuntime
from personas.models import Persona


def turn_toolbox(
    *,
    runtime: TurnRuntime,
    context: TurnContext,
    turn_input: TurnInput,
    request: TurnRequest,
    turn_id: int | None,
    meter: CallMeter = UNMETERED,
) -> ToolBox:
    """The turn's tools: the pipeline's allowlist, each backed by what it needs; ``meter``
    counts the calls a tool makes itself (the vision model's)."""
    messages = (*turn_input.history, *turn_input.reply_targets.values())
    files = {
        attachment.id: attachment
        for message in messages
        for attachment in (
            *message.attachments,
            *(a for snapshot in message.snapshots for a in snapshot.attachments),
        )
    }
    media = {
        key: ToolAttachment(
            media_id=key,
            filename=scrub_snowflakes(files[snowflake].filename),
            url=files[snowflake].url,
            content_type=files[snowflake].content_type or "",
            size=files[snowflake].size,
        )
        for key, snowflake in context.message_ids.items()
        if key.startswith("media_") and snowflake in files
    }
    by_id = {m.id: m for m in messages}
    return ToolBox(
        allowlist=context.tools,
        attachments=media,
        attachment_reader=_AttachmentReader(runtime.port),
        message_metadata=MetadataLookup(context.message_ids, by_id),
        short_term_memory=_MemoryWriter(
            request.persona,
            request.channel,
            turn_id,
            user_id=request.memory_user_id,
            clock=runtime.clock,
        ),
        long_term_memory=_LongTermMemoryWriter(
            request.channel.guild.guild_id,
            turn_id,
            context.message_ids,
            by_id,
            persona_id=request.persona.id,
            embedder=runtime.embeddings,
        )
        if request.channel.guild is not None
        else None,
        vision=runtime.vision,
        videos=runtime.videos,
        stickers=_StickerSender(runtime, request, turn_id)
        if ToolName.SEND_STICKER in context.tools and request.configuration.guild_id is not None
        else None,
        meter=meter,
    )


class _StickerSender:
    """``send_sticker``: the guild's stickers, sent by the bot account as the persona's own
    message (indexed as its line, like a reply), into the channel's kept window."""

    def __init__(self, runtime: TurnRuntime, request: TurnRequest, turn_id: int | None) -> None:
        self._runtime, self._request, self._turn_id = runtime, request, turn_id
        guild_id = request.configuration.guild_id
        assert guild_id is not None
        self._stickers = {name: i for i, name in runtime.port.guild_stickers(guild_id)}

    def names(self) -> list[str]:
        return list(self._stickers)

    async def send(self, name: str) -> None:
        channel_id = self._request.channel.channel_id
        try:
            delivered = await self._runtime.port.send_sticker(
                channel_id=channel_id,
                speaker=persona_speaker(persona=self._request.persona),
                sticker_id=self._stickers[name],
            )
        except DeliveryError as error:
            raise ToolError(f"the sticker could not be sent: {error}") from None
        self._runtime.windows.record_delivery(channel_id, delivered.message, delivered.message_id)
        if self._turn_id is not None:
            await sync_to_async(turn_extra_delivered)(turn_id=self._turn_id, delivered=[delivered])


class _AttachmentReader:
    def __init__(self, port: DiscordPort) -> None:
        self._port = port

    async def read(self, attachment: ToolAttachment, *, max_bytes: int) -> bytes:
        try:
            return await self._port.read_attachment(attachment.url, max_bytes=max_bytes)
        except DeliveryError as error:
            # The port's message names no URL; scrubbed all the same, as it reaches the model.
            reason = scrub_snowflakes(str(error))
            raise ToolError(f"could not read {attachment.filename}: {reason}") from None


class MetadataLookup:
    """``reveal_message_metadata``'s answers, in the prompt's keys (``ref_N``, ``media_N``):
    the model never sees a raw snowflake. A read of the turn's own messages, with no effect (a
    persona test answers it the same way)."""

    def __init__(self, keys: Mapping[str, int], messages: Mapping[int, HistoryMessage]) -> None:
        self._keys, self._messages = keys, messages
        self._refs = {snowflake: key for key, snowflake in keys.items()}

    async def metadata(self, ref: str) -> MessageMetadata | None:
        message = self._messages.get(self._keys.get(ref, -1))
        if message is None:
            return None
        reference = message.reference
        reply_to = self._refs.get(reference.message_id) if reference is not None else None
        media = tuple(self._refs[a.id] for a in message.attachments if a.id in self._refs)
        return MessageMetadata(
            author_name=scrub_snowflakes(message.shown_name),
            sent_at=message.created_at,
            reply_to_ref=reply_to if reply_to and reply_to.startswith("ref_") else None,
            media_ids=media,
        )


class _MemoryWriter:
    """Writes the short-term memory of the turn's scope (``user_id`` in a DM) for the turn
    ``turn_id`` (a dry run has none: it never calls the model, so never a tool)."""

    def __init__(
        self,
        persona: Persona,
        channel: ChannelSettings,
        turn_id: int | None,
        *,
        user_id: int | None,
        clock: Callable[[], dt.datetime],
    ) -> None:
        self._persona, self._channel, self._turn_id = persona, channel, turn_id
        self._user_id, self._clock = user_id, clock

    async def write(self, *, summary: str, categories: Mapping[str, str]) -> None:
        if self._turn_id is None:
            raise ToolError("a dry run writes no memory")
        if self._user_id is not None:
            standing = await sync_to_async(selectors.user_standing)(
                user_ids=[self._user_id],
                guild_id=self._channel.guild.guild_id if self._channel.guild else None,
            )
            if not standing.remembers(self._user_id):
                raise ToolError("this user's privacy allows no memory about them")
        await sync_to_async(short_term_memory_write)(
            persona=self._persona,
            channel_id=self._channel.channel_id,
            guild_id=self._channel.guild.guild_id if self._channel.guild else None,
            user_id=self._user_id,
            summary=summary,
            categories=categories,
            turn_id=self._turn_id,
            now=self._clock(),
        )


class _LongTermMemoryWriter:
    """``remember``: keeps a fact in the guild's long-term memory for the turn ``turn_id``
    (a dry run has none). A personal fact is about the author of the cited message, who must
    be in this turn's conversation and a person (a proxied member counts as themself); a
    persona's own note (scope ``persona``, recalled only by ``persona_id``) may not name a
    person of the conversation who chose not to be remembered; the store refuses private
    users, full scopes and over-long facts."""

    def __init__(
        self,
        guild_id: int,
        turn_id: int | None,
        keys: Mapping[str, int],
        messages: Mapping[int, HistoryMessage],
        *,
        persona_id: int,
        embedder: EmbeddingModel | None,
    ) -> None:
        self._guild_id, self._turn_id, self._persona_id = guild_id, turn_id, persona_id
        self._keys, self._messages, self._embedder = keys, messages, embedder

    async def remember(self, *, scope: str, fact: str, ref: str) -> str:
        if self._turn_id is None:
            raise ToolError("a dry run remembers nothing")
        message = self._messages.get(self._keys.get(ref, -1))
        if message is None:
            raise ToolError(f"{ref} is not a message in this conversation")
        if scope == "user":
            if message.author.persona_name is not None or (
                message.author.is_bot and message.proxy is None
            ):
                raise ToolError(f"{ref} was not written by a person: save facts people told you")
            other = names_someone_else(
                fact,
                author=message.shown_name,
                others={m.shown_name for m in self._messages.values()},
            )
            if other is not None:
                raise ToolError(
                    f"the fact names {other}, but {ref} is {message.shown_name}'s: save only "
                    "what people say about themselves, citing their own message"
                )
            memory_scope = MemoryScope.personal(
                self._guild_id,
                message.accountable_user_id,
                member_id=message.proxy.member_id if message.proxy is not None else "",
                name=message.shown_name,
            )
        elif scope == "persona":
            await self._refuse_naming_the_private(fact)
            memory_scope = MemoryScope.persona(self._guild_id, self._persona_id)
        else:
            memory_scope = MemoryScope.guild(self._guild_id)
        try:
            written = await sync_to_async(memory_add)(
                scope=memory_scope,
                text=fact,
                source=Memory.Source.TOOL,
                turn_id=self._turn_id,
                message_id=message.id,
                embedder=self._embedder,
            )
        except MemoryRefused as refusal:
            raise ToolError(str(refusal)) from None
        return written.outcome

    async def _refuse_naming_the_private(self, fact: str) -> None:
        """Raise `ToolError` when ``fact`` names a person of the conversation with partial or
        full privacy (nothing is kept about them, not even in a persona's own notes)."""
        people = {
            m.shown_name: m.accountable_user_id
            for m in self._messages.values()
            if m.author.persona_name is None and not (m.author.is_bot and m.proxy is None)
        }
        for name, user_id in people.items():
            if fact_names(fact, name) and await sync_to_async(user_is_private)(
                user_id=user_id, guild_id=self._guild_id
            ):
                raise ToolError(f"nothing is remembered about {name}: they chose not to be")
