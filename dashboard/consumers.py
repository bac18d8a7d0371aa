"""Websocket consumers: live updates from the bot worker, pushed to pages as HTML fragments.

Each consumer joins the channel-layer groups of what its page shows, and on every update sends
the partials that update changes, rendered through `dashboard.selectors` with the same templates
the page uses; each fragment carries its element ``id`` and ``hx-swap-oob`` so the htmx
websocket extension swaps it in place. No domain logic lives here: an update says *that*
something changed, the selectors say *what it is now*.

Only people with a right in some guild get a socket; anyone else is refused before the
handshake completes (code 4403). A channel of a guild the person has no right in is answered
exactly as a channel nothing is known of: the socket opens and closes at once with code 4404
(not found), nothing sent. Each socket also joins its person's group (``person.<user id>``):
when their rights change it checks them again and closes (4404) once the page is no longer
theirs to see, within the 60 s in which a right lost in Discord is lost here.

On every (re)connection the consumer first sends the current state, so a page that lost its
socket (a Redis or web-process restart) catches up as soon as it is back.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.template.loader import render_to_string

from accounts.selectors import GuildRights, guild_rights
from botproject.live_updates import (
    OVERVIEW_GROUP,
    LiveUpdate,
    LoopState,
    LoopStep,
    channel_group,
    parse_live_update,
    person_group,
)
from dashboard import selectors
from dashboard.names import NameBook
from dashboard.playground import playground_chat
from dashboard.scaleout import scale_out

logger = logging.getLogger(__name__)

REFUSED = 4403
NOT_FOUND = 4404


class _LiveConsumer(AsyncWebsocketConsumer):
    """Refuses anonymous and role-less users; answers what the person may not see as not
    found; joins `groups_to_join` and the person's group; renders on updates."""

    joined: list[str]
    rights: GuildRights

    async def connect(self) -> None:
        user = self.scope.get("user")
        self.rights = await database_sync_to_async(guild_rights)(user=user)
        if not self.rights.any or not self.may_open(self.rights):
            await self.close(code=REFUSED)
            return
        if not await database_sync_to_async(self.may_view)(self.rights):
            await self.accept()
            await self.close(code=NOT_FOUND)
            return
        self.joined = [person_group(user.pk), *await self.groups_to_join()]
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

    def may_open(self, rights: GuildRights) -> bool:
        """The screen is one the person's role opens at all (the playground: operators)."""
        return True

    def may_view(self, rights: GuildRights) -> bool:
        """What this socket shows is the person's to see (no: it answers not found)."""
        return True

    async def rights_changed(self, message: dict[str, Any]) -> None:
        """The person's rights changed: read them again, and close once this page is no
        longer theirs to see (or they have no right left)."""
        user = self.scope.get("user")
        self.rights = await database_sync_to_async(guild_rights)(user=user)
        ended = bool(message.get("ended"))
        if ended or not self.rights.any or not self.may_open(self.rights):
            await self.close(code=REFUSED)
        elif not await database_sync_to_async(self.may_view)(self.rights):
            await self.close(code=NOT_FOUND)
        else:
            await self.send(text_data=await self.render_all())

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

    def may_view(self, rights: GuildRights) -> bool:
        return selectors.may_view_channel(rights=rights, channel_id=self.channel_id)

    async def groups_to_join(self) -> list[str]:
        return [channel_group(self.channel_id)]

    async def render_all(self) -> str:
        return await database_sync_to_async(_channel_fragments)(
            self.rights, self.channel_id, None, True
        )

    async def render_update(self, update: LiveUpdate) -> str:
        if isinstance(update, LoopStep):
            return render_to_string(
                "dashboard/_planner_step.html", {"step": update, "oob": "beforeend:#planner-steps"}
            )
        state = update.state if isinstance(update, LoopState) else None
        full = update.type in ("turn.started", "window.changed", "turn.delivered", "turn.finished")
        return await database_sync_to_async(_channel_fragments)(
            self.rights, self.channel_id, state, full
        )


class PlaygroundConsumer(ChannelConsumer):
    """``/ws/playground/<id>/``: the channel page's partials and the playground's chat,
    read anew (from the sandbox, over the REST port) whenever a message reached the bot or a
    turn ended, so each reply appears as it is delivered."""

    CHAT_UPDATES = ("unread.count", "window.changed", "turn.finished")

    def may_open(self, rights: GuildRights) -> bool:
        """The playground is for operators only."""
        return rights.operator

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


def _channel_fragments(
    rights: GuildRights, channel_id: int, loop_state: str | None, full: bool
) -> str:
    """The channel page's live partials, each marked for an out-of-band swap: the unread pool
    and loop state always; with ``full`` the window and the turns too."""
    window = selectors.channel_window(rights=rights, channel_id=channel_id)
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
        channel_ids = await database_sync_to_async(selectors.overview_channel_ids)(
            rights=self.rights
        )
        return [OVERVIEW_GROUP, *(channel_group(c) for c in channel_ids)]

    async def render_all(self) -> str:
        return await database_sync_to_async(_overview_fragment)(self.rights)

    async def render_update(self, update: LiveUpdate) -> str:
        return await database_sync_to_async(_overview_fragment)(self.rights)


def _overview_fragment(rights: GuildRights) -> str:
    """The overview's partials: the person's guilds; workers and shards for operators."""
    names = NameBook()
    context = {
        "overview": selectors.overview_shown(
            overview=selectors.overview(rights=rights), book=names
        ),
        "scale": scale_out() if rights.operator else None,
        "names": names,
        "oob": True,
    }
    html = render_to_string("dashboard/_overview.html", context)
    if rights.operator:
        html = render_to_string("dashboard/_scaleout.html", context) + html
    return html
