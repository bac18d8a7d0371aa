"""Point discord.py at a Discord-compatible server (the local sandbox, or a proxy).

discord.py has no setting for this; it reads two class attributes, both process-wide:

- `discord.http.Route.BASE`: the REST base. Each `Route` copies it when built, so every REST
  call made after `configure_discord_endpoints` (webhook calls included, which build the same
  `Route`) goes to `api_base`.
- `discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY`: the websocket URL. `Client.connect` opens
  its first connection there without asking REST; `AutoShardedClient` does too when given a
  `shard_count`; and after INVALID_SESSION discord.py starts over from it. Only
  `AutoShardedClient` without `shard_count` asks `GET /gateway/bot` for the URL. Resumes go to
  READY's `resume_gateway_url`, which the server chooses.

Call it before the client logs in. `gateway_url=None` restores Discord's own gateway, so with a
non-Discord `api_base` only an `AutoShardedClient` without `shard_count` reaches the server's
gateway (through `/gateway/bot`); plain clients need `gateway_url`.
"""

from __future__ import annotations

import discord.gateway
import discord.http
import yarl

DISCORD_API_BASE = "https://discord.com/api/v10"
DISCORD_GATEWAY_URL = "wss://gateway.discord.gg/"


def configure_discord_endpoints(*, api_base: str, gateway_url: str | None) -> None:
    """Make discord.py use `api_base` for REST and `gateway_url` for the gateway.

    `api_base` is an http(s) URL ending in the API version (`http://127.0.0.1:8765/api/v10`);
    `gateway_url` a ws(s) URL, or `None` for Discord's gateway. Raises `ValueError` naming the
    argument when a URL has the wrong scheme or no host.
    """
    rest = yarl.URL(api_base.rstrip("/"))
    if rest.scheme not in ("http", "https") or not rest.host:
        raise ValueError(f"api_base must be an http(s) URL with a host, not {api_base!r}")
    gateway = yarl.URL(gateway_url or DISCORD_GATEWAY_URL)
    if gateway.scheme not in ("ws", "wss") or not gateway.host:
        raise ValueError(f"gateway_url must be a ws(s) URL with a host, not {gateway_url!r}")
    discord.http.Route.BASE = str(rest)
    discord.gateway.DiscordWebSocket.DEFAULT_GATEWAY = gateway
