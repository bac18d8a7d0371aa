"""Ingest throughput: a 5,000-message burst from the gateway's hand-off to the unread pools.

Run: ``.venv/bin/python -m benchmarks.ingest`` (``make bench`` runs it).

The worker's real path, minus the websocket: `Intake.put` for every message (what the gateway
handler does), the intake's batched writer into the persisted event queue, and the scheduler's
set-based consumer moving them into the unread pools, on a throwaway test database of the
configured kind (``DATABASE_URL``: PostgreSQL in CI). Figures: messages per second from the
first hand-off to the last message pooled, the 99th percentile of each message's time from
hand-off to pool, and how many were lost. Baseline, same run: one bulk insert of the same
number of queue rows, the floor any ingest path pays.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

from benchmarks.table import Row, emit

BURST = 5000
CHANNELS = 20
PACE = 1000


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botproject.settings_test")
    import django

    django.setup()
    from django.db import connection

    if connection.vendor != "sqlite":  # its own database, never a test run's
        connection.settings_dict["TEST"]["NAME"] = f"bench_ingest_{os.getpid()}"
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        burst = asyncio.run(_measure(pace=None))
        paced = asyncio.run(_measure(pace=PACE))
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)
    if "--rows" in sys.argv:
        emit(
            [
                Row(
                    f"ingest, {BURST} messages at {PACE:,} msg/s into the unread pools",
                    f"{paced['rate']:,.0f} msg/s, p99 {paced['p99']:.1f} ms, lost {paced['lost']}",
                    f"bulk insert {burst['bulk']:,.0f} rows/s",
                    "≥ 1,000 msg/s, p99 ≤ 50 ms, 0 lost",
                ),
                Row(
                    f"ingest, {BURST} messages at once",
                    f"{burst['rate']:,.0f} msg/s, p99 {burst['p99']:.0f} ms, lost {burst['lost']}",
                ),
            ]
        )
        return
    print(f"ingest of {BURST} messages over {CHANNELS} channels ({connection.vendor}):")
    for label, figures in (("all at once", burst), (f"arriving at {PACE:,} msg/s", paced)):
        print(
            f"  {label}: {figures['rate']:,.0f} msg/s into the unread pools, "
            f"p99 {figures['p99']:.1f} ms from hand-off to pool, lost {figures['lost']}"
        )
    print(f"  baseline, one bulk insert of {BURST} queue rows: {burst['bulk']:,.0f} rows/s")


async def _measure(*, pace: int | None) -> dict[str, float]:
    """One run; ``pace`` messages per second arrive evenly (None: all at once)."""
    from asgiref.sync import sync_to_async

    from chat.loop.ingress import OwnIdentity, event_queue_consume
    from chat.loop.intake import Intake
    from chat.models import EventQueue, UnreadEvent
    from chat.tests.factories import message

    await sync_to_async(_clear)()
    burst = [message(content=f"m{n}", channel_id=1000 + n % CHANNELS) for n in range(BURST)]
    handed: dict[int, float] = {}
    pooled: dict[int, float] = {}
    stored = asyncio.Event()
    intake = Intake(stored=stored.set, read_after=_no_history)
    writer = asyncio.create_task(intake.run())

    async def consume() -> None:
        own = OwnIdentity(bot_user_id=1)
        while len(pooled) < BURST:
            await stored.wait()
            stored.clear()
            while True:
                moved = await sync_to_async(event_queue_consume)(own=own)
                now = time.perf_counter()
                for _, msg in moved.unread:
                    pooled[msg.id] = now
                if not moved.full:
                    break

    consumer = asyncio.create_task(consume())
    started = time.perf_counter()
    for n, msg in enumerate(burst):
        if pace is not None:
            await asyncio.sleep(max(0.0, started + n / pace - time.perf_counter()))
        elif n % 250 == 0:
            await asyncio.sleep(0)  # the gateway hands messages over as they arrive
        handed[msg.id] = time.perf_counter()
        intake.put(msg, 7)
    await asyncio.wait_for(consumer, 120)
    finished = max(pooled.values())
    writer.cancel()
    await asyncio.gather(writer, return_exceptions=True)

    latencies = sorted((pooled[i] - handed[i]) * 1000 for i in handed)
    lost = BURST - await sync_to_async(UnreadEvent.objects.count)()

    await sync_to_async(EventQueue.objects.all().delete)()
    rows = [
        EventQueue(channel_id=m.channel_id, message_id=m.id, guild_id=7, event={}) for m in burst
    ]
    bulk_started = time.perf_counter()
    await sync_to_async(EventQueue.objects.bulk_create)(rows)
    bulk = BURST / (time.perf_counter() - bulk_started)
    from django.db import connections

    await sync_to_async(connections.close_all)()  # the worker thread's connection, too
    return {
        "rate": BURST / (finished - started),
        "p99": statistics.quantiles(latencies, n=100)[98],
        "lost": lost,
        "bulk": bulk,
    }


def _clear() -> None:
    from chat.models import EventQueue, UnreadEvent

    EventQueue.objects.all().delete()
    UnreadEvent.objects.all().delete()


async def _no_history(channel_id: int, after_id: int, limit: int) -> list:
    return []


if __name__ == "__main__":
    sys.exit(main())
