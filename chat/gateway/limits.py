"""Discord's limits shared by every worker of one bot, through Redis, and the daily session
start limit a worker checks before it connects.

- IDENTIFY: one session start per ``max_concurrency`` bucket every 5 s, across all of a bot's
  processes (bucket = ``shard_id % max_concurrency``). `IdentifyPacer` takes a Redis lock per
  bucket (``SET key NX PX 5500``) before each IDENTIFY; the lock is never released, it lapses
  after 5.5 s, so the next IDENTIFY in that bucket, from any process, waits for it.
- REST: 50 requests per second per bot token, whichever process makes them. `RestRateLimiter`
  keeps a one-second sliding log of request times in a Redis sorted set, read and written by
  one Lua script (atomic, on Redis's own clock), and makes a request wait until the log has
  room.

- Session starts: each IDENTIFY uses one of the bot's daily session starts (1,000 for most bots;
  `GET /gateway/bot`'s ``session_start_limit``). `session_starts_check` refuses to start a
  worker that would need more than are left (docs/operations.md says why it fails, not waits).

The Redis limits are keyed by a hash of the token, so several bots can share one Redis. When
Redis cannot be reached they fall back to pacing this process alone (discord.py's own rules),
and say so. A shared REST proxy in front of Discord (``DISCORD_API_BASE``) can take the REST
limit over instead (docs/operations.md).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

logger = logging.getLogger(__name__)

IDENTIFY_INTERVAL_MS = 5000
"""Discord's pause between two IDENTIFYs of one concurrency bucket."""
IDENTIFY_SLOT_MS = IDENTIFY_INTERVAL_MS + 500
"""How long a bucket's slot is held: half a second over Discord's pause, because an IDENTIFY
reaches Discord some time after its slot was taken (the worker's event loop, the network) and the
next one may reach it sooner. Held for exactly 5 s, two workers starting together in one loaded
process had their IDENTIFYs arrive less than 5 s apart."""
GLOBAL_REST_PER_SECOND = 50
"""Discord's global REST limit per bot token."""
REST_WINDOW_MS = 1250
"""The log counts a second and a quarter: requests counted at Redis reach Discord with some
jitter. A window of exactly one second let up to 55 of 50 in, measured at the client; 1.1 s
let 31 of 30 in, measured at the receiving end, with three workers on a busy host."""

_SLIDING_LOG = """
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local window = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[1]) then
  redis.call('ZADD', KEYS[1], now, ARGV[3])
  redis.call('PEXPIRE', KEYS[1], window)
  return 0
end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return tonumber(oldest[2]) + window - now + 1
"""


class SessionStartLimitReached(Exception):
    """Discord's session start limit leaves fewer starts than the worker has shards to
    identify; the message names the limit, what is left and when it resets."""


def session_starts_check(limit: Mapping[str, int], *, shards: int, now: dt.datetime) -> None:
    """Raise `SessionStartLimitReached` when ``limit`` (``session_start_limit``: ``total``,
    ``remaining``, ``reset_after`` in ms) leaves fewer than ``shards`` session starts;
    ``now`` (aware) dates the reset in the message."""
    remaining, total = limit["remaining"], limit["total"]
    if remaining >= shards:
        return
    reset_after = dt.timedelta(milliseconds=limit["reset_after"])
    resets_at = (now + reset_after).astimezone(dt.UTC).replace(microsecond=0)
    minutes = int(reset_after.total_seconds() // 60)
    raise SessionStartLimitReached(
        f"Discord's session start limit: {remaining} of {total} session starts left, and this "
        f"worker must identify {shards} shard{'s' if shards != 1 else ''}. The limit resets in "
        f"{minutes // 60} h {minutes % 60:02d} min (at {resets_at.isoformat()}); start fewer "
        "shards now, or start the worker after the reset."
    )


def token_key(token: str) -> str:
    """A short name for the bot token in Redis keys (the token itself never leaves the
    process)."""
    return hashlib.sha256(token.encode()).hexdigest()[:16]


class IdentifyPacer:
    """Waits before each IDENTIFY until this shard's concurrency bucket is free, across every
    process of the bot (``max_concurrency`` from the command line, or None: the client asks
    ``GET /gateway/bot`` before its first IDENTIFY)."""

    def __init__(
        self,
        redis: Redis,
        *,
        token: str,
        max_concurrency: int | None = None,
        interval_ms: int = IDENTIFY_SLOT_MS,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        if max_concurrency is not None and max_concurrency < 1:
            raise ValueError(f"max_concurrency must be at least 1, not {max_concurrency}")
        self._redis = redis
        self._prefix = f"discord:{token_key(token)}:identify"
        self.max_concurrency = max_concurrency
        self.interval_ms = interval_ms
        self._sleep = sleep
        self._holder = uuid.uuid4().hex

    def bucket(self, shard_id: int) -> int:
        return shard_id % (self.max_concurrency or 1)

    async def wait_turn(self, shard_id: int, *, initial: bool = False) -> None:
        """Return once this process holds the bucket's IDENTIFY slot (without Redis: after
        the slot's length, unless this is the process's first IDENTIFY, as discord.py paces
        alone)."""
        key = f"{self._prefix}:{self.bucket(shard_id)}"
        while True:
            try:
                if await self._redis.set(key, self._holder, nx=True, px=self.interval_ms):
                    return
                wait_ms = await self._redis.pttl(key)
            except RedisError:
                logger.warning("Redis unreachable: pacing IDENTIFY in this process only")
                if not initial:
                    await self._sleep(self.interval_ms / 1000)
                return
            await self._sleep(max(wait_ms, 10) / 1000)


class RestRateLimiter:
    """Lets at most ``per_second`` REST requests of the bot start in any second, counted
    across every process that shares the Redis."""

    def __init__(
        self,
        redis: Redis,
        *,
        token: str,
        per_second: int = GLOBAL_REST_PER_SECOND,
        window_ms: int = REST_WINDOW_MS,
        sleep: Callable[[float], Awaitable[Any]] = asyncio.sleep,
    ) -> None:
        self._redis = redis
        self._key = f"discord:{token_key(token)}:rest"
        self.per_second = per_second
        self.window_ms = window_ms
        self._sleep = sleep
        self._script = redis.register_script(_SLIDING_LOG)
        self._warned = False

    async def acquire(self) -> None:
        """Wait until a request may start now, and count it."""
        while True:
            try:
                wait_ms = await self._script(
                    keys=[self._key], args=[self.per_second, self.window_ms, uuid.uuid4().hex]
                )
            except RedisError:
                if not self._warned:
                    logger.warning("Redis unreachable: REST requests not counted across workers")
                    self._warned = True
                return
            if not wait_ms:
                return
            await self._sleep(int(wait_ms) / 1000)


@dataclass
class SharedLimits:
    """The limits a worker shares with the bot's other processes, over one Redis connection."""

    redis: Redis
    identify: IdentifyPacer
    rest: RestRateLimiter

    @classmethod
    def from_url(
        cls,
        url: str,
        *,
        token: str,
        max_concurrency: int | None = None,
        rest_per_second: int = GLOBAL_REST_PER_SECOND,
    ) -> SharedLimits:
        redis = Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
        return cls(
            redis=redis,
            identify=IdentifyPacer(redis, token=token, max_concurrency=max_concurrency),
            rest=RestRateLimiter(redis, token=token, per_second=rest_per_second),
        )

    async def close(self) -> None:
        await self.redis.aclose()
