"""`DiscordDeployment` over discord.py's HTTP client: what `manage.py doctor` reads from Discord.

`deployment_reader` logs in with the bot's token (``GET /users/@me``, then discord.py's own
``GET /applications/@me``), never connects to the gateway, and reads the raw JSON Discord
answers: the application's flags, the bot's guilds, each guild's roles, channels (with their
overwrites) and the bot's member record, a channel's webhooks and the registered commands.
JSON becomes the pipeline's permission types here, at the boundary.
"""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import AsyncIterator, Mapping
from typing import Any

import discord
from discord.http import Route

from chat.gateway.client import bot_intents
from chat.gateway.endpoints import configure_discord_endpoints
from chat.gateway.slash_commands import PersonaCommandTree
from chat.pipeline.permissions import GuildRoles, Overwrite, OverwriteKind, Role
from chat.ports import (
    BotApplication,
    ChannelLayout,
    DiscordReadRefused,
    DiscordUnavailable,
    GuildLayout,
    TokenRefused,
    WebhookCount,
)

CHANNEL_KINDS = {0: "text", 5: "text", 4: "category", 15: "forum", 16: "forum", 10: "thread"}
CHANNEL_KINDS |= {11: "thread", 12: "thread"}


class DeploymentReader:
    """`chat.ports.DiscordDeployment` through a logged-in ``client``."""

    def __init__(self, client: discord.Client) -> None:
        self._client = client
        self.intents = bot_intents().value
        tree = PersonaCommandTree(client, runtime=lambda: None)
        self.command_names = frozenset(command.name for command in tree.get_commands())

    @property
    def bot_user_id(self) -> int:
        assert self._client.user is not None
        return self._client.user.id

    async def _get(self, path: str, query: Mapping[str, Any] | None = None, **ids: Any) -> Any:
        try:
            return await self._client.http.request(Route("GET", path, **ids), params=query)
        except discord.HTTPException as error:
            raise DiscordReadRefused(
                f"{error.status} {error.text or error.response.reason}",
                status=error.status,
                code=error.code,
            ) from None

    async def application(self) -> BotApplication:
        data = await self._get("/applications/@me")
        bot = data.get("bot") or {}
        return BotApplication(
            id=int(data["id"]),
            name=str(data.get("name") or ""),
            flags=int(data.get("flags") or 0),
            bot_name=str(bot.get("username") or self._client.user),
        )

    async def bot_guilds(self) -> dict[int, str]:
        guilds: dict[int, str] = {}
        after = 0
        while True:  # 200 a page, oldest first
            page = await self._get("/users/@me/guilds", {"limit": 200, "after": after})
            guilds |= {int(g["id"]): str(g["name"]) for g in page}
            if len(page) < 200:
                return guilds
            after = max(int(g["id"]) for g in page)

    async def guild_layout(self, guild_id: int) -> GuildLayout:
        guild = await self._get("/guilds/{guild_id}", guild_id=guild_id)
        channels = await self._get("/guilds/{guild_id}/channels", guild_id=guild_id)
        member = await self._get(
            "/guilds/{guild_id}/members/{user_id}", guild_id=guild_id, user_id=self.bot_user_id
        )
        roles = {
            int(r["id"]): Role(int(r["id"]), str(r["name"]), int(r["permissions"]))
            for r in guild.get("roles", [])
        }
        positions = {int(r["id"]): int(r.get("position", 0)) for r in guild.get("roles", [])}
        bot_role_ids = tuple(int(r) for r in member.get("roles", []))
        own_role = next(
            (
                int(r["id"])
                for r in guild.get("roles", [])
                if (r.get("tags") or {}).get("bot_id") == str(self.bot_user_id)
            ),
            max(bot_role_ids, key=lambda r: positions.get(r, 0), default=guild_id),
        )
        layouts = [_channel_layout(c) for c in channels]
        by_id = {c.id: c for c in layouts}
        layouts = [
            _with_sync(c, by_id.get(c.parent_id)) if c.kind != "category" else c for c in layouts
        ]
        return GuildLayout(
            guild_id=guild_id,
            name=str(guild["name"]),
            roles=GuildRoles(guild_id=guild_id, owner_id=int(guild["owner_id"]), roles=roles),
            bot_role_ids=bot_role_ids,
            bot_role_name=roles[own_role].name if own_role in roles else "@everyone",
            bot_timed_out_until=_timestamp(member.get("communication_disabled_until")),
            channels=tuple(layouts),
        )

    async def webhook_count(self, channel_id: int) -> WebhookCount:
        hooks = await self._get("/channels/{channel_id}/webhooks", channel_id=channel_id)
        own = sum(1 for h in hooks if (h.get("user") or {}).get("id") == str(self.bot_user_id))
        return WebhookCount(total=len(hooks), own=own)

    async def registered_commands(self, guild_id: int | None) -> frozenset[str]:
        application_id = self._client.application_id
        if guild_id is None:
            path, parameters = "/applications/{application_id}/commands", {}
        else:
            path = "/applications/{application_id}/guilds/{guild_id}/commands"
            parameters = {"guild_id": guild_id}
        commands = await self._get(path, application_id=application_id, **parameters)
        return frozenset(str(c["name"]) for c in commands)


def _channel_layout(data: Mapping[str, Any]) -> ChannelLayout:
    overwrites = tuple(
        Overwrite(
            target_id=int(o["id"]),
            kind=OverwriteKind.MEMBER if int(o.get("type", 0)) == 1 else OverwriteKind.ROLE,
            allow=int(o.get("allow") or 0),
            deny=int(o.get("deny") or 0),
        )
        for o in data.get("permission_overwrites") or ()
    )
    parent = data.get("parent_id")
    return ChannelLayout(
        id=int(data["id"]),
        name=str(data.get("name") or ""),
        kind=CHANNEL_KINDS.get(int(data.get("type", 0)), "other"),
        parent_id=int(parent) if parent else None,
        overwrites=overwrites,
    )


def _with_sync(channel: ChannelLayout, category: ChannelLayout | None) -> ChannelLayout:
    """Discord's "synced" (the channel's overwrites are its category's), which it shows but
    does not send: the same overwrites, in any order."""
    if category is None or category.kind != "category":
        return channel
    synced = set(channel.overwrites) == set(category.overwrites)
    return ChannelLayout(
        channel.id, channel.name, channel.kind, channel.parent_id, channel.overwrites, synced
    )


def _timestamp(value: str | None) -> dt.datetime | None:
    return dt.datetime.fromisoformat(value) if value else None


@contextlib.asynccontextmanager
async def deployment_reader(
    *, token: str, api_base: str, gateway_url: str | None
) -> AsyncIterator[DeploymentReader]:
    """Log in with ``token`` at ``api_base`` and yield the reader; the HTTP session closes on
    exit. Raises `TokenRefused` when Discord answers 401, `DiscordUnavailable` when there is
    no token or Discord cannot be reached."""
    if not token:
        raise DiscordUnavailable("DISCORD_TOKEN is not set")
    configure_discord_endpoints(api_base=api_base, gateway_url=gateway_url or None)
    client = discord.Client(intents=discord.Intents.none())
    try:
        try:
            await client.login(token)
        except discord.LoginFailure:
            raise TokenRefused("401 Unauthorized") from None
        except (discord.HTTPException, OSError) as error:
            raise DiscordUnavailable(f"{api_base} could not be read: {error}") from None
        yield DeploymentReader(client)
    finally:
        await client.close()
