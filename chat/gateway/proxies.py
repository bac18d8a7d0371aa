"""Proxied members (PluralKit-style): which webhook messages speak for a member of a system.

A proxy bot reposts a user's message through a webhook, shown as one of their system's
members, and deletes the original. Its API answers ``GET {PLURALKIT_API_BASE}/messages/{id}``
for either id with the member, the sender (the account behind the member) and both ids;
any other message is a 404. `ProxyResolver` asks it, caches the answers (bounded; "not a
proxied message" only for a minute, since the proxy may not have recorded a fresh message
yet) and keeps to a request rate (PluralKit allows about two a second). Without
``PLURALKIT_API_BASE`` there is no resolver and nothing is looked up.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

import httpx
from pydantic import BaseModel, ValidationError

from chat.caches import BoundedCache
from chat.llm.tls import tls_context
from chat.pipeline.types import ProxyIdentity

logger = logging.getLogger(__name__)

CACHE_SIZE = 10_000
NOT_PROXIED_TTL = 60.0


class _Member(BaseModel):
    id: str
    name: str
    display_name: str | None = None


class _MessageRecord(BaseModel):
    """The part of PluralKit's message object this product reads."""

    id: int
    original: int | None = None
    sender: int
    member: _Member | None = None


@dataclass(frozen=True, slots=True)
class ProxyRecord:
    """A proxied message as the proxy system attests it: the webhook message, the user's
    original it replaced, and who speaks (member) for whom (sender)."""

    proxied_id: int
    original_id: int | None
    identity: ProxyIdentity


class ProxyResolver:
    """Looks messages up in a proxy system's API: cached, rate-limited, never raising."""

    def __init__(
        self,
        *,
        api_base: str,
        requests_per_second: float = 2.0,
        grace_seconds: float = 1.0,
        timeout: float = 5.0,
    ) -> None:
        self.api_base = api_base.rstrip("/")
        self.grace_seconds = grace_seconds
        """How old a user's message must be before asking whether a proxy replaced it."""
        self._interval = 1.0 / requests_per_second
        self._http = httpx.AsyncClient(timeout=timeout, verify=tls_context())
        self._gate = asyncio.Lock()
        self._last_request = 0.0
        self._found: BoundedCache[int, ProxyRecord] = BoundedCache(CACHE_SIZE)
        self._not_found: BoundedCache[int, float] = BoundedCache(CACHE_SIZE)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def lookup(self, message_id: int) -> ProxyRecord | None:
        """The proxy record of ``message_id`` (the proxied message or its original); None when
        it is not a proxied message or the API cannot be reached (then not cached)."""
        if (found := self._found.get(message_id)) is not None:
            return found
        missed_at = self._not_found.peek(message_id)
        if missed_at is not None and time.monotonic() - missed_at < NOT_PROXIED_TTL:
            return None
        record = await self._fetch(message_id)
        if record is None:
            return None
        if record.proxied_id < 0:  # the API said: not a proxied message
            self._remember_miss(message_id)
            return None
        for key in {record.proxied_id, record.original_id, message_id} - {None}:
            self._found.put(key, record)
        return record

    def cached(self, message_id: int) -> ProxyRecord | None:
        """The record already known for ``message_id``, without asking."""
        return self._found.peek(message_id)

    async def _fetch(self, message_id: int) -> ProxyRecord | None:
        async with self._gate:
            wait = self._last_request + self._interval - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            self._last_request = time.monotonic()
            try:
                response = await self._http.get(f"{self.api_base}/messages/{message_id}")
            except httpx.HTTPError as error:
                logger.warning("proxy lookup of %s failed: %s", message_id, error)
                return None
        if response.status_code == 404:
            return ProxyRecord(proxied_id=-1, original_id=None, identity=_NOBODY)
        if response.status_code != 200:
            logger.warning("proxy lookup of %s answered %s", message_id, response.status_code)
            return None
        try:
            data = _MessageRecord.model_validate_json(response.content)
        except ValidationError as error:
            logger.warning("proxy lookup of %s: unexpected answer: %s", message_id, error)
            return None
        if data.member is None:
            return ProxyRecord(proxied_id=-1, original_id=None, identity=_NOBODY)
        return ProxyRecord(
            proxied_id=data.id,
            original_id=data.original,
            identity=ProxyIdentity(
                member_id=data.member.id,
                member_name=data.member.display_name or data.member.name,
                host_user_id=data.sender,
            ),
        )

    def _remember_miss(self, message_id: int) -> None:
        self._not_found.put(message_id, time.monotonic())


_NOBODY = ProxyIdentity(member_id="", member_name="", host_user_id=0)
