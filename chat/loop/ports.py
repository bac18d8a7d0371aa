"""What the loop needs from Discord, as a protocol.

`chat.gateway.adapter.DiscordAdapter` implements it over the real discord.py client; nothing in
the loop or the services imports discord.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Protocol

from chat.pipeline.types import HistoryMessage, NameDirectory
from chat.pipeline.window_reuse import GatewayCacheView


@dataclass(frozen=True)
class Speaker:
    """Who delivers a reply: the main persona speaks as the bot account, others by webhook."""

    persona_id: int
    name: str
    is_main: bool
    avatar_url: str = ""


@dataclass(frozen=True)
class Delivered:
    """One sent message; ``message`` is None when Discord returned no full object."""

    message_id: int
    message: HistoryMessage | None


class DeliveryError(Exception):
    """Discord refused or failed a delivery; ``permanent`` errors are not worth retrying."""

    def __init__(self, message: str, *, permanent: bool) -> None:
        super().__init__(message)
        self.permanent = permanent


class DiscordPort(Protocol):
    bot_user_id: int

    async def fetch_history(self, channel_id: int, limit: int) -> list[HistoryMessage]:
        """The channel's newest ``limit`` messages over REST, in any order."""
        ...

    def cache_view(self, channel_id: int) -> GatewayCacheView[HistoryMessage]:
        """What the gateway cache holds for the channel, oldest first."""
        ...

    async def fetch_message(self, channel_id: int, message_id: int) -> HistoryMessage | None:
        """One message over REST; None when it is gone or cannot be read."""
        ...

    def names(self, guild_id: int | None, user_ids: Sequence[int]) -> NameDirectory:
        """Display names for members, and channel and role names, from the gateway cache."""
        ...

    def typing(self, channel_id: int) -> AbstractAsyncContextManager[None]:
        """Show the typing indicator while the block runs."""
        ...

    async def deliver(
        self,
        *,
        channel_id: int,
        speaker: Speaker,
        pieces: Sequence[str],
        reply_to: int | None,
        notice: str | None = None,
    ) -> list[Delivered]:
        """Send ``pieces`` in order as ``speaker``; the first replies to ``reply_to`` when the
        speaker can reply natively (the bot account), else ``notice`` is sent first. Raises
        DeliveryError."""
        ...

    async def react(self, channel_id: int, message_id: int, emoji: str) -> None:
        """Add a reaction; raises DeliveryError."""
        ...

    async def read_attachment(self, url: str, *, max_bytes: int) -> bytes:
        """The first ``max_bytes`` of an attachment; raises DeliveryError."""
        ...
