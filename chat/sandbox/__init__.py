"""A local Discord-compatible server (REST v10 + gateway) for the real discord.py client.

It is the demo server (`manage.py runsandbox`), the end-to-end test harness and the load
harness. Modules:

- `state`     the world (`Sandbox`): users, guilds, channels, messages, reactions, webhooks
- `payloads`  Discord's JSON shapes for the world's records
- `schemas`   request bodies and gateway payloads, validated with Discord's error codes
- `rest`      the REST routes; `traffic` their front door (counts, faults, rate limits)
- `gateway`   the websocket gateway: sessions, sequence numbers, resume, sharding, intents
- `control`   the `/_sandbox` HTTP API and its client, for tests and other processes
- `oauth`     Discord's OAuth2 code flow: the consent page, tokens, ``users/@me/guilds``
- `server`    `SandboxServer`, serving all of the above on one port
- `demo`      the demo world `runsandbox` serves

Nothing here imports discord.py.
"""

from __future__ import annotations

from chat.sandbox.gateway import GatewaySettings
from chat.sandbox.records import Upload
from chat.sandbox.server import SandboxServer
from chat.sandbox.state import Sandbox, avatar_hash
from chat.sandbox.traffic import RateLimitPolicy

__all__ = [
    "GatewaySettings",
    "RateLimitPolicy",
    "Sandbox",
    "SandboxServer",
    "Upload",
    "avatar_hash",
]
