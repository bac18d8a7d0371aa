"""Live events for the dashboard, published on the Channels layer after the data is saved.

Groups: ``channel.<id>`` (window changed, unread count, turn started/finished, loop state) and
``bot.control`` (messages to the worker). A consumer method named after the event type with dots
as underscores receives each event (``turn.finished`` → ``turn_finished``). Publishing never
raises: a dashboard that is down must not stop the bot.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.layers import get_channel_layer

logger = logging.getLogger(__name__)

CONTROL_GROUP = "bot.control"


def channel_group(channel_id: int) -> str:
    return f"channel.{channel_id}"


async def publish(group: str, event_type: str, **payload: Any) -> None:
    """Send one event to ``group``; failures are logged, not raised."""
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        await layer.group_send(group, {"type": event_type, **payload})
    except Exception:  # any layer failure: the bot goes on
        logger.warning("could not publish %s to %s", event_type, group, exc_info=True)
