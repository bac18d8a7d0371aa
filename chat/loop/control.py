"""The worker's end of the ``bot.control`` group: messages from the dashboard and the admin.

Handled types: ``config.changed`` (configuration was saved: reload what the worker caches).
Other types are logged and ignored, so an older worker survives a newer dashboard.

Delivery guarantees, and what they rest on:

- An idle receive is not a failure. channels_redis waits in ``BZPOPMIN`` for up to
  ``brpop_timeout`` (5 s) and then waits again; the layer's socket timeout in
  ``botproject/settings.py`` is longer than that, so an idle listener holds one connection open.
- The listener keeps **one inbox for its whole life**. After a real Redis failure (connection
  reset, Redis restarted, unreachable) it reconnects with backoff and adds the same inbox to the
  group again, so the group never grows across reconnects, and messages sent to the group while
  the listener was reconnecting wait in that inbox (channels_redis keeps them for its ``expiry``,
  60 s) and are received after the reconnect.
- Membership is refreshed every ``refresh_seconds``: channels_redis drops group members older
  than its ``group_expiry`` (a day), which would silently cut off a long-running worker.
- When the listener stops, it takes its inbox out of the group (best effort).

Delivery is at least once (channels_redis keeps a message in a backup queue until it is
processed): a message being received when the connection broke may arrive again, so handlers
must be idempotent (reloading the configuration is).

Not guaranteed: a message sent while Redis itself is down or restarted without persistence is
lost with Redis's data; the publisher logs that it could not send.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from channels.layers import BaseChannelLayer, get_channel_layer

from botproject.live_updates import CONTROL_GROUP

__all__ = ["CONTROL_GROUP", "Handler", "listen_for_control"]

logger = logging.getLogger(__name__)

Handler = Callable[[Mapping[str, Any]], Awaitable[None]]
RETRY_SECONDS = (0.2, 1, 2, 5, 10, 30)
REFRESH_SECONDS = 3600.0
LEAVE_TIMEOUT_SECONDS = 2.0


async def listen_for_control(
    handlers: Mapping[str, Handler],
    *,
    layer: BaseChannelLayer | None = None,
    refresh_seconds: float = REFRESH_SECONDS,
) -> None:
    """Receive ``bot.control`` messages until cancelled, dispatching each by its ``type``.

    ``layer`` defaults to the configured channel layer; with none configured this logs a warning
    and returns. Never raises except ``CancelledError``: a failed handler is logged, and a layer
    failure is logged in one line and retried with backoff (``RETRY_SECONDS``); the recovery is
    logged once.
    """
    layer = layer if layer is not None else get_channel_layer()
    if layer is None:
        logger.warning("no channel layer configured; bot.control messages are not received")
        return
    inbox = await layer.new_channel()
    failures = 0
    try:
        while True:
            try:
                await layer.group_add(CONTROL_GROUP, inbox)
                if failures:
                    logger.info(
                        "bot.control listener reconnected after %d failed attempt(s)", failures
                    )
                    failures = 0
                async with _refreshing_membership(layer, inbox, refresh_seconds):
                    while True:
                        message = await layer.receive(inbox)
                        await _dispatch(handlers, message)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                delay = RETRY_SECONDS[min(failures, len(RETRY_SECONDS) - 1)]
                failures += 1
                logger.warning(
                    "bot.control listener lost the channel layer (%s: %s); attempt %d, "
                    "retrying in %s s",
                    type(error).__name__,
                    error,
                    failures,
                    delay,
                )
                await asyncio.sleep(delay)
    finally:
        await _leave(layer, inbox)


@contextlib.asynccontextmanager
async def _refreshing_membership(layer: BaseChannelLayer, inbox: str, every: float):
    """While the block runs, re-add ``inbox`` to the group every ``every`` seconds."""

    async def refresh() -> None:
        while True:
            await asyncio.sleep(every)
            try:
                await layer.group_add(CONTROL_GROUP, inbox)
            except Exception as error:  # the receive loop notices a real failure itself
                logger.debug("could not refresh bot.control membership: %s", error)

    task = asyncio.create_task(refresh())
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _leave(layer: BaseChannelLayer, inbox: str) -> None:
    """Take ``inbox`` out of the group, giving up quietly after ``LEAVE_TIMEOUT_SECONDS``."""
    try:
        await asyncio.wait_for(layer.group_discard(CONTROL_GROUP, inbox), LEAVE_TIMEOUT_SECONDS)
    except Exception as error:  # Redis gone or slow: the member expires with the group
        logger.info("could not leave the bot.control group: %s", error)


async def _dispatch(handlers: Mapping[str, Handler], message: Mapping[str, Any]) -> None:
    handler = handlers.get(message.get("type", ""))
    if handler is None:
        logger.info("ignoring bot.control message of type %r", message.get("type"))
        return
    try:
        await handler(message)
    except Exception:
        logger.exception("bot.control handler for %r failed", message.get("type"))
