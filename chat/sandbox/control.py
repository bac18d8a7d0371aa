"""The control API: drive the sandbox from another process (the CLI, the dashboard playground).

JSON over HTTP under `/_sandbox`, no authentication (the server binds to localhost). Errors use
Discord's error body. Ids are strings in responses and strings or numbers in requests.

    GET    /world                               the bot, guilds, channels, members, endpoints
    GET    /channels/{cid}/messages[?after=ID]  messages, oldest first
    POST   /channels/{cid}/messages             {author_id, content, reply_to?, embeds?,
                                                 attachments?: [{filename, text | base64,
                                                 content_type?}]} -> the message
    PATCH  /channels/{cid}/messages/{mid}       {content} -> the message (its author edits)
    DELETE /channels/{cid}/messages/{mid}
    PUT    /channels/{cid}/messages/{mid}/reactions     {user_id, emoji}
    DELETE /channels/{cid}/messages/{mid}/reactions     {user_id, emoji}
    POST   /channels/{cid}/typing               {user_id}
    POST   /channels/{cid}/commands             {user_id, name, options?, target_message_id?,
                                                 overridden?, wait?} -> the interaction and
                                                 its answers, once answered (or `wait` s)
    GET    /interactions                        every interaction and its answers
    POST   /faults                              {method, path, status, count?, retry_after?,
                                                 scope?}
    DELETE /faults
    GET    /requests                            [{method, route, count}]
    GET    /gateway/sessions
    POST   /gateway/drop, /gateway/reconnect    -> {"count": sockets affected}
    POST   /gateway/invalidate                  -> {"count": sessions ended}
    POST   /gateway/shards/drop                 {shard: [id, count], hold?} -> {"count": sockets
                                                 cut}; with hold its RESUME waits for release
    POST   /gateway/shards/release              {shard: [id, count]} -> {"count": resumed}
    POST   /gateway/replay                      {count} -> {"count": events replayed}
    GET    /gateway/session-start-limit         the bot's session_start_limit
    POST   /gateway/session-start-limit         {remaining, reset_after? (s)} -> the limit
    POST   /application                         {flags} -> the application (which privileged
                                                 intents the bot may ask for)
    PUT    /channels/{cid}/overwrites/{target}  {member?, allow, deny} -> the channel (a
                                                 role's or member's overwrite; 0 and 0 removes)
    POST   /guilds/{gid}/roles                  {name, permissions} -> {"id": role id}
    PATCH  /guilds/{gid}/roles/{rid}            {permissions}
    PUT    /guilds/{gid}/members/{uid}/roles    {role_ids}

`ControlClient` speaks this API; `find_channel_id` and `find_user_id` resolve the names a
person types (`general`, `#general`, `alice`) against `GET /world`.
"""

from __future__ import annotations

import asyncio
import contextlib
from base64 import b64decode
from typing import TYPE_CHECKING, Annotated, Any, Literal, Self

import aiohttp
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field, model_validator

from chat.sandbox import schemas
from chat.sandbox.errors import invalid_form_body
from chat.sandbox.records import Upload
from chat.sandbox.responses import json_response, no_content
from chat.sandbox.rest import discord_errors, json_body, snowflake_param
from chat.sandbox.schemas import Snowflake

if TYPE_CHECKING:
    from chat.sandbox.server import SandboxServer


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class AttachmentSpec(_Body):
    """A file a user attaches: `text` (UTF-8) or `base64` content."""

    filename: str
    content_type: str | None = None
    text: str | None = None
    base64: str | None = None

    @model_validator(mode="after")
    def _one_content(self) -> Self:
        if (self.text is None) == (self.base64 is None):
            raise ValueError("give exactly one of text or base64")
        return self

    def upload(self) -> Upload:
        data = self.text.encode() if self.text is not None else b64decode(self.base64 or "")
        return Upload(self.filename, data, self.content_type)


class UserMessage(_Body):
    author_id: Snowflake
    content: str = ""
    reply_to: Snowflake | None = None
    embeds: list[dict[str, Any]] = []
    attachments: list[AttachmentSpec] = []


class UserEdit(_Body):
    content: str


class UserReaction(_Body):
    user_id: Snowflake
    emoji: str


class UserTyping(_Body):
    user_id: Snowflake


class CommandRun(_Body):
    """A member runs an application command: `name` with its subcommands (``memory show``),
    or a message command's name with `target_message_id`."""

    user_id: Snowflake
    name: Annotated[str, Field(min_length=1)]
    options: dict[str, Any] = {}
    target_message_id: Snowflake | None = None
    overridden: bool = False
    wait: Annotated[float, Field(ge=0, le=60)] = 5.0


class FaultSpec(_Body):
    method: str
    path: str
    status: Annotated[int, Field(ge=400, le=599)]
    count: Annotated[int, Field(ge=1)] = 1
    retry_after: Annotated[float, Field(ge=0)] | None = None
    scope: Literal["user", "shared", "global"] = "user"


class ReplaySpec(_Body):
    count: Annotated[int, Field(ge=1)] = 1


class ShardDropSpec(_Body):
    shard: tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1)]]
    hold: bool = False


class SessionStartLimitSpec(_Body):
    remaining: Annotated[int, Field(ge=0)]
    reset_after: Annotated[float, Field(ge=0)] | None = None


class MessagesQuery(_Body):
    after: Snowflake | None = None


class ApplicationSpec(_Body):
    flags: Annotated[int, Field(ge=0)]


class OverwriteSpec(_Body):
    member: bool = False
    allow: Annotated[int, Field(ge=0)] = 0
    deny: Annotated[int, Field(ge=0)] = 0


class RoleSpec(_Body):
    name: Annotated[str, Field(min_length=1, max_length=100)]
    permissions: Annotated[int, Field(ge=0)] = 0


class RolePermissionsSpec(_Body):
    permissions: Annotated[int, Field(ge=0)]


class MemberRolesSpec(_Body):
    role_ids: list[Snowflake]


def control_app(server: SandboxServer) -> web.Application:
    """The `/_sandbox` application over `server` and its world."""
    sandbox = server.sandbox
    routes = web.RouteTableDef()

    @routes.get("/world")
    async def world(request: web.Request) -> web.Response:
        endpoints = {
            "api_base": server.api_base,
            "gateway_url": server.gateway_url,
            "token": server.token,
        }
        return json_response({**sandbox.describe(), "endpoints": endpoints})

    @routes.get("/channels/{channel_id}/messages")
    async def messages(request: web.Request) -> web.Response:
        after = schemas.parse(MessagesQuery, request.query).after or 0
        channel_messages = sandbox.channel_messages(snowflake_param(request, "channel_id"))
        return json_response([m for m in channel_messages if int(m["id"]) > after])

    @routes.post("/channels/{channel_id}/messages")
    async def say(request: web.Request) -> web.Response:
        body = schemas.parse(UserMessage, await json_body(request))
        message = sandbox.user_says(
            snowflake_param(request, "channel_id"),
            body.author_id,
            body.content,
            reply_to=body.reply_to,
            attachments=[spec.upload() for spec in body.attachments],
            embeds=body.embeds,
        )
        return json_response(message)

    @routes.patch("/channels/{channel_id}/messages/{message_id}")
    async def edit(request: web.Request) -> web.Response:
        body = schemas.parse(UserEdit, await json_body(request))
        channel_id = snowflake_param(request, "channel_id")
        message_id = snowflake_param(request, "message_id")
        return json_response(sandbox.user_edits(channel_id, message_id, body.content))

    @routes.delete("/channels/{channel_id}/messages/{message_id}")
    async def delete(request: web.Request) -> web.Response:
        channel_id = snowflake_param(request, "channel_id")
        sandbox.user_deletes(channel_id, snowflake_param(request, "message_id"))
        return no_content()

    @routes.put("/channels/{channel_id}/messages/{message_id}/reactions")
    async def react(request: web.Request) -> web.Response:
        body = schemas.parse(UserReaction, await json_body(request))
        channel_id = snowflake_param(request, "channel_id")
        message_id = snowflake_param(request, "message_id")
        sandbox.user_reacts(channel_id, message_id, body.user_id, body.emoji)
        return no_content()

    @routes.delete("/channels/{channel_id}/messages/{message_id}/reactions")
    async def unreact(request: web.Request) -> web.Response:
        body = schemas.parse(UserReaction, await json_body(request))
        channel_id = snowflake_param(request, "channel_id")
        message_id = snowflake_param(request, "message_id")
        sandbox.user_unreacts(channel_id, message_id, body.user_id, body.emoji)
        return no_content()

    @routes.post("/channels/{channel_id}/typing")
    async def typing(request: web.Request) -> web.Response:
        body = schemas.parse(UserTyping, await json_body(request))
        sandbox.user_types(snowflake_param(request, "channel_id"), body.user_id)
        return no_content()

    @routes.post("/channels/{channel_id}/commands")
    async def run_command(request: web.Request) -> web.Response:
        body = schemas.parse(CommandRun, await json_body(request))
        record = sandbox.interactions.run(
            snowflake_param(request, "channel_id"),
            body.user_id,
            body.name,
            body.options,
            target_message_id=body.target_message_id,
            overridden=body.overridden,
        )
        answered = asyncio.Event()
        record.watchers.append(answered.set)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(body.wait):
                while not record.answered:
                    answered.clear()
                    await answered.wait()
        return json_response(record.describe())

    @routes.get("/interactions")
    async def interactions(request: web.Request) -> web.Response:
        return json_response([r.describe() for r in sandbox.interactions.records()])

    @routes.post("/faults")
    async def inject_fault(request: web.Request) -> web.Response:
        body = schemas.parse(FaultSpec, await json_body(request))
        server.inject_fault(
            body.method,
            body.path,
            body.status,
            count=body.count,
            retry_after=body.retry_after,
            scope=body.scope,
        )
        return no_content()

    @routes.delete("/faults")
    async def clear_faults(request: web.Request) -> web.Response:
        server.clear_faults()
        return no_content()

    @routes.get("/requests")
    async def request_counts(request: web.Request) -> web.Response:
        counts = server.request_counts
        rows = [{"method": m, "route": r, "count": n} for (m, r), n in sorted(counts.items())]
        return json_response(rows)

    @routes.get("/gateway/sessions")
    async def sessions(request: web.Request) -> web.Response:
        return json_response(server.sessions())

    @routes.post("/gateway/drop")
    async def drop(request: web.Request) -> web.Response:
        return json_response({"count": server.drop_connections()})

    @routes.post("/gateway/reconnect")
    async def reconnect(request: web.Request) -> web.Response:
        return json_response({"count": server.request_reconnect()})

    @routes.post("/gateway/invalidate")
    async def invalidate(request: web.Request) -> web.Response:
        return json_response({"count": server.invalidate_sessions()})

    @routes.post("/gateway/replay")
    async def replay(request: web.Request) -> web.Response:
        body = schemas.parse(ReplaySpec, await json_body(request))
        return json_response({"count": server.replay_last_dispatches(body.count)})

    @routes.post("/gateway/shards/drop")
    async def drop_shard(request: web.Request) -> web.Response:
        body = schemas.parse(ShardDropSpec, await json_body(request))
        return json_response({"count": server.drop_shard(*body.shard, hold=body.hold)})

    @routes.post("/gateway/shards/release")
    async def release_shard(request: web.Request) -> web.Response:
        body = schemas.parse(ShardDropSpec, await json_body(request))
        return json_response({"count": server.release_shard(*body.shard)})

    @routes.get("/gateway/session-start-limit")
    async def session_start_limit(request: web.Request) -> web.Response:
        return json_response(server.session_start_limit())

    @routes.post("/gateway/session-start-limit")
    async def set_session_start_limit(request: web.Request) -> web.Response:
        body = schemas.parse(SessionStartLimitSpec, await json_body(request))
        try:
            server.set_session_start_limit(remaining=body.remaining, reset_after=body.reset_after)
        except ValueError as error:
            raise invalid_form_body({("remaining",): ("NUMBER_TYPE_MAX", str(error))}) from None
        return json_response(server.session_start_limit())

    @routes.post("/application")
    async def application_flags(request: web.Request) -> web.Response:
        body = schemas.parse(ApplicationSpec, await json_body(request))
        sandbox.set_application_flags(body.flags)
        return json_response(sandbox.application())

    @routes.put("/channels/{channel_id}/overwrites/{target_id}")
    async def overwrite(request: web.Request) -> web.Response:
        body = schemas.parse(OverwriteSpec, await json_body(request))
        channel_id = snowflake_param(request, "channel_id")
        sandbox.set_overwrite(
            channel_id,
            snowflake_param(request, "target_id"),
            member=body.member,
            allow=body.allow,
            deny=body.deny,
        )
        return json_response(sandbox.channel(channel_id))

    @routes.post("/guilds/{guild_id}/roles")
    async def add_role(request: web.Request) -> web.Response:
        body = schemas.parse(RoleSpec, await json_body(request))
        guild_id = snowflake_param(request, "guild_id")
        role_id = sandbox.add_role(guild_id, body.name, permissions=body.permissions)
        return json_response({"id": str(role_id)})

    @routes.patch("/guilds/{guild_id}/roles/{role_id}")
    async def role_permissions(request: web.Request) -> web.Response:
        body = schemas.parse(RolePermissionsSpec, await json_body(request))
        role_id = snowflake_param(request, "role_id")
        guild_id = snowflake_param(request, "guild_id")
        sandbox.set_role_permissions(guild_id, role_id, body.permissions)
        return no_content()

    @routes.put("/guilds/{guild_id}/members/{user_id}/roles")
    async def member_roles(request: web.Request) -> web.Response:
        body = schemas.parse(MemberRolesSpec, await json_body(request))
        guild_id = snowflake_param(request, "guild_id")
        sandbox.set_member_roles(guild_id, snowflake_param(request, "user_id"), body.role_ids)
        return no_content()

    app = web.Application(middlewares=[discord_errors])
    app.add_routes(routes)
    return app


class ControlError(Exception):
    """The control API answered with an error (`status`, Discord-style `body`)."""

    def __init__(self, status: int, body: Any) -> None:
        message = body.get("message") if isinstance(body, dict) else body
        super().__init__(f"{status}: {message}")
        self.status = status
        self.body = body


class ControlClient:
    """The control API of the sandbox at `base_url` (e.g. http://127.0.0.1:8765).

    Use as an async context manager; it owns its aiohttp session.
    """

    def __init__(self, base_url: str) -> None:
        self._base = base_url.rstrip("/") + "/_sandbox"
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Self:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def world(self) -> dict[str, Any]:
        return await self._request("GET", "/world")

    async def say(
        self, channel_id: int, author_id: int, content: str, *, reply_to: int | None = None
    ) -> dict[str, Any]:
        body: dict[str, Any] = {"author_id": str(author_id), "content": content}
        if reply_to is not None:
            body["reply_to"] = str(reply_to)
        return await self._request("POST", f"/channels/{channel_id}/messages", json=body)

    async def run_command(
        self,
        channel_id: int,
        user_id: int,
        name: str,
        options: dict[str, Any] | None = None,
        *,
        target_message_id: int | None = None,
        wait: float = 5.0,
    ) -> dict[str, Any]:
        """Run a command as `user_id`; the interaction and its answers once answered."""
        body: dict[str, Any] = {
            "user_id": str(user_id),
            "name": name,
            "options": options or {},
            "wait": wait,
        }
        if target_message_id is not None:
            body["target_message_id"] = str(target_message_id)
        return await self._request("POST", f"/channels/{channel_id}/commands", json=body)

    async def messages(self, channel_id: int, *, after: int | None = None) -> list[dict[str, Any]]:
        """The channel's messages oldest first; with `after`, only newer ones."""
        params = {"after": str(after)} if after is not None else None
        return await self._request("GET", f"/channels/{channel_id}/messages", params=params)

    async def _request(self, method: str, path: str, **kwargs: Any) -> Any:
        if self._session is None:
            raise RuntimeError("use ControlClient as an async context manager")
        async with self._session.request(method, self._base + path, **kwargs) as response:
            body = await response.json() if response.status != 204 else None
            if response.status >= 400:
                raise ControlError(response.status, body)
            return body


def find_channel_id(world: dict[str, Any], name_or_id: str) -> int:
    """The channel called `name_or_id` (a leading `#` is ignored) or with that id.

    Raises `LookupError` when no channel or several (in different guilds) match.
    """
    wanted = name_or_id.removeprefix("#")
    channels = [c for guild in world["guilds"] for c in guild["channels"]]
    return _single(
        [int(c["id"]) for c in channels if wanted in (c["id"], c["name"])], "channel", name_or_id
    )


def find_user_id(world: dict[str, Any], name_or_id: str) -> int:
    """The member whose id, username, display name or nick is `name_or_id` (case-insensitive
    for names). Raises `LookupError` when none or several distinct users match."""
    wanted = name_or_id.lower()
    matches = {
        int(member["user"]["id"])
        for guild in world["guilds"]
        for member in guild["members"]
        if name_or_id == member["user"]["id"]
        or wanted
        in {
            (member["user"]["username"] or "").lower(),
            (member["user"]["global_name"] or "").lower(),
            (member["nick"] or "").lower(),
        }
    }
    return _single(sorted(matches), "user", name_or_id)


def _single(ids: list[int], kind: str, name: str) -> int:
    if len(ids) != 1:
        problem = "no" if not ids else "more than one"
        raise LookupError(f"{problem} {kind} matches {name!r}")
    return ids[0]
