"""Discord's limits shared through Redis: one IDENTIFY per concurrency bucket per interval, and
the global REST limit counted across processes."""

from __future__ import annotations

import asyncio
import contextvars
import uuid

import pytest
from django.conf import settings
from redis.asyncio import Redis

from chat.gateway.limits import IDENTIFY_INTERVAL_MS, IdentifyPacer, RestRateLimiter


@pytest.fixture
async def redis():
    client = Redis.from_url(settings.REDIS_URL)
    yield client
    await client.aclose()


@pytest.fixture
def token() -> str:
    return f"token-{uuid.uuid4().hex}"


class Sleeps:
    """Real sleeps, counted: which waits a pacer asked for."""

    def __init__(self) -> None:
        self.count = 0

    async def __call__(self, seconds: float) -> None:
        self.count += 1
        await asyncio.sleep(seconds)


async def test_a_second_process_waits_for_the_bucket_and_another_bucket_does_not(redis, token):
    sleeps = Sleeps()
    first = IdentifyPacer(redis, token=token, max_concurrency=2, interval_ms=400, sleep=sleeps)
    second = IdentifyPacer(redis, token=token, max_concurrency=2, interval_ms=400, sleep=sleeps)
    loop = asyncio.get_running_loop()

    started = loop.time()
    await first.wait_turn(0, initial=True)
    await second.wait_turn(1, initial=True)  # bucket 1: free
    assert sleeps.count == 0
    await second.wait_turn(2)  # bucket 0 again: waits for the first's slot to lapse

    assert sleeps.count >= 1
    assert loop.time() - started >= 0.39


async def test_a_bucket_is_held_longer_than_discords_pause(redis, token):
    """An IDENTIFY reaches Discord a little after its slot is taken; the next one, from any
    process, must not reach it less than Discord's 5 s later."""
    pacer = IdentifyPacer(redis, token=token, max_concurrency=1)

    await pacer.wait_turn(0, initial=True)

    held_ms = await redis.pttl(f"{pacer._prefix}:0")
    assert held_ms > IDENTIFY_INTERVAL_MS + 250


async def test_the_rest_limit_is_shared_by_every_process_of_the_bot(redis, token):
    waited: list[int] = []  # per request: how many times the limiter made it wait

    def limiter() -> RestRateLimiter:
        async def sleep(seconds: float) -> None:
            waited[current.get()] += 1
            await asyncio.sleep(seconds)

        return RestRateLimiter(redis, token=token, per_second=5, window_ms=300, sleep=sleep)

    current: contextvars.ContextVar[int] = contextvars.ContextVar("request")
    limiters = [limiter(), limiter()]
    loop = asyncio.get_running_loop()
    started = loop.time()
    done: list[float] = []

    async def request(n: int) -> None:
        current.set(n)
        await limiters[n % 2].acquire()
        done.append(loop.time() - started)

    waited.extend([0] * 12)
    await asyncio.gather(*(request(n) for n in range(12)))

    done.sort()
    assert sum(1 for n in waited if n == 0) == 5  # five at once, whichever process asks
    assert done[5] >= 0.29  # the sixth waits for the window
    assert done[10] >= 0.59


async def test_a_different_bot_token_has_limits_of_its_own(redis, token):
    mine = RestRateLimiter(redis, token=token, per_second=1, window_ms=5000)
    other = RestRateLimiter(redis, token=f"{token}-other", per_second=1, window_ms=5000)
    await mine.acquire()

    await asyncio.wait_for(other.acquire(), timeout=1)
