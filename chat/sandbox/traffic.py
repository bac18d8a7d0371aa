"""The REST front door: request counts, injected faults and Discord-style rate limits.

Every REST request (webhooks included) is counted by method and route template, then either
answered by an injected fault, refused because its rate-limit bucket is exhausted, or handled.
Each response carries the `X-RateLimit-*` headers of its bucket, as Discord's do.

Buckets follow Discord's model loosely: one per route template and major parameter (channel,
guild or webhook), `limit` requests per fixed `window`. A 429 carries `retry_after` in the body,
`Retry-After`, `X-RateLimit-Scope` and a `Via` header (discord.py treats a 429 without `Via` as
a Cloudflare ban and gives up instead of retrying).
"""

from __future__ import annotations

import asyncio
import fnmatch
import hashlib
import math
import time
from collections import Counter, deque
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Literal, TypeVar

from aiohttp import web

from chat.sandbox.responses import json_response

RouteKey = tuple[str, str]
"""(HTTP method, route template relative to the API base).

For example ("POST", "/channels/{channel_id}/messages").
"""

RateLimitScope = Literal["user", "shared", "global"]
"""Whose limit a 429 reports: the bot's own, a resource's shared one, or the global one."""

_MAJOR_PARAMETERS = ("channel_id", "guild_id", "webhook_id")
REQUEST_LOG_MAX = 50_000
"""How many of the newest REST requests `Traffic.requests` keeps (a long demo stays bounded)."""
_MAX_BUCKETS = 10_000
"""Past this many buckets, idle ones are forgotten (paths of unknown routes make new ones)."""


@dataclass(frozen=True, slots=True)
class RateLimitPolicy:
    """`limit` requests per bucket per `window` seconds (generous by default, so tests and
    demos never wait; lower it to load-test the bot's rate-limit handling)."""

    limit: int = 50
    window: float = 1.0


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One REST request as it arrived: when (the traffic clock, monotonic seconds), its
    method, route template and concrete path (relative to the API base)."""

    at: float
    method: str
    route: str
    path: str


@dataclass(slots=True)
class Fault:
    """An injected failure: the next `remaining` requests matching it get `status`."""

    method: str
    path_pattern: str
    status: int
    remaining: int
    retry_after: float
    scope: RateLimitScope

    def matches(self, method: str, route: str, path: str) -> bool:
        return _matches(self.method, self.path_pattern, method, route, path)


@dataclass(slots=True)
class Hold:
    """A held response: the next `remaining` matching requests are handled (their effects
    happen and are dispatched) but answered only `seconds` later — a client that dies in that
    window never learns its request succeeded."""

    method: str
    path_pattern: str
    seconds: float
    remaining: int

    def matches(self, method: str, route: str, path: str) -> bool:
        return _matches(self.method, self.path_pattern, method, route, path)


def _matches(method_pattern: str, path_pattern: str, method: str, route: str, path: str) -> bool:
    """`method` equal (or the pattern's is "*"), and the pattern equal to the route template
    or matching the concrete path as a shell glob ("/channels/*/messages")."""
    if method_pattern not in ("*", method):
        return False
    return path_pattern == route or fnmatch.fnmatchcase(path, path_pattern)


_Matchable = TypeVar("_Matchable", Fault, Hold)


def _take(items: list[_Matchable], method: str, route: str, path: str) -> _Matchable | None:
    """The first of ``items`` matching the request, used once (removed when used up)."""
    for item in items:
        if item.matches(method, route, path):
            item.remaining -= 1
            if item.remaining == 0:
                items.remove(item)
            return item
    return None


class _Bucket:
    def __init__(self, route_key: str, policy: RateLimitPolicy) -> None:
        # Like Discord's, the hash names the route's limit; the major parameter (which channel)
        # tells apart buckets that share it, so clients key buckets by (hash, major parameter).
        self.hash = hashlib.sha1(route_key.encode()).hexdigest()[:16]
        self._policy = policy
        self._window_ends = 0.0
        self._used = 0

    def take(self, now: float) -> float | None:
        """Spend one request at monotonic time `now`; `None` if allowed, else the seconds until
        the bucket resets."""
        if now >= self._window_ends:
            self._window_ends, self._used = now + self._policy.window, 0
        self._used += 1
        return None if self._used <= self._policy.limit else self._window_ends - now

    def is_idle(self, now: float) -> bool:
        """Whether the bucket's window has ended (forgetting it changes nothing)."""
        return now >= self._window_ends

    def headers(self, now: float, wall_now: float) -> dict[str, str]:
        # Rounded up to the millisecond: a client that waits exactly this long must find the
        # window reset.
        reset_after = math.ceil(max(0.0, self._window_ends - now) * 1000) / 1000
        return {
            "X-RateLimit-Limit": str(self._policy.limit),
            "X-RateLimit-Remaining": str(max(0, self._policy.limit - self._used)),
            "X-RateLimit-Reset": f"{wall_now + reset_after:.3f}",
            "X-RateLimit-Reset-After": f"{reset_after:.3f}",
            "X-RateLimit-Bucket": self.hash,
        }


def _too_many_requests(retry_after: float, scope: RateLimitScope) -> web.Response:
    body = {
        "message": "You are being rate limited.",
        "retry_after": retry_after,
        "global": scope == "global",
    }
    response = json_response(body, status=429)
    response.headers.update(
        {
            "Retry-After": str(math.ceil(retry_after)),
            "X-RateLimit-Scope": scope,
            "Via": "1.1 google",
        }
    )
    return response


class Traffic:
    """Counts, faults and rate limits for one REST application (see the module docstring).

    `api_prefix` is stripped from paths and route templates, so keys and fault patterns read
    like Discord's documentation ("/channels/{channel_id}/messages").
    """

    def __init__(
        self,
        *,
        api_prefix: str,
        policy: RateLimitPolicy,
        clock: Callable[[], float] = time.monotonic,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self._prefix = api_prefix
        self._policy = policy
        self._clock = clock
        self._wall_clock = wall_clock
        self._counts: Counter[RouteKey] = Counter()
        self._log: deque[RequestRecord] = deque(maxlen=REQUEST_LOG_MAX)
        self._faults: list[Fault] = []
        self._holds: list[Hold] = []
        self._buckets: dict[str, _Bucket] = {}

    @property
    def request_counts(self) -> Mapping[RouteKey, int]:
        """Requests seen so far (faulted and rate-limited ones included), by route."""
        return dict(self._counts)

    def requests(self, method: str | None = None, route: str | None = None) -> list[RequestRecord]:
        """The REST requests so far (the newest `REQUEST_LOG_MAX`), in arrival order, or
        those with this method and route template (edits of the bot's messages:
        ``("PATCH", "/channels/{channel_id}/messages/{message_id}")``)."""
        return [
            r
            for r in self._log
            if (method is None or r.method == method) and (route is None or r.route == route)
        ]

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
        """Answer the next `count` requests matching (`method`, `path_pattern`) with `status`.

        `path_pattern` is a route template ("/channels/{channel_id}/messages") or a glob over
        the concrete path ("/channels/*/messages"), both relative to the API base. A 429 tells
        the client to retry after `retry_after` seconds (default 1) in `scope` ("user",
        "shared" or "global"); other statuses answer Discord's plain error body.
        """
        if not 400 <= status <= 599:
            raise ValueError(f"status must be an HTTP error (400-599), not {status}")
        if count < 1:
            raise ValueError(f"count must be at least 1, not {count}")
        retry = 1.0 if retry_after is None else retry_after
        self._faults.append(Fault(method.upper(), path_pattern, status, count, retry, scope))

    def hold_responses(
        self, method: str, path_pattern: str, seconds: float, *, count: int = 1
    ) -> None:
        """Handle the next `count` requests matching (`method`, `path_pattern`) as usual, then
        wait `seconds` before answering (patterns as for `inject_fault`)."""
        if count < 1 or seconds <= 0:
            raise ValueError("count must be at least 1 and seconds positive")
        self._holds.append(Hold(method.upper(), path_pattern, seconds, count))

    def clear_faults(self) -> None:
        self._faults.clear()
        self._holds.clear()

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        route = self.route_template(request)
        path = request.path.removeprefix(self._prefix)
        self._counts[(request.method, route)] += 1
        now = self._clock()
        self._log.append(RequestRecord(now, request.method, route, path))
        bucket = self._bucket(request, route, now)
        fault = self._take_fault(request.method, route, path)
        if fault is not None:
            response: web.StreamResponse = self._fault_response(fault)
        elif (retry_after := bucket.take(now)) is not None:
            response = _too_many_requests(retry_after, "user")
        else:
            response = await handler(request)
            hold = self._take_hold(request.method, route, path)
            if hold is not None:
                await asyncio.sleep(hold.seconds)
        response.headers.update(bucket.headers(now, self._wall_clock()))
        return response

    def route_template(self, request: web.Request) -> str:
        """The matched route's template relative to the API base; the path if none matched."""
        resource = request.match_info.route.resource
        template = resource.canonical if resource is not None else request.path
        return template.removeprefix(self._prefix)

    def _bucket(self, request: web.Request, route: str, now: float) -> _Bucket:
        route_key = f"{request.method} {route}"
        major = "+".join(request.match_info.get(name, "") for name in _MAJOR_PARAMETERS)
        key = f"{route_key} {major}"
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= _MAX_BUCKETS:
                self._buckets = {k: b for k, b in self._buckets.items() if not b.is_idle(now)}
            bucket = self._buckets[key] = _Bucket(route_key, self._policy)
        return bucket

    def _take_hold(self, method: str, route: str, path: str) -> Hold | None:
        return _take(self._holds, method, route, path)

    def _take_fault(self, method: str, route: str, path: str) -> Fault | None:
        return _take(self._faults, method, route, path)

    @staticmethod
    def _fault_response(fault: Fault) -> web.Response:
        if fault.status == 429:
            return _too_many_requests(fault.retry_after, fault.scope)
        phrase = HTTPStatus(fault.status).phrase
        body = {"message": f"{fault.status}: {phrase}", "code": 0}
        return json_response(body, status=fault.status)
