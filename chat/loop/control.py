"""The worker's end of the ``bot.control`` group: messages from the dashboard and the admin.

Handled types: ``config.changed`` (configuration was saved: reload what the worker caches).
Other types are logged and ignored, so an older worker survives a newer dashboard. A channel
layer that is down is retried with backoff; the bot keeps answering meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.layers import get_channel_layer

from botproject.events import CONTROL_GROUP

logger = logging.getLogger(__name__)

Handler = Callable[[Mapping[str, Any]], Awaitable[None]]
RETRY_SECONDS = (1, 2, 5, 10, 30)


async def listen_for_control(handlers: Mapping[str, Handler]) -> None:
    """Receive ``bot.control`` messages forever, dispatching each by its ``type``."""
    layer = get_channel_layer()
    if layer is None:
        logger.warning("no channel layer configured; bot.control messages are not received")
        return
    failures = 0
    while True:
        try:
            inbox = await layer.new_channel()
            await layer.group_add(CONTROL_GROUP, inbox)
            failures = 0
            while True:
                message = await layer.receive(inbox)
                await _dispatch(handlers, message)
        except asyncio.CancelledError:
            raise
        except Exception:
            delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
            failures += 1
            logger.warning("bot.control listener failed; retrying in %s s", delay, exc_info=True)
            await asyncio.sleep(delay)


async def _dispatch(handlers: Mapping[str, Handler], message: Mapping[str, Any]) -> None:
    handler = handlers.get(message.get("type", ""))
    if handler is None:
        logger.info("ignoring bot.control message of type %r", message.get("type"))
        return
    try:
        await handler(message)
    except Exception:
        logger.exception("bot.control handler for %r failed", message.get("type"))
