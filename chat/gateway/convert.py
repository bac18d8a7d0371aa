"""discord.py objects → pipeline types, at the boundary.

Nothing past this module sees a `discord.Message`: the loop, the pipeline and the database work
with the frozen `HistoryMessage`. Who wrote a message as far as the product knows (the persona
behind a bot or webhook message, a proxied member) is the caller's knowledge, so the caller
passes it in (today the adapter's record of its own deliveries; proxies are not recognised yet).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import discord

from chat.gateway.cards import card_kind, minimal_notice_memory
from chat.pipeline.types import (
    Attachment,
    Author,
    CardKind,
    ComponentContainer,
    Embed,
    EmbedField,
    ForwardedSnapshot,
    HistoryMessage,
    MessageReference,
    ProxyIdentity,
    Reaction,
    ReferenceKind,
    Sticker,
)


def convert_message(
    message: discord.Message,
    *,
    bot_user_id: int | None = None,
    persona_name: str | None = None,
    proxy: ProxyIdentity | None = None,
) -> HistoryMessage:
    """The pipeline's view of ``message``.

    ``bot_user_id`` marks this bot's own embeds as system notices; ``persona_name`` is the
    persona that wrote the message (bot account or persona webhook), if any; ``proxy`` is the
    attested proxy identity, if the caller knows one.
    """
    own = bot_user_id is not None and message.author.id == bot_user_id
    return HistoryMessage(
        id=message.id,
        channel_id=message.channel.id,
        author=shared_author(
            message.author.id,
            message.author.display_name,
            message.author.bot,
            message.webhook_id,
            persona_name,
        ),
        content=message.content,
        created_at=message.created_at,
        attachments=_attachments(message.attachments),
        stickers=tuple(Sticker(id=s.id, name=s.name) for s in message.stickers),
        embeds=_embeds(message.embeds, own=own),
        containers=_containers(message.components, own=own),
        reference=_reference(message.reference, message.type),
        snapshots=tuple(
            ForwardedSnapshot(
                content=snapshot.content,
                attachments=_attachments(snapshot.attachments),
                embeds=_embeds(snapshot.embeds, own=False),
                stickers=tuple(Sticker(id=s.id, name=s.name) for s in snapshot.stickers),
            )
            for snapshot in getattr(message, "message_snapshots", ())
        ),
        mention_ids=tuple(message.raw_mentions),
        reactions=tuple(
            Reaction(emoji=str(r.emoji), count=r.count, me=r.me) for r in message.reactions
        ),
        proxy=proxy,
        # Our notices are sent silent (`DiscordPort.deliver`); a silent message of anyone
        # else's is an ordinary message.
        is_notice=persona_name is not None and message.flags.suppress_notifications,
    )


SHARED_AUTHORS = 4096
"""Distinct authors whose `Author` object conversion hands out again (least recently used
forgotten first)."""


@functools.lru_cache(maxsize=SHARED_AUTHORS)
def shared_author(
    user_id: int,
    display_name: str,
    is_bot: bool,
    webhook_id: int | None,
    persona_name: str | None,
) -> Author:
    """One `Author` object for every message with these values. A worker holds tens of
    thousands of messages from a few hundred people; `Author` is frozen, so sharing is safe."""
    return Author(
        id=user_id,
        display_name=display_name,
        is_bot=is_bot,
        webhook_id=webhook_id,
        persona_name=persona_name,
    )


def _attachments(attachments: Iterable[discord.Attachment]) -> tuple[Attachment, ...]:
    return tuple(
        Attachment(
            id=a.id,
            filename=a.filename,
            url=a.url,
            content_type=a.content_type,
            size=a.size,
        )
        for a in attachments
    )


def _embeds(embeds: Iterable[discord.Embed], *, own: bool) -> tuple[Embed, ...]:
    """The embeds, each with its kind (`cards.card_kind`): only this bot's own cards are
    notices, and Discord's automatic link previews on its replies (type link, article, image,
    video …) are previews like anyone's."""
    converted = []
    for embed in embeds:
        title = embed.title or ""
        footer = (embed.footer.text or "") if embed.footer else ""
        fields = tuple(EmbedField(name=f.name or "", value=f.value or "") for f in embed.fields)
        kind = card_kind(
            own=own,
            preview=embed.type not in (None, "rich"),  # an embed without a type is rich
            labels=(title, footer, *(f.name for f in fields)),
            body=(embed.description or "", *(f.value for f in fields)),
        )
        memory_id = None
        if kind is CardKind.SYSTEM_NOTICE:
            memory_id = minimal_notice_memory(
                title=title,
                description=embed.description or "",
                field_count=len(fields),
                footer=footer,
            )
            if memory_id is not None:
                kind = CardKind.MINIMAL_NOTICE
        converted.append(
            Embed(
                title=title,
                description=embed.description or "",
                footer=footer,
                fields=fields,
                kind=kind,
                memory_id=memory_id,
            )
        )
    return tuple(converted)


def _containers(components: Iterable[object], *, own: bool) -> tuple[ComponentContainer, ...]:
    containers = []
    for component in components:
        if isinstance(component, discord.components.Container):
            texts = tuple(_text_displays(component.children))
            if texts:
                kind = card_kind(own=own, preview=False, labels=texts[:1], body=texts[1:])
                containers.append(ComponentContainer(text_displays=texts, kind=kind))
    return tuple(containers)


def _text_displays(components: Iterable[object]) -> Iterable[str]:
    for component in components:
        if isinstance(component, discord.components.TextDisplay):
            yield component.content
        yield from _text_displays(getattr(component, "children", ()))


def _reference(
    reference: discord.MessageReference | None, message_type: discord.MessageType
) -> MessageReference | None:
    """What the message points at: a reply target, a forwarded message, or — for a thread's
    starter message (type 21) — the parent channel's message the thread was started from."""
    if reference is None or reference.message_id is None:
        return None
    forward = getattr(discord.MessageReferenceType, "forward", None)
    if message_type == discord.MessageType.thread_starter_message:
        kind = ReferenceKind.THREAD_STARTER
    elif forward is not None and reference.type == forward:
        kind = ReferenceKind.FORWARD
    else:
        kind = ReferenceKind.REPLY
    return MessageReference(
        message_id=reference.message_id, channel_id=reference.channel_id, kind=kind
    )
