"""Small builders for pipeline messages in loop tests."""

from __future__ import annotations

import datetime as dt
from itertools import count

from chat.pipeline.types import Author, HistoryMessage, MessageReference, ProxyIdentity

_ids = count(1_300_000_000_000_000_000)
T0 = dt.datetime(2026, 7, 11, 12, 0, tzinfo=dt.UTC)


def message(
    content: str = "hello",
    *,
    id: int | None = None,
    channel_id: int = 500,
    author_id: int = 42,
    author_name: str = "alice",
    is_bot: bool = False,
    webhook_id: int | None = None,
    mention_ids: tuple[int, ...] = (),
    reply_to: int | None = None,
    proxy: ProxyIdentity | None = None,
) -> HistoryMessage:
    message_id = next(_ids) if id is None else id
    return HistoryMessage(
        id=message_id,
        channel_id=channel_id,
        author=Author(id=author_id, display_name=author_name, is_bot=is_bot, webhook_id=webhook_id),
        content=content,
        created_at=T0 + dt.timedelta(seconds=message_id % 10_000),
        mention_ids=mention_ids,
        reference=MessageReference(reply_to, channel_id) if reply_to else None,
        proxy=proxy,
    )
