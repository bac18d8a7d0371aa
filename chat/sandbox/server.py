"""`SandboxServer`: a `Sandbox` served on localhost for the real discord.py client.

One aiohttp server carries everything:

- `/api/v10/...`  Discord's REST API (`chat.sandbox.rest`), behind `Traffic`;
- `/gateway`      the gateway websocket (`chat.sandbox.gateway`);
- `/oauth2/authorize`  the OAuth2 consent page ("Log in with Discord", `chat.sandbox.oauth`);
- `/attachments/{channel_id}/{attachment_id}/{filename}?ex=…&hm=…`  uploaded files (the "CDN";
  URLs are signed and expire like Discord's, see `Sandbox.attachment_url_lifetime`);
- `/_sandbox/...` the control API for tests and other processes (`chat.sandbox.control`);
- `/pluralkit/v2/...`, `/youtube/...` and `/moderation/v1/moderations`: the outside services
  the bot may be pointed at (a proxy system, a transcript service, a moderation service).

    async with SandboxServer(sandbox, gateway=GatewaySettings(heartbeat_interval_ms=500)) as server:
        configure_discord_endpoints(api_base=server.api_base, gateway_url=server.gateway_url)
        ...
        server.sandbox.user_says(channel_id, alice_id, "hello")

Leaving the context closes every websocket (1001), stops the server and leaves no task behind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from types import TracebackType
from typing import Any, Self

from aiohttp import web

from chat.llm.fake_moderation import FakeModeration
from chat.sandbox.control import control_app
from chat.sandbox.gateway import Gateway, GatewaySettings, IdentifyRecord
from chat.sandbox.oauth import authorize_routes
from chat.sandbox.rest import GatewayInfo, discord_errors, rest_app, snowflake_param
from chat.sandbox.state import Sandbox
from chat.sandbox.traffic import (
    RateLimitPolicy,
    RateLimitScope,
    RequestRecord,
    RouteKey,
    Traffic,
)

API_PREFIX = "/api/v10"
GATEWAY_PATH = "/gateway"
PLURALKIT_PREFIX = "/pluralkit/v2"
YOUTUBE_PREFIX = "/youtube"
MODERATION_PREFIX = "/moderation/v1"


class SandboxServer:
    """Serves `sandbox` (a fresh empty world by default) on `host`:`port` (0 = ephemeral).

    `gateway` tunes heartbeats, replay buffers and resume windows; `rate_limit` sets the REST
    buckets; `shards` is the shard count `GET /gateway/bot` recommends.
    """

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        gateway: GatewaySettings | None = None,
        rate_limit: RateLimitPolicy | None = None,
        shards: int = 1,
    ) -> None:
        self.sandbox = sandbox or Sandbox()
        self._host = host
        self._port = port
        self._gateway_settings = gateway or GatewaySettings()
        self._shards = shards
        self._traffic = Traffic(api_prefix=API_PREFIX, policy=rate_limit or RateLimitPolicy())
        self._gateway: Gateway | None = None
        self._runner: web.AppRunner | None = None
        self.pluralkit_lookups: list[str] = []
        """The message ids asked of the proxy system's API, in order."""
        self.videos: dict[str, dict[str, Any]] = {}
        """The transcript service's videos by id: ``{"title", "channel", "duration_seconds",
        "transcript"}`` (`chat.llm.video_transcripts`); others answer 404."""
        self.video_lookups: list[str] = []
        """The video ids asked of the transcript service, in order."""
        self.moderation = FakeModeration()
        """The moderation service (`chat.llm.fake_moderation`'s deterministic rule)."""
        self.attachment_delay = 0.0
        """Seconds each attachment download waits before it is answered (a slow CDN)."""

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        """Bind and serve; `port`, `api_base` and `gateway_url` are known afterwards."""
        if self._runner is not None:
            raise RuntimeError("the sandbox server is already running")
        gateway = Gateway(self.sandbox, self._gateway_settings, url=lambda: self.gateway_url)
        app = web.Application(middlewares=[discord_errors])
        app.add_subapp(
            API_PREFIX,
            rest_app(
                self.sandbox,
                self._traffic,
                GatewayInfo(
                    url=lambda: self.gateway_url,
                    shards=self._shards,
                    session_start_limit=gateway.session_start_limit,
                ),
            ),
        )
        app.add_subapp("/_sandbox", control_app(self))
        app.router.add_get(GATEWAY_PATH, gateway.handle)
        app.add_routes(authorize_routes(self.sandbox))
        app.router.add_get(
            "/attachments/{channel_id}/{attachment_id}/{filename:.+}",
            self._serve_attachment,
        )
        app.router.add_get(PLURALKIT_PREFIX + "/messages/{message_id}", self._pluralkit_message)
        app.router.add_get(YOUTUBE_PREFIX + "/videos/{video_id}", self._video)
        app.router.add_post(MODERATION_PREFIX + "/moderations", self.moderation.handle)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=5.0)
        await runner.setup()
        try:
            await web.TCPSite(runner, self._host, self._port).start()
        except BaseException:
            await runner.cleanup()
            await gateway.close()
            raise
        self._gateway, self._runner = gateway, runner
        self._port = runner.addresses[0][1]
        self.sandbox.cdn_base_url = self.base_url

    async def stop(self) -> None:
        """Close every gateway socket, then the server. Safe to call when not running."""
        if self._gateway is not None:
            await self._gateway.close()
            self._gateway = None
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    # ---------------------------------------------------------------------------- addresses

    @property
    def port(self) -> int:
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def api_base(self) -> str:
        """The REST base for `DISCORD_API_BASE`, e.g. http://127.0.0.1:8765/api/v10."""
        return self.base_url + API_PREFIX

    @property
    def pluralkit_api_base(self) -> str:
        """The proxy system's API for `PLURALKIT_API_BASE`, e.g. http://127.0.0.1:8765/pluralkit/v2."""
        return self.base_url + PLURALKIT_PREFIX

    @property
    def youtube_transcript_url(self) -> str:
        """The transcript service for `YOUTUBE_TRANSCRIPT_URL`, e.g. http://127.0.0.1:8765/youtube."""
        return self.base_url + YOUTUBE_PREFIX

    @property
    def moderation_base_url(self) -> str:
        """The moderation service for `MODERATION_BASE_URL`, e.g.
        http://127.0.0.1:8765/moderation/v1."""
        return self.base_url + MODERATION_PREFIX

    @property
    def oauth_authorize_url(self) -> str:
        """The consent page for `DISCORD_OAUTH_AUTHORIZE_URL`, e.g.
        http://127.0.0.1:8765/oauth2/authorize."""
        return self.base_url + "/oauth2/authorize"

    @property
    def gateway_url(self) -> str:
        """The websocket URL for `DISCORD_GATEWAY_URL`, e.g. ws://127.0.0.1:8765/gateway."""
        return f"ws://{self._host}:{self._port}{GATEWAY_PATH}"

    @property
    def token(self) -> str:
        """The bot token the server accepts (`DISCORD_TOKEN`)."""
        return self.sandbox.token

    # ------------------------------------------------------------------------------- REST

    def inject_fault(
        self,
        method: str,
        path_pattern: str,
        status: int,
        *,
        count: int = 1,
        retry_after: float | None = None,
        scope: RateLimitScope = "user",
    ) -> None:
        """Fail the next `count` REST requests matching the route; see `Traffic.inject_fault`."""
        self._traffic.inject_fault(
            method, path_pattern, status, count=count, retry_after=retry_after, scope=scope
        )

    def hold_responses(
        self, method: str, path_pattern: str, seconds: float, *, count: int = 1
    ) -> None:
        """Answer the next `count` matching REST requests `seconds` late, after handling them;
        see `Traffic.hold_responses`."""
        self._traffic.hold_responses(method, path_pattern, seconds, count=count)

    def clear_faults(self) -> None:
        self._traffic.clear_faults()

    @property
    def request_counts(self) -> Mapping[RouteKey, int]:
        """REST requests so far by (method, route template), e.g.
        ``("POST", "/channels/{channel_id}/messages")``; faulted and rate-limited ones count."""
        return self._traffic.request_counts

    def requests(self, method: str | None = None, route: str | None = None) -> list[RequestRecord]:
        """REST requests so far with their arrival times; see `Traffic.requests`."""
        return self._traffic.requests(method, route)

    # ---------------------------------------------------------------------------- gateway

    def drop_connections(self) -> int:
        """Cut every gateway socket abruptly; bots RESUME and get what they missed."""
        return self._gateway.drop_connections() if self._gateway else 0

    def drop_shard(self, shard_id: int, shard_count: int, *, hold: bool = False) -> int:
        """Cut one shard's gateway sockets abruptly; the others go on. With ``hold`` the shard
        cannot RESUME until `release_shard`. Returns how many sockets were cut."""
        return self._gateway.drop_shard((shard_id, shard_count), hold=hold) if self._gateway else 0

    def release_shard(self, shard_id: int, shard_count: int) -> int:
        """Let a shard dropped with ``hold`` RESUME; returns how many RESUMEs were answered."""
        return self._gateway.release_shard((shard_id, shard_count)) if self._gateway else 0

    def invalidate_sessions(self) -> int:
        """End every gateway session with INVALID_SESSION (op 9, `d: false`): bots IDENTIFY
        again and miss whatever happens until they do. Returns how many sessions ended."""
        return self._gateway.invalidate_sessions() if self._gateway else 0

    def request_reconnect(self) -> int:
        """Send RECONNECT (op 7) to every identified bot."""
        return self._gateway.request_reconnect() if self._gateway else 0

    def replay_last_dispatches(self, count: int) -> int:
        """Deliver the last `count` world events again (duplicates, as Discord sometimes
        sends); returns how many were replayed."""
        return self._gateway.replay_last_dispatches(count) if self._gateway else 0

    def identifies(self) -> list[IdentifyRecord]:
        """Every IDENTIFY the gateway received, refused ones included, oldest first."""
        return list(self._gateway.identifies) if self._gateway else []

    def identifies_too_soon(self, interval: float = 5.0) -> list[IdentifyRecord]:
        """Accepted IDENTIFYs less than ``interval`` s after their bucket's previous one."""
        return self._gateway.identifies_too_soon(interval) if self._gateway else []

    def session_start_limit(self) -> dict[str, int]:
        """The bot's ``session_start_limit``, as `GET /gateway/bot` reports it."""
        if self._gateway is None:
            raise RuntimeError("the sandbox server is not running")
        return self._gateway.session_start_limit(self.token)

    def set_session_start_limit(self, *, remaining: int, reset_after: float | None = None) -> None:
        """Leave the bot ``remaining`` session starts, resetting in ``reset_after`` seconds
        (None: the window already open, else a full day); raises ValueError beyond 0..total."""
        if self._gateway is None:
            raise RuntimeError("the sandbox server is not running")
        self._gateway.session_starts.set(self.token, remaining=remaining, reset_after=reset_after)

    def sessions(self) -> list[dict[str, Any]]:
        """The gateway sessions (id, shard, intents, seq, connected)."""
        return self._gateway.sessions() if self._gateway else []

    # ------------------------------------------------------------------------------ private

    async def _pluralkit_message(self, request: web.Request) -> web.Response:
        """PluralKit's ``GET /v2/messages/{id}``, for the sandbox's proxy bot."""
        raw = request.match_info["message_id"]
        self.pluralkit_lookups.append(raw)
        record = self.sandbox.proxy_record(int(raw)) if raw.isdigit() else None
        if record is None:
            return web.json_response({"message": "Message not found.", "code": 20006}, status=404)
        return web.json_response(record)

    async def _video(self, request: web.Request) -> web.Response:
        """The transcript service's ``GET /videos/{id}``."""
        video_id = request.match_info["video_id"]
        self.video_lookups.append(video_id)
        video = self.videos.get(video_id)
        if video is None:
            return web.json_response({"error": "no such video"}, status=404)
        return web.json_response(video)

    async def _serve_attachment(self, request: web.Request) -> web.Response:
        if self.attachment_delay:
            await asyncio.sleep(self.attachment_delay)  # a slow CDN
        attachment = self.sandbox.attachment_download(
            snowflake_param(request, "attachment_id"),
            ex=request.query.get("ex", ""),
            hm=request.query.get("hm", ""),
        )
        if attachment is None or attachment.channel_id != snowflake_param(request, "channel_id"):
            return web.Response(status=404, text="This content is no longer available.")
        return web.Response(
            body=attachment.data,
            content_type=attachment.content_type or "application/octet-stream",
        )
