"""Websocket consumers: live updates from the bot worker, pushed to pages as HTML fragments.

Each consumer joins the channel-layer groups of what its page shows, and on every update sends
the partials that update changes, rendered through `dashboard.selectors` with the same templates
the page uses; each fragment carries its element ``id`` and ``hx-swap-oob`` so the htmx
websocket extension swaps it in place. No domain logic lives here: an update says *that*
something changed, the selectors say *what it is now*.

Only admins and moderators get a socket; anyone else is refused before the handshake completes.
On every (re)connection the consumer first sends the current state, so a page that lost its
socket (a Redis or web-process restart) catches up as soon as it is back.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.template.loader import render_to_string

from botproject.live_updates import (
    OVERVIEW_GROUP,
    LiveUpdate,
    LoopState,
    LoopStep,
    channel_group,
    parse_live_update,
)
from dashboard import selectors
from dashboard.access import is_admin, is_moderator
from dashboard.names import NameBook
from dashboard.playground import playground_chat
from dashboard.scaleout import scale_out

logger = logging.getLogger(__name__)

REFUSED = 4403


def _may_view(user: AbstractBaseUser | AnonymousUser) -> bool:
    return is_admin(user) or is_moderator(user)


class _LiveConsumer(AsyncWebsocketConsumer):
    """Refuses anonymous and role-less users; joins `groups_to_join`; renders on updates."""

    joined: list[str]

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not await database_sync_to_async(self.may_view)(user):
            await self.close(code=REFUSED)
            return
        self.joined = await self.groups_to_join()
        for group in self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()
        await self.send(text_data=await self.render_all())

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "joined", []):
            try:
                await self.channel_layer.group_discard(group, self.channel_name)
            except Exception:  # the layer is down: the group entry expires on its own
                logger.info("could not leave %s", group, exc_info=True)

    def may_view(self, user: AbstractBaseUser | AnonymousUser) -> bool:
        """Admins and moderators watch the live screens."""
        return _may_view(user)

    async def groups_to_join(self) -> list[str]:
        raise NotImplementedError

    async def render_all(self) -> str:
        raise NotImplementedError

    async def render_update(self, update: LiveUpdate) -> str:
        raise NotImplementedError

    async def _on_update(self, message: dict[str, Any]) -> None:
        try:
            update = parse_live_update(message)
        except ValueError:
            logger.warning("ignored a malformed live update: %r", message)
            return
        html = await self.render_update(update)
        if html:
            await self.send(text_data=html)

    # Channels calls the method named after the update type (dots → underscores).
    loop_state = loop_step = unread_count = window_changed = _on_update
    turn_started = turn_delivered = turn_finished = worker_pulse = shard_lease = _on_update


class ChannelConsumer(_LiveConsumer):
    """``/ws/channels/<id>/``: the channel page's window, unread pool, loop state, turns and
    planner steps."""

    @property
    def channel_id(self) -> int:
        return int(self.scope["url_route"]["kwargs"]["channel_id"])

    async def groups_to_join(self) -> list[str]:
        return [channel_group(self.channel_id)]

    async def render_all(self) -> str:
        return await database_sync_to_async(_channel_fragments)(self.channel_id, None, True)

    async def render_update(self, update: LiveUpdate) -> str:
        if isinstance(update, LoopStep):
            return render_to_string(
                "dashboard/_planner_step.html", {"step": update, "oob": "beforeend:#planner-steps"}
            )
        state = update.state if isinstance(update, LoopState) else None
        full = update.type in ("turn.started", "window.changed", "turn.delivered", "turn.finished")
        return await database_sync_to_async(_channel_fragments)(self.channel_id, state, full)


class PlaygroundConsumer(ChannelConsumer):
    """``/ws/playground/<id>/``: the channel page's partials and the playground's chat,
    read anew (from the sandbox, over the REST port) whenever a message reached the bot or a
    turn ended, so each reply appears as it is delivered."""

    CHAT_UPDATES = ("unread.count", "window.changed", "turn.finished")

    def may_view(self, user: AbstractBaseUser | AnonymousUser) -> bool:
        """The playground is for admins only."""
        return is_admin(user)

    async def render_all(self) -> str:
        return await super().render_all() + await self._chat()

    async def render_update(self, update: LiveUpdate) -> str:
        html = await super().render_update(update)
        if update.type in self.CHAT_UPDATES:
            html += await self._chat()
        return html

    async def _chat(self) -> str:
        chat = await playground_chat(channel_id=self.channel_id)
        title = await database_sync_to_async(lambda: NameBook().channel(self.channel_id).text)()
        context = {"chat": chat, "channel_title": title, "oob": True}
        return render_to_string("dashboard/_playground_chat.html", context)


def _channel_fragments(channel_id: int, loop_state: str | None, full: bool) -> str:
    """The channel page's live partials, each marked for an out-of-band swap: the unread pool
    and loop state always; with ``full`` the window and the turns too."""
    window = selectors.channel_window(channel_id=channel_id)
    context = {"window": window, "oob": True, "loop_state": loop_state or window.loop_state}
    parts = ["dashboard/_unread_pool.html", "dashboard/_loop_state.html"]
    if full:
        parts += ["dashboard/_window.html", "dashboard/_channel_turns.html"]
    return "".join(render_to_string(name, context) for name in parts)


class OverviewConsumer(_LiveConsumer):
    """``/ws/overview/``: the workers, their shard leases and a reshard in progress; per guild,
    shards and latency, channels' queues and loop states, latest turns and errors; re-rendered
    on worker pulses, lease changes and any channel's updates."""

    async def groups_to_join(self) -> list[str]:
        channel_ids = await database_sync_to_async(selectors.overview_channel_ids)()
        return [OVERVIEW_GROUP, *(channel_group(c) for c in channel_ids)]

    async def render_all(self) -> str:
        return await database_sync_to_async(_overview_fragment)()

    async def render_update(self, update: LiveUpdate) -> str:
        return await database_sync_to_async(_overview_fragment)()


def _overview_fragment() -> str:
    context = {"overview": selectors.overview(), "scale": scale_out(), "oob": True}
    return render_to_string("dashboard/_scaleout.html", context) + render_to_string(
        "dashboard/_overview.html", context
    )
