"""Discord's REST API (v10), the part a bot uses, served from a `Sandbox`.

`rest_app` builds the aiohttp sub-application mounted at `/api/v10`. Handlers only translate
HTTP to `Sandbox` calls: path ids and bodies are parsed here (bodies through
`chat.sandbox.schemas`), the rules live in the world. Middlewares, outermost first:
`Traffic` (counts, faults, rate limits), Discord-shaped error bodies, bot-token authentication
(webhook-token routes and `/gateway` are public, as on Discord).

What the bot may do in a channel is checked here, on the routes the bot calls, as Discord
checks it (`Sandbox.require_bot_permissions`: 403 50001 Missing Access without View Channel,
403 50013 Missing Permissions otherwise): reading history needs Read Message History (without
it the list is empty), sending needs Send Messages (Send Messages in Threads in a thread),
Attach Files for files, Embed Links for embeds and Read Message History for a reply; a
reaction nobody has added yet needs Add Reactions; listing or creating webhooks needs Manage
Webhooks. Executing a webhook needs nothing.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from typing import Any

from aiohttp import BodyPartReader, web

from chat.sandbox import schemas
from chat.sandbox.errors import DiscordAPIError, invalid_form_body, invalid_json
from chat.sandbox.oauth import OAuthError
from chat.sandbox.records import Upload
from chat.sandbox.responses import json_response, no_content
from chat.sandbox.state import (
    ADD_REACTIONS,
    ATTACH_FILES,
    EMBED_LINKS,
    MANAGE_MESSAGES,
    MANAGE_WEBHOOKS,
    READ_MESSAGE_HISTORY,
    SEND_MESSAGES,
    SEND_MESSAGES_IN_THREADS,
    Sandbox,
)
from chat.sandbox.traffic import Traffic

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class GatewayInfo:
    """What `GET /gateway/bot` reports: the websocket `url`, the recommended shard count and
    the session start limit (with ``max_concurrency``)."""

    url: Callable[[], str]
    shards: int
    session_start_limit: Callable[[str], dict[str, int]]
    """The limit of a bot token (`chat.sandbox.session_starts`)."""


def snowflake_param(request: web.Request, name: str) -> int:
    """The path parameter `name` as an id; 400 code 50035 if it is not a snowflake."""
    raw = request.match_info[name]
    if not raw.isdigit():
        raise invalid_form_body(
            {(name,): ("NUMBER_TYPE_COERCE", f'Value "{raw}" is not snowflake.')}
        )
    return int(raw)


async def json_body(request: web.Request) -> Any:
    """The decoded JSON body (`{}` when empty); 400 code 50109 if it is not JSON."""
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise invalid_json() from None


async def message_body(request: web.Request) -> tuple[Any, list[Upload]]:
    """A message-carrying body: plain JSON, or multipart with `payload_json` and `files[N]`.

    Returns the decoded payload and the uploads in `files[N]` order, named and described by
    the payload's `attachments` entries whose `id` is N (the file's own name otherwise).
    """
    if request.content_type != "multipart/form-data":
        return await json_body(request), []
    payload: Any = {}
    files: dict[int, Upload] = {}
    reader = await request.multipart()
    while (part := await reader.next()) is not None:
        if not isinstance(part, BodyPartReader):
            continue
        index = _file_index(part.name)
        if part.name == "payload_json":
            try:
                payload = json.loads(await part.text())
            except json.JSONDecodeError:
                raise invalid_json() from None
        elif index is not None:
            data = bytes(await part.read(decode=False))
            filename = part.filename or f"file{index}"
            files[index] = Upload(filename, data, part.headers.get("Content-Type"))
    entries = (payload.get("attachments") or []) if isinstance(payload, dict) else []
    described = {
        int(entry["id"]): entry
        for entry in entries
        if isinstance(entry, dict) and str(entry.get("id", "")).isdigit()
    }
    uploads = []
    for index, upload in sorted(files.items()):
        entry = described.get(index, {})
        filename = entry.get("filename") or upload.filename
        uploads.append(replace(upload, filename=filename, description=entry.get("description")))
    return payload, uploads


def _file_index(part_name: str | None) -> int | None:
    """N for a multipart part named `files[N]`."""
    if part_name is None or not (part_name.startswith("files[") and part_name.endswith("]")):
        return None
    index = part_name[len("files[") : -1]
    return int(index) if index.isdigit() else None


@web.middleware
async def discord_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Render `DiscordAPIError`, aiohttp's own HTTP errors (404, 405…) and unexpected failures
    (500, logged) as Discord's JSON error bodies."""
    try:
        return await handler(request)
    except DiscordAPIError as error:
        return json_response(error.body(), status=error.status)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        body = {"message": f"{error.status}: {error.reason}", "code": 0}
        return json_response(body, status=error.status)
    except Exception:
        logger.exception("sandbox failed to serve %s %s", request.method, request.path)
        body = {"message": "500: Internal Server Error", "code": 0}
        return json_response(body, status=500)


OAUTH_ROUTES = frozenset({"/oauth2/token", "/oauth2/token/revoke"})
"""Authenticated by the application's client credentials, not the bot token."""
BEARER_ROUTES = frozenset({"/users/@me", "/users/@me/guilds"})
"""Answered for a person with ``Authorization: Bearer <OAuth2 access token>`` too."""
OAUTH_USER = web.RequestKey("oauth_user", int)
"""The person a Bearer token authenticated (absent: the bot)."""


def _is_public(route: str) -> bool:
    return (
        route == "/gateway"
        or route in OAUTH_ROUTES
        or "{webhook_token}" in route
        or "{interaction_token}" in route
    )


def rest_app(sandbox: Sandbox, traffic: Traffic, gateway: GatewayInfo) -> web.Application:
    """The `/api/v10` application over `sandbox`, with `traffic` as its front door."""

    @web.middleware
    async def bot_auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        route = traffic.route_template(request)
        if request.match_info.route.resource is None or _is_public(route):
            return await handler(request)
        authorization = request.headers.get("Authorization", "")
        if route in BEARER_ROUTES and authorization.startswith("Bearer "):
            person = sandbox.oauth.user_of(authorization.removeprefix("Bearer "))
            if person is None:
                return json_response({"message": "401: Unauthorized", "code": 0}, status=401)
            request[OAUTH_USER] = person
            return await handler(request)
        expected = f"Bot {sandbox.token}"
        if not secrets.compare_digest(request.headers.get("Authorization", ""), expected):
            return json_response({"message": "401: Unauthorized", "code": 0}, status=401)
        return await handler(request)

    bot_id = sandbox.bot_user_id

    # --- steps several routes share
    def _reaction_target(request: web.Request) -> tuple[int, int, str]:
        channel_id = snowflake_param(request, "channel_id")
        return channel_id, snowflake_param(request, "message_id"), request.match_info["emoji"]

    def _webhook_message_target(request: web.Request) -> tuple[int, int, int]:
        """(channel id, message id, webhook id) of a message the webhook in the path posted."""
        webhook_id = snowflake_param(request, "webhook_id")
        message_id = snowflake_param(request, "message_id")
        token = request.match_info["webhook_token"]
        return (
            sandbox.webhook_message_channel(webhook_id, token, message_id),
            message_id,
            webhook_id,
        )

    async def _edit(
        request: web.Request, channel_id: int, message_id: int, *, editor_id: int
    ) -> dict[str, Any]:
        payload, uploads = await message_body(request)
        body = schemas.parse(schemas.MessageEdit, payload)
        kept = None if body.attachments is None else [a.id for a in body.attachments]
        return sandbox.edit_message(
            channel_id,
            message_id,
            editor_id=editor_id,
            content=body.content,
            embeds=body.embeds,
            allowed_mentions=body.allowed_mentions,
            keep_attachment_ids=kept,
            uploads=uploads,
        )

    routes = web.RouteTableDef()

    # --- session
    @routes.get("/users/@me")
    async def current_user(request: web.Request) -> web.Response:
        person = request.get(OAUTH_USER)
        if person is not None:
            return json_response({**sandbox.user(person), "locale": "en-US", "mfa_enabled": False})
        return json_response(sandbox.current_user())

    @routes.get("/users/@me/guilds")
    async def current_user_guilds(request: web.Request) -> web.Response:
        query = schemas.parse(schemas.GuildsQuery, request.query)
        guilds = sandbox.user_guilds(request.get(OAUTH_USER, bot_id))
        if query.after is not None:
            guilds = [g for g in guilds if int(g["id"]) > query.after]
        if query.before is not None:
            guilds = [g for g in guilds if int(g["id"]) < query.before]
        return json_response(guilds[: query.limit])

    # --- OAuth2 (`chat.sandbox.oauth`)
    @routes.post("/oauth2/token")
    async def oauth_token(request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        try:
            grant = sandbox.oauth.exchange(form, request.headers.get("Authorization", ""))
        except OAuthError as error:
            return json_response(error.body(), status=error.status)
        return json_response(grant)

    @routes.post("/oauth2/token/revoke")
    async def oauth_revoke(request: web.Request) -> web.Response:
        form = {k: str(v) for k, v in (await request.post()).items()}
        try:
            sandbox.oauth.revoke(form, request.headers.get("Authorization", ""))
        except OAuthError as error:
            return json_response(error.body(), status=error.status)
        return json_response({})

    @routes.post("/users/@me/channels")
    async def open_dm(request: web.Request) -> web.Response:
        body = schemas.parse(schemas.OpenDM, await json_body(request))
        return json_response(sandbox.channel(sandbox.open_dm(int(body.recipient_id))))

    @routes.get("/users/{user_id}")
    async def get_user(request: web.Request) -> web.Response:
        return json_response(sandbox.user(snowflake_param(request, "user_id")))

    @routes.get("/oauth2/applications/@me")
    @routes.get("/applications/@me")
    async def application(request: web.Request) -> web.Response:
        return json_response(sandbox.application())

    @routes.get("/gateway")
    async def get_gateway(request: web.Request) -> web.Response:
        return json_response({"url": gateway.url()})

    @routes.get("/gateway/bot")
    async def get_gateway_bot(request: web.Request) -> web.Response:
        return json_response(
            {
                "url": gateway.url(),
                "shards": gateway.shards,
                "session_start_limit": gateway.session_start_limit(sandbox.token),
            }
        )

    # --- guilds
    def _guild_of_bot(request: web.Request) -> int:
        guild_id = snowflake_param(request, "guild_id")
        sandbox.require_bot_in_guild(guild_id)
        return guild_id

    @routes.get("/guilds/{guild_id}")
    async def get_guild(request: web.Request) -> web.Response:
        return json_response(sandbox.guild(_guild_of_bot(request)))

    @routes.get("/guilds/{guild_id}/channels")
    async def get_guild_channels(request: web.Request) -> web.Response:
        return json_response(sandbox.guild_channels(_guild_of_bot(request)))

    @routes.get("/guilds/{guild_id}/roles")
    async def get_guild_roles(request: web.Request) -> web.Response:
        return json_response(sandbox.guild_roles(_guild_of_bot(request)))

    @routes.get("/guilds/{guild_id}/members/{user_id}")
    async def get_member(request: web.Request) -> web.Response:
        guild_id = _guild_of_bot(request)
        return json_response(sandbox.member(guild_id, snowflake_param(request, "user_id")))

    @routes.delete("/guilds/{guild_id}/members/{user_id}")
    async def kick_member(request: web.Request) -> web.Response:
        guild_id = snowflake_param(request, "guild_id")
        sandbox.member_remove(guild_id, snowflake_param(request, "user_id"))
        return no_content()

    @routes.put("/guilds/{guild_id}/members/{user_id}/roles/{role_id}")
    async def add_member_role(request: web.Request) -> web.Response:
        guild_id, user_id = (
            snowflake_param(request, "guild_id"),
            snowflake_param(request, "user_id"),
        )
        sandbox.member_role_add(guild_id, user_id, snowflake_param(request, "role_id"))
        return no_content()

    @routes.delete("/guilds/{guild_id}/members/{user_id}/roles/{role_id}")
    async def remove_member_role(request: web.Request) -> web.Response:
        guild_id, user_id = (
            snowflake_param(request, "guild_id"),
            snowflake_param(request, "user_id"),
        )
        sandbox.member_role_remove(guild_id, user_id, snowflake_param(request, "role_id"))
        return no_content()

    # --- channels and messages
    def _channel_for_bot(request: web.Request, *needed: int) -> int:
        """The path's channel, once the bot may see it and do ``needed`` there."""
        channel_id = snowflake_param(request, "channel_id")
        sandbox.require_bot_permissions(channel_id, *needed)
        return channel_id

    @routes.get("/channels/{channel_id}")
    async def get_channel(request: web.Request) -> web.Response:
        return json_response(sandbox.channel(_channel_for_bot(request)))

    @routes.get("/channels/{channel_id}/messages")
    async def get_messages(request: web.Request) -> web.Response:
        query = schemas.parse(schemas.HistoryQuery, request.query)
        channel_id = _channel_for_bot(request)
        if not sandbox.channel_permissions(channel_id, bot_id) & READ_MESSAGE_HISTORY:
            return json_response([])  # Discord returns no messages rather than an error
        return json_response(sandbox.history(channel_id, query))

    @routes.post("/channels/{channel_id}/messages")
    async def create_message(request: web.Request) -> web.Response:
        channel_id = snowflake_param(request, "channel_id")
        payload, uploads = await message_body(request)
        body = schemas.parse(schemas.MessageCreate, payload)
        in_thread = sandbox.is_thread(channel_id)
        needed = [SEND_MESSAGES_IN_THREADS if in_thread else SEND_MESSAGES]
        if uploads:
            needed.append(ATTACH_FILES)
        if body.embeds:
            needed.append(EMBED_LINKS)
        if body.message_reference is not None:
            needed.append(READ_MESSAGE_HISTORY)
        sandbox.require_bot_permissions(channel_id, *needed)
        message = sandbox.create_message(
            channel_id,
            author_id=bot_id,
            content=body.content or "",
            embeds=body.embeds,
            uploads=uploads,
            reference=body.message_reference,
            allowed_mentions=body.allowed_mentions,
            tts=body.tts,
            nonce=body.nonce,
            enforce_nonce=body.enforce_nonce,
            flags=body.flags,
            sticker_ids=body.sticker_ids,
        )
        return json_response(message)

    @routes.post("/channels/{channel_id}/messages/bulk-delete")
    async def bulk_delete(request: web.Request) -> web.Response:
        body = schemas.parse(schemas.BulkDelete, await json_body(request))
        sandbox.bulk_delete_messages(_channel_for_bot(request, MANAGE_MESSAGES), body.messages)
        return no_content()

    @routes.get("/channels/{channel_id}/messages/{message_id}")
    async def get_message(request: web.Request) -> web.Response:
        channel_id = _channel_for_bot(request, READ_MESSAGE_HISTORY)
        return json_response(sandbox.message(channel_id, snowflake_param(request, "message_id")))

    @routes.patch("/channels/{channel_id}/messages/{message_id}")
    async def edit_message(request: web.Request) -> web.Response:
        channel_id = _channel_for_bot(request)
        message_id = snowflake_param(request, "message_id")
        return json_response(await _edit(request, channel_id, message_id, editor_id=bot_id))

    @routes.delete("/channels/{channel_id}/messages/{message_id}")
    async def delete_message(request: web.Request) -> web.Response:
        channel_id = snowflake_param(request, "channel_id")
        sandbox.delete_message(channel_id, snowflake_param(request, "message_id"))
        return no_content()

    @routes.post("/channels/{channel_id}/typing")
    async def typing(request: web.Request) -> web.Response:
        channel_id = snowflake_param(request, "channel_id")
        sending = SEND_MESSAGES_IN_THREADS if sandbox.is_thread(channel_id) else SEND_MESSAGES
        sandbox.require_bot_permissions(channel_id, sending)
        sandbox.trigger_typing(channel_id, user_id=bot_id)
        return no_content()

    # --- reactions
    @routes.get("/channels/{channel_id}/messages/{message_id}/reactions/{emoji}")
    async def reaction_users(request: web.Request) -> web.Response:
        channel_id, message_id, emoji = _reaction_target(request)
        return json_response(sandbox.reaction_users(channel_id, message_id, emoji))

    @routes.put("/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me")
    async def add_own_reaction(request: web.Request) -> web.Response:
        channel_id, message_id, emoji = _reaction_target(request)
        needed = [READ_MESSAGE_HISTORY]
        if not sandbox.reaction_users(channel_id, message_id, emoji):
            needed.append(ADD_REACTIONS)  # adding to an existing reaction needs no more
        sandbox.require_bot_permissions(channel_id, *needed)
        sandbox.add_reaction(channel_id, message_id, emoji, user_id=bot_id)
        return no_content()

    @routes.delete("/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/@me")
    async def remove_own_reaction(request: web.Request) -> web.Response:
        channel_id, message_id, emoji = _reaction_target(request)
        sandbox.remove_reaction(channel_id, message_id, emoji, user_id=bot_id)
        return no_content()

    @routes.delete("/channels/{channel_id}/messages/{message_id}/reactions/{emoji}/{user_id}")
    async def remove_user_reaction(request: web.Request) -> web.Response:
        channel_id, message_id, emoji = _reaction_target(request)
        user_id = snowflake_param(request, "user_id")
        sandbox.remove_reaction(channel_id, message_id, emoji, user_id=user_id)
        return no_content()

    @routes.delete("/channels/{channel_id}/messages/{message_id}/reactions")
    async def remove_all_reactions(request: web.Request) -> web.Response:
        channel_id = snowflake_param(request, "channel_id")
        sandbox.clear_reactions(channel_id, snowflake_param(request, "message_id"))
        return no_content()

    @routes.delete("/channels/{channel_id}/messages/{message_id}/reactions/{emoji}")
    async def remove_emoji_reactions(request: web.Request) -> web.Response:
        channel_id, message_id, emoji = _reaction_target(request)
        sandbox.clear_reaction_emoji(channel_id, message_id, emoji)
        return no_content()

    # --- attachments
    @routes.post("/attachments/refresh-urls")
    async def refresh_attachment_urls(request: web.Request) -> web.Response:
        body = schemas.parse(schemas.AttachmentRefresh, await json_body(request))
        return json_response(
            {"refreshed_urls": sandbox.refresh_attachment_urls(body.attachment_urls)}
        )

    # --- application commands and interactions (`chat.sandbox.interactions`)
    def _application_id(request: web.Request) -> int:
        return snowflake_param(request, "application_id")

    @routes.get("/applications/{application_id}/commands")
    async def global_commands(request: web.Request) -> web.Response:
        return json_response(sandbox.interactions.commands(_application_id(request)))

    @routes.put("/applications/{application_id}/commands")
    async def sync_global_commands(request: web.Request) -> web.Response:
        body = await json_body(request)
        if not isinstance(body, list):
            raise invalid_form_body({("_",): ("LIST_TYPE_CONVERT", "Must be a list.")})
        return json_response(sandbox.interactions.sync(_application_id(request), None, body))

    @routes.get("/applications/{application_id}/guilds/{guild_id}/commands")
    async def guild_commands(request: web.Request) -> web.Response:
        guild_id = snowflake_param(request, "guild_id")
        return json_response(sandbox.interactions.commands(_application_id(request), guild_id))

    @routes.put("/applications/{application_id}/guilds/{guild_id}/commands")
    async def sync_guild_commands(request: web.Request) -> web.Response:
        body = await json_body(request)
        if not isinstance(body, list):
            raise invalid_form_body({("_",): ("LIST_TYPE_CONVERT", "Must be a list.")})
        guild_id = snowflake_param(request, "guild_id")
        return json_response(sandbox.interactions.sync(_application_id(request), guild_id, body))

    @routes.post("/interactions/{interaction_id}/{interaction_token}/callback")
    async def interaction_callback(request: web.Request) -> web.Response:
        payload, uploads = await message_body(request)
        if not isinstance(payload, dict):
            raise invalid_form_body({("type",): ("BASE_TYPE_REQUIRED", "This field is required")})
        answer = sandbox.interactions.callback(
            snowflake_param(request, "interaction_id"),
            request.match_info["interaction_token"],
            payload,
            uploads,
        )
        wanted = request.query.get("with_response", "false").lower() in ("1", "true")
        return json_response(answer) if wanted else no_content()

    @routes.get("/webhooks/{webhook_id}/{webhook_token}/messages/@original")
    async def get_original_response(request: web.Request) -> web.Response:
        application_id = snowflake_param(request, "webhook_id")
        token = request.match_info["webhook_token"]
        return json_response(sandbox.interactions.original(application_id, token))

    @routes.patch("/webhooks/{webhook_id}/{webhook_token}/messages/@original")
    async def edit_original_response(request: web.Request) -> web.Response:
        application_id = snowflake_param(request, "webhook_id")
        payload, uploads = await message_body(request)
        token = request.match_info["webhook_token"]
        edited = sandbox.interactions.edit_original(application_id, token, payload, uploads)
        return json_response(edited)

    # --- webhooks
    @routes.post("/channels/{channel_id}/webhooks")
    async def create_webhook(request: web.Request) -> web.Response:
        body = schemas.parse(schemas.WebhookCreate, await json_body(request))
        channel_id = _channel_for_bot(request, MANAGE_WEBHOOKS)
        return json_response(sandbox.create_webhook(channel_id, body.name, avatar=body.avatar))

    @routes.get("/channels/{channel_id}/webhooks")
    async def channel_webhooks(request: web.Request) -> web.Response:
        return json_response(sandbox.channel_webhooks(_channel_for_bot(request, MANAGE_WEBHOOKS)))

    @routes.get("/webhooks/{webhook_id}")
    async def get_webhook(request: web.Request) -> web.Response:
        return json_response(sandbox.webhook(snowflake_param(request, "webhook_id")))

    @routes.delete("/webhooks/{webhook_id}")
    async def delete_webhook(request: web.Request) -> web.Response:
        sandbox.delete_webhook(snowflake_param(request, "webhook_id"))
        return no_content()

    @routes.get("/webhooks/{webhook_id}/{webhook_token}")
    async def get_webhook_with_token(request: web.Request) -> web.Response:
        webhook_id = snowflake_param(request, "webhook_id")
        return json_response(sandbox.webhook(webhook_id, request.match_info["webhook_token"]))

    @routes.delete("/webhooks/{webhook_id}/{webhook_token}")
    async def delete_webhook_with_token(request: web.Request) -> web.Response:
        webhook_id = snowflake_param(request, "webhook_id")
        sandbox.delete_webhook(webhook_id, request.match_info["webhook_token"])
        return no_content()

    @routes.post("/webhooks/{webhook_id}/{webhook_token}")
    async def execute_webhook(request: web.Request) -> web.Response:
        webhook_id = snowflake_param(request, "webhook_id")
        payload, uploads = await message_body(request)
        token = request.match_info["webhook_token"]
        if sandbox.interactions.owns_token(webhook_id, token):
            followup = sandbox.interactions.followup(webhook_id, token, payload, uploads)
            wait = request.query.get("wait", "false").lower() in ("1", "true")
            return json_response(followup) if wait else no_content()
        body = schemas.parse(schemas.WebhookExecute, payload)
        message = sandbox.execute_webhook(
            webhook_id,
            request.match_info["webhook_token"],
            content=body.content,
            username=body.username,
            avatar_url=body.avatar_url,
            embeds=body.embeds,
            uploads=uploads,
            allowed_mentions=body.allowed_mentions,
            tts=body.tts,
            flags=body.flags,
            thread_id=int(request.query["thread_id"]) if "thread_id" in request.query else None,
        )
        wait = request.query.get("wait", "false").lower() in ("1", "true")
        return json_response(message) if wait else no_content()

    @routes.get("/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}")
    async def get_webhook_message(request: web.Request) -> web.Response:
        channel_id, message_id, _ = _webhook_message_target(request)
        return json_response(sandbox.message(channel_id, message_id))

    @routes.patch("/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}")
    async def edit_webhook_message(request: web.Request) -> web.Response:
        channel_id, message_id, webhook_id = _webhook_message_target(request)
        return json_response(await _edit(request, channel_id, message_id, editor_id=webhook_id))

    @routes.delete("/webhooks/{webhook_id}/{webhook_token}/messages/{message_id}")
    async def delete_webhook_message(request: web.Request) -> web.Response:
        channel_id, message_id, _ = _webhook_message_target(request)
        sandbox.delete_message(channel_id, message_id)
        return no_content()

    app = web.Application(middlewares=[traffic.middleware, discord_errors, bot_auth])
    app.add_routes(routes)
    return app
