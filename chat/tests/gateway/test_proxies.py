"""The proxy system's API client against the sandbox's PluralKit-shaped API."""

from __future__ import annotations

import time

from chat.gateway.proxies import ProxyResolver
from chat.pipeline.types import ProxyIdentity
from chat.sandbox import SandboxServer
from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox

GENERAL = DEMO_CHANNEL_IDS["general"]
ALICE = DEMO_USER_IDS["alice"]


async def test_a_proxied_message_and_its_original_resolve_to_the_member_once_each():
    async with SandboxServer(demo_sandbox()) as server:
        server.sandbox.add_proxy_member(ALICE, member_id="lilya", name="Lilya", prefix="l:")
        original = server.sandbox.user_says(GENERAL, ALICE, "l: hi")
        plain = server.sandbox.user_says(GENERAL, ALICE, "just me")
        proxied = next(m for m in server.sandbox.channel_messages(GENERAL) if m.get("webhook_id"))
        resolver = ProxyResolver(api_base=server.pluralkit_api_base, requests_per_second=20)
        try:
            started = time.monotonic()
            by_proxied = await resolver.lookup(int(proxied["id"]))
            by_original = await resolver.lookup(int(original["id"]))
            missing = [await resolver.lookup(int(plain["id"])) for _ in range(2)]
            elapsed = time.monotonic() - started
        finally:
            await resolver.aclose()

    assert by_proxied is not None and by_proxied == by_original
    assert by_proxied.identity == ProxyIdentity("lilya", "Lilya", ALICE)
    assert (by_proxied.proxied_id, by_proxied.original_id) == (
        int(proxied["id"]),
        int(original["id"]),
    )
    assert missing == [None, None]
    # One request each: the original came from the cache, and so did the second miss.
    assert server.pluralkit_lookups == [proxied["id"], plain["id"]]
    assert elapsed >= 1 / 20  # the second request waited for the rate (20 a second)
