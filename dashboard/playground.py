"""The playground's link to the local Discord sandbox, through its control API (the
`SandboxControl` port `chat.runtime.sandbox_control` provides).

The sandbox is where ``DISCORD_API_BASE`` points when it runs (``make run`` without a
``DISCORD_TOKEN``): its control API answers at the same host under ``/_sandbox``. Against the
real Discord there is no control API, and the playground is not offered.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import yarl

from chat.ports import SandboxRefused
from chat.runtime import sandbox_control

PROBE_SECONDS = 2.0


class SandboxUnavailable(Exception):
    """The sandbox did not take the message (not running, or it refused)."""


def control_base(api_base: str) -> str:
    """The sandbox's base URL for a REST base such as ``http://127.0.0.1:8765/api/v10``."""
    url = yarl.URL(api_base)
    return str(url.with_path("/").with_query(None)).rstrip("/")


LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


async def sandbox_world(api_base: str) -> dict[str, Any] | None:
    """The sandbox's world (guilds, channels, members); None when no sandbox answers. Only a
    loopback ``api_base`` is asked (the sandbox binds to localhost; Discord has no such API)."""
    if yarl.URL(api_base).host not in LOOPBACK:
        return None
    try:
        async with asyncio.timeout(PROBE_SECONDS), sandbox_control(control_base(api_base)) as api:
            return await api.world()
    except (TimeoutError, OSError, aiohttp.ClientError, SandboxRefused, ValueError):
        return None  # nothing answers, or something that is not the sandbox


async def say(api_base: str, channel_id: int, author_id: int, content: str) -> dict[str, Any]:
    """Post ``content`` as ``author_id`` in the sandbox channel; returns the message.

    Raises `SandboxUnavailable` when the sandbox is gone or refuses."""
    try:
        async with sandbox_control(control_base(api_base)) as api:
            return await api.say(channel_id, author_id, content)
    except SandboxRefused as error:
        raise SandboxUnavailable(f"the sandbox refused: {error}") from None
    except (OSError, aiohttp.ClientError) as error:
        raise SandboxUnavailable(f"the sandbox is not reachable: {error}") from None


def channels(world: dict[str, Any]) -> list[tuple[int, str]]:
    """(channel id, ``Guild · #name``) of every sandbox text channel."""
    return [
        (int(c["id"]), f"{g['name']} · #{c['name']}")
        for g in world.get("guilds", [])
        for c in g.get("channels", [])
    ]


def users(world: dict[str, Any]) -> list[tuple[int, str]]:
    """(user id, name) of the demo users (the bot excluded), in the sandbox's order."""
    seen: dict[int, str] = {}
    for guild in world.get("guilds", []):
        for member in guild.get("members", []):
            user = member["user"]
            if user.get("bot"):
                continue
            seen.setdefault(int(user["id"]), user.get("global_name") or user["username"])
    return list(seen.items())
