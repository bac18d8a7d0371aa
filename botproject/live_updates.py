"""The dashboard's live updates: group names, update types and their payloads, in one place.

The bot worker publishes, the configuration services publish, the dashboard's consumers
receive; all of them name groups and updates through this module, never through string literals.

Groups:
    ``channel.<id>`` (`channel_group`): what happens in one Discord channel — loop state,
        unread count, window changes, turns started and finished, planner steps.
    ``bot.control`` (`CONTROL_GROUP`): messages to the bot workers (``config.changed``).
    ``dashboard.overview`` (`OVERVIEW_GROUP`): worker heartbeats (``worker.pulse``) and shard
        leases taken or released (``shard.lease``).
    ``person.<user id>`` (`person_group`): a dashboard person's rights changed
        (``rights.changed``); their open pages check what they may still see.

On the wire an update is a dict ``{"type": "<update type>", **payload}`` (Channels' convention: a
consumer method named after the type with dots as underscores receives it, ``turn.finished`` →
``turn_finished``); `LiveUpdate.as_message` writes it and `parse_live_update` reads it back.

Updates go out after the change they announce is committed: sync code uses
`publish_live_update_on_commit` (``transaction.on_commit``); a turn's changes are published by
its lifecycle (`chat.services.turn_lifecycle`), each after its own transaction.
Publishing never raises: a dashboard or a Redis that is down must not stop the bot.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import weakref
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.db import transaction

from botproject.failures import FailureStreak

logger = logging.getLogger(__name__)
_publishing = FailureStreak(logger, "publishing live updates")

CONTROL_GROUP = "bot.control"
OVERVIEW_GROUP = "dashboard.overview"


def channel_group(channel_id: int) -> str:
    """The group of one Discord channel's live updates."""
    return f"channel.{channel_id}"


def person_group(user_id: int) -> str:
    """The group of one dashboard person's sockets."""
    return f"person.{user_id}"


class LiveUpdateType(StrEnum):
    LOOP_STATE = "loop.state"
    LOOP_STEP = "loop.step"
    UNREAD_COUNT = "unread.count"
    WINDOW_CHANGED = "window.changed"
    TURN_STARTED = "turn.started"
    TURN_DELIVERED = "turn.delivered"
    TURN_FINISHED = "turn.finished"
    CONFIG_CHANGED = "config.changed"
    WORKER_PULSE = "worker.pulse"
    SHARD_LEASE = "shard.lease"
    RIGHTS_CHANGED = "rights.changed"


class LoopStateName(StrEnum):
    BUSY = "busy"
    IDLE = "idle"


@dataclass(frozen=True)
class LiveUpdate:
    """A payload; subclasses name their `type`."""

    type: ClassVar[LiveUpdateType]

    def as_message(self) -> dict[str, Any]:
        return {"type": str(self.type), **dataclasses.asdict(self)}


@dataclass(frozen=True)
class LoopState(LiveUpdate):
    """A channel's busy stretch began (``busy``) or ended (``idle``)."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.LOOP_STATE
    state: LoopStateName


@dataclass(frozen=True)
class LoopStep(LiveUpdate):
    """One autonomous planner step and its result."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.LOOP_STEP
    iteration: int
    action: str
    success: bool
    result: str


@dataclass(frozen=True)
class UnreadCount(LiveUpdate):
    type: ClassVar[LiveUpdateType] = LiveUpdateType.UNREAD_COUNT
    count: int


@dataclass(frozen=True)
class WindowChanged(LiveUpdate):
    """The history window a turn read (message ids as strings: JavaScript cannot hold them)."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.WINDOW_CHANGED
    message_ids: list[str]


@dataclass(frozen=True)
class TurnStarted(LiveUpdate):
    type: ClassVar[LiveUpdateType] = LiveUpdateType.TURN_STARTED
    turn_id: int
    persona: str


@dataclass(frozen=True)
class TurnDelivered(LiveUpdate):
    """A streamed reply sent one more piece (``pieces``: how many so far)."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.TURN_DELIVERED
    turn_id: int
    persona: str
    pieces: int


@dataclass(frozen=True)
class TurnFinished(LiveUpdate):
    type: ClassVar[LiveUpdateType] = LiveUpdateType.TURN_FINISHED
    turn_id: int
    persona: str
    status: str


@dataclass(frozen=True)
class ConfigChanged(LiveUpdate):
    """Configuration of these guilds was saved: workers reload what they cache."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.CONFIG_CHANGED
    guild_ids: list[str]


@dataclass(frozen=True)
class WorkerPulse(LiveUpdate):
    """A worker recorded its heartbeat: ``shard_ids`` the shards it has connected,
    ``standby_for`` those it waits for as a standby (both empty: it stopped)."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.WORKER_PULSE
    holder: str
    shard_ids: list[int]
    standby_for: list[int] = dataclasses.field(default_factory=list)


@dataclass(frozen=True)
class ShardLeaseChanged(LiveUpdate):
    """A worker took its shards' leases under a new fencing token (``fence``), or released
    them (``fence`` None). ``shards`` are ``[shard id, shard count]`` pairs."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.SHARD_LEASE
    holder: str
    shards: list[list[int]]
    fence: int | None


@dataclass(frozen=True)
class RightsChanged(LiveUpdate):
    """A person's guild rights changed (``guild_ids``: the guilds whose role changed or went);
    ``ended``: they have none left and their sessions ended."""

    type: ClassVar[LiveUpdateType] = LiveUpdateType.RIGHTS_CHANGED
    guild_ids: list[str]
    ended: bool = False


_BY_TYPE: dict[str, type[LiveUpdate]] = {
    str(cls.type): cls
    for cls in (
        LoopState,
        LoopStep,
        UnreadCount,
        WindowChanged,
        TurnStarted,
        TurnDelivered,
        TurnFinished,
        ConfigChanged,
        WorkerPulse,
        ShardLeaseChanged,
        RightsChanged,
    )
}


def parse_live_update(message: dict[str, Any]) -> LiveUpdate:
    """The update a received layer message carries.

    Raises ValueError naming the type when it is unknown or its payload does not fit.
    """
    kind = message.get("type")
    cls = _BY_TYPE.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise ValueError(f"unknown live update type {kind!r}")
    names = {f.name for f in dataclasses.fields(cls)}
    try:
        return cls(**{k: v for k, v in message.items() if k in names})
    except TypeError as error:
        raise ValueError(f"{kind}: {error}") from None


PUBLISH_CONCURRENCY = 32
"""Publishes in flight at once per event loop: well under the Redis connection pool's 100, so
hundreds of busy channels publishing together wait for a connection instead of failing."""
_publish_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = (
    weakref.WeakKeyDictionary()
)


async def publish_live_update(group: str, update: LiveUpdate) -> None:
    """Send ``update`` to ``group``; a layer failure is logged, not raised."""
    layer = get_channel_layer()
    if layer is None:
        return
    loop = asyncio.get_running_loop()
    slots = _publish_slots.get(loop)
    if slots is None:
        slots = _publish_slots[loop] = asyncio.Semaphore(PUBLISH_CONCURRENCY)
    try:
        async with slots:
            attempt = _publishing.begin()
            await layer.group_send(group, update.as_message())
    except Exception as error:  # any layer failure: the bot goes on
        _publishing.failed(error, attempt=attempt)
    else:
        _publishing.succeeded(attempt=attempt)


def publish_live_update_on_commit(group: str, update: LiveUpdate) -> None:
    """From sync code inside (or outside) a transaction: publish once it commits."""
    transaction.on_commit(lambda: async_to_sync(publish_live_update)(group, update))
