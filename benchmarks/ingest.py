"""Ingest throughput: a 5,000-message burst from the gateway's hand-off into the event queue,
and on into the unread pools.

Run: ``.venv/bin/python -m benchmarks.ingest`` (``make bench`` runs it).

The worker's real path, minus the websocket: `Intake.put` for every message (what the gateway
handler does), and the intake's batched writer, which stores each message's queue row and moves
it into its channel's unread pool in one transaction, on a throwaway test database of the
configured kind (``DATABASE_URL``: PostgreSQL in CI). Figures, for each of the two stages:
messages per second from the first hand-off to the last message stored there, the 99th
percentile of each message's time from hand-off to that stage, and how many never reached it.
A message is in the queue once the writer's `event_queue.event_ingest_many` call holding it has
returned (its rows committed): the benchmark times that call by wrapping it. Baseline, same
run: one bulk insert of the same number of queue rows, the floor any ingest path pays.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence

from benchmarks.table import Row, emit
from chat.pipeline.snowflakes import snowflake_at
from chat.pipeline.types import Author, HistoryMessage

BURST = 5000
CHANNELS = 20
PACE = 1250


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botproject.settings_test")
    import django

    django.setup()
    from django.db import connection

    if connection.vendor != "sqlite":  # its own database, never a test run's
        connection.settings_dict["TEST"]["NAME"] = f"bench_ingest_{os.getpid()}"
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    from chat.worker import freeze_startup_heap

    freeze_startup_heap()  # as ``runbot`` does before it builds its client
    try:
        burst = asyncio.run(_measure(pace=None))
        paced = asyncio.run(_measure(pace=PACE))
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)
    if "--rows" in sys.argv:
        goal = "≥ 1,000 msg/s, p99 ≤ 50 ms, 0 lost"
        emit(
            [
                Row(
                    f"ingest, {BURST} messages at {PACE:,} msg/s, into the event queue",
                    _figures(paced, "queue"),
                    f"bulk insert {burst['bulk']:,.0f} rows/s",
                    goal,
                ),
                Row(
                    f"ingest, {BURST} messages at {PACE:,} msg/s, into the unread pools",
                    _figures(paced, "pool"),
                    f"bulk insert {burst['bulk']:,.0f} rows/s",
                    goal,
                ),
                Row(
                    f"ingest, {BURST} messages at once, into the event queue",
                    _figures(burst, "queue"),
                ),
                Row(
                    f"ingest, {BURST} messages at once, into the unread pools",
                    _figures(burst, "pool"),
                ),
            ]
        )
        return
    print(f"ingest of {BURST} messages over {CHANNELS} channels ({connection.vendor}):")
    for label, figures in (("all at once", burst), (f"arriving at {PACE:,} msg/s", paced)):
        print(f"  {label}:")
        for stage, where in (("queue", "the event queue"), ("pool", "the unread pools")):
            print(f"    into {where}: {_figures(figures, stage)}")
    print(f"  baseline, one bulk insert of {BURST} queue rows: {burst['bulk']:,.0f} rows/s")


def _figures(figures: dict[str, float], stage: str) -> str:
    return (
        f"{figures[f'{stage}_rate']:,.0f} msg/s, p99 {figures[f'{stage}_p99']:.1f} ms, "
        f"lost {figures[f'{stage}_lost']:.0f}"
    )


@contextlib.contextmanager
def _queue_writes_timed(queued: dict[int, float]) -> Iterator[None]:
    """While open, record in ``queued`` when each message's queue row was committed: the
    intake's writer calls `event_queue.event_ingest_many` through the module, so wrapping the
    module's function times every batch it writes."""
    from chat.services import event_queue

    write = event_queue.event_ingest_many

    def timed(*, batch: Sequence[tuple[HistoryMessage, int | None]], **where):
        stored = write(batch=batch, **where)
        now = time.perf_counter()
        for message, _ in batch:
            queued.setdefault(message.id, now)
        return stored

    event_queue.event_ingest_many = timed
    try:
        yield
    finally:
        event_queue.event_ingest_many = write


def _message(n: int) -> HistoryMessage:
    """The ``n``-th message of the burst, in one of `CHANNELS` channels, by one author."""
    now = dt.datetime.now(dt.UTC)
    return HistoryMessage(
        id=snowflake_at(now) + n,
        channel_id=1000 + n % CHANNELS,
        author=Author(id=4242, display_name="bench"),
        content=f"m{n}",
        created_at=now,
    )


async def _measure(*, pace: int | None) -> dict[str, float]:
    """One run; ``pace`` messages per second arrive evenly (None: all at once)."""
    from asgiref.sync import sync_to_async

    from chat.loop.intake import Intake
    from chat.models import EventQueue, UnreadEvent
    from chat.services.event_queue import Consumed, OwnIdentity

    await sync_to_async(_clear)()
    burst = [_message(n) for n in range(BURST)]
    handed: dict[int, float] = {}
    queued: dict[int, float] = {}
    pooled: dict[int, float] = {}
    everything = asyncio.Event()

    def stored(moved: Consumed) -> None:
        now = time.perf_counter()
        for _, msg in moved.unread:
            pooled[msg.id] = now
        if len(pooled) >= BURST:
            everything.set()

    own = OwnIdentity(bot_user_id=1)
    intake = Intake(stored=stored, read_after=_no_history, own=lambda: own)
    writer = asyncio.create_task(intake.run())

    with _queue_writes_timed(queued):
        started = time.perf_counter()
        for n, msg in enumerate(burst):
            if pace is not None:
                await asyncio.sleep(max(0.0, started + n / pace - time.perf_counter()))
            elif n % 250 == 0:
                await asyncio.sleep(0)  # the gateway hands messages over as they arrive
            handed[msg.id] = time.perf_counter()
            intake.put(msg, 7)
        await asyncio.wait_for(everything.wait(), 120)
        writer.cancel()
        await asyncio.gather(writer, return_exceptions=True)

    ids = [msg.id for msg in burst]
    in_queue = await sync_to_async(EventQueue.objects.filter(message_id__in=ids).count)()
    in_pools = await sync_to_async(UnreadEvent.objects.filter(message_id__in=ids).count)()

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
        "queue_rate": BURST / (max(queued.values()) - started),
        "queue_p99": _p99(queued, handed),
        "queue_lost": BURST - in_queue,
        "pool_rate": BURST / (max(pooled.values()) - started),
        "pool_p99": _p99(pooled, handed),
        "pool_lost": BURST - in_pools,
        "bulk": bulk,
    }


def _p99(reached: dict[int, float], handed: dict[int, float]) -> float:
    """The 99th percentile, in ms, of the messages' time from hand-off to ``reached``."""
    return statistics.quantiles([(reached[i] - handed[i]) * 1000 for i in reached], n=100)[98]


def _clear() -> None:
    from chat.models import EventQueue, UnreadEvent

    EventQueue.objects.all().delete()
    UnreadEvent.objects.all().delete()


async def _no_history(channel_id: int, after_id: int, limit: int) -> list:
    return []


if __name__ == "__main__":
    sys.exit(main())
