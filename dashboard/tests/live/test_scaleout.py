"""The overview's scale-out panel: each worker with its heartbeat and shard leases, and a
reshard in progress (leases under two shard counts, the new count's unowned shards and what
each waits for), read without JavaScript and pushed over the overview's socket."""

from __future__ import annotations

import datetime as dt
import re

import pytest
from asgiref.sync import sync_to_async
from django.db import connections
from django.utils import timezone

from chat.heartbeats import worker_heartbeat_clear, worker_heartbeat_record, worker_standby_record
from chat.leases import shard_leases_claim, shard_leases_release
from chat.models import ShardLease, WorkerHeartbeat
from chat.shards import ShardSet
from dashboard.scaleout import scale_out
from dashboard.tests.live.test_consumers import _receive_until, _section, _session_cookie, _socket

OLD, NEW, STANDBY_GONE = "old-host:11:aaaa", "new-host:22:bbbb", "gone-host:33:cccc"
STANDBY = "standby-host:44:dddd"


def _lease(shard_id: int, shard_count: int, holder: str, fence: int, seconds: float) -> None:
    ShardLease.objects.create(
        shard_id=shard_id,
        shard_count=shard_count,
        holder=holder,
        fence=fence,
        expires_at=timezone.now() + dt.timedelta(seconds=seconds),
    )


@pytest.fixture
def resharding(db):
    """A rolling reshard 4 → 8 half done: the old worker still holds shards 0 and 1 of 4; the
    new one holds 2, 3, 6 and 7 of 8 (the guilds of the stopped old holder of 2 and 3 of 4,
    whose leases lapsed), and has a heartbeat; so do not 0, 1, 4 and 5 of 8."""
    _lease(0, 4, OLD, fence=3, seconds=12)
    _lease(1, 4, OLD, fence=3, seconds=12)
    _lease(2, 4, STANDBY_GONE, fence=4, seconds=-30)  # lapsed: no longer anyone's
    _lease(3, 4, STANDBY_GONE, fence=4, seconds=-30)
    for shard in (2, 3, 6, 7):
        _lease(shard, 8, NEW, fence=7, seconds=14)
    WorkerHeartbeat.objects.create(
        holder=OLD,
        shard_ids=[0, 1],
        shard_count=4,
        latencies={"0": 0.02, "1": 0.04},
        guild_ids=["1", "2", "3"],
    )
    WorkerHeartbeat.objects.create(
        holder=NEW, shard_ids=[2, 3, 6, 7], shard_count=8, latencies={}, guild_ids=["4"]
    )


def test_leases_under_two_counts_show_the_reshard_and_the_unowned_shards(resharding):
    scale = scale_out()

    assert scale.resharding
    assert (scale.shard_count, scale.counts) == (8, (8, 4))
    assert scale.unowned == (0, 1, 4, 5)
    states = {cell.shard_id: (cell.state, cell.holder) for cell in scale.shards}
    assert states == {
        0: ("waiting", None),
        1: ("waiting", None),
        2: ("held", NEW),
        3: ("held", NEW),
        4: ("waiting", None),
        5: ("waiting", None),
        6: ("held", NEW),
        7: ("held", NEW),
    }
    waits = {cell.shard_id: [r.label for r in cell.waiting_for] for cell in scale.shards}
    assert waits[0] == waits[4] == ["shard 0 of 4"] and waits[5] == ["shard 1 of 4"]
    assert [(w.holder, w.state, len(w.leases)) for w in scale.workers] == [
        (NEW, "serving", 4),
        (OLD, "serving", 2),
    ]


def test_an_operator_reads_the_reshard_on_the_overview_without_javascript(admin_client, resharding):
    html = admin_client.get("/").content.decode()
    panel = html.split('id="scale-out"', 1)[1].split("</section>", 1)[0]
    text = re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", panel))

    assert "Reshard in progress: leases are held under 8 and 4 shards." in text
    assert "Under 8, 4 shards still unowned (0, 1, 4, 5)" in text
    assert f"still held under an older count: shard 0 of 4 by {OLD}, shard 1 of 4 by {OLD}" in text
    assert "shard 2 of 8 · fence 7 · expires" in text
    assert "shard 0 of 4 · fence 3 · expires" in text
    assert STANDBY_GONE not in text  # a lapsed lease is no one's
    assert "latency 30.0 ms" in text and "0, 1 of 4" in text
    assert '<li class="shard waiting" data-shard="4" data-state="waiting">' in panel
    assert "waiting for shard 0 of 4" in text


def _worker_row(html: str, holder: str) -> str:
    """The text of the overview's row of ``holder``."""
    row = html.split(f'data-holder="{holder}">', 1)[1].split("</tr>", 1)[0]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip()


def test_workers_and_shards_are_for_operators_only(moderator_client, resharding):
    html = moderator_client.get("/").content.decode()
    assert 'id="scale-out"' not in html and NEW not in html and "Workers and shards" not in html


def test_a_standby_worker_is_listed_with_the_shards_it_waits_for_and_whom_for(
    admin_client, resharding
):
    worker_standby_record(holder=STANDBY, shards=ShardSet(ids=(0, 1), count=4), waiting_for=[OLD])

    scale = scale_out()
    assert [(w.holder, w.state) for w in scale.workers] == [
        (NEW, "serving"),
        (OLD, "serving"),
        (STANDBY, "standby"),
    ]
    assert (scale.workers[2].standby_for, scale.workers[2].waiting_for) == ((0, 1), (OLD,))

    html = admin_client.get("/").content.decode()
    assert '<span class="lease-state standby">standby</span>' in html
    row = _worker_row(html, STANDBY)
    assert f"stands by for 0, 1 of 4 waiting for {OLD} no live lease" in row
    assert _worker_row(html, OLD).startswith(f"{OLD} up since")
    assert "serving" in _worker_row(html, OLD) and "stands by" not in _worker_row(html, OLD)


def test_a_standby_no_worker_holds_the_shards_of_says_so(admin_client):
    worker_standby_record(holder=STANDBY, shards=ShardSet(ids=(3,), count=4), waiting_for=[])

    row = _worker_row(admin_client.get("/").content.decode(), STANDBY)

    assert "standby" in row and "stands by for 3 of 4 no worker holds it yet" in row


def test_a_standby_that_took_its_lease_is_connecting_until_its_gateway_heartbeat(db):
    worker_standby_record(holder=STANDBY, shards=ShardSet(ids=(1,), count=2), waiting_for=[OLD])
    _lease(1, 2, STANDBY, fence=2, seconds=10)

    assert [(w.holder, w.state) for w in scale_out().workers] == [(STANDBY, "connecting")]

    worker_heartbeat_record(
        holder=STANDBY, shard_ids=[1], shard_count=2, latencies={}, guild_ids=[]
    )
    assert [(w.holder, w.state) for w in scale_out().workers] == [(STANDBY, "serving")]


def test_a_worker_with_leases_and_no_heartbeat_is_connecting_and_one_count_is_no_reshard(db):
    _lease(0, 2, NEW, fence=1, seconds=10)

    scale = scale_out()

    assert not scale.resharding
    assert [(w.holder, w.state) for w in scale.workers] == [(NEW, "connecting")]
    assert scale.unowned == (1,)
    assert scale.shards[1].state == "unowned"


@pytest.mark.django_db(transaction=True)
async def test_the_overview_socket_pushes_a_lease_taken_and_released(guild_async):
    session = await sync_to_async(_session_cookie)("ada", staff=True)
    socket = _socket("/ws/overview/", session)
    connected, _ = await socket.connect()
    assert connected
    assert "No worker is running." in _section(
        await _receive_until(socket, 'id="scale-out"'), "scale-out"
    )
    shards = ShardSet(ids=(1,), count=2)

    fence = await sync_to_async(shard_leases_claim)(
        shards=shards, holder=NEW, ttl=dt.timedelta(seconds=15)
    )
    pushed = _section(await _receive_until(socket, NEW), "scale-out")
    assert f"shard 1 of 2 · fence {fence}" in pushed and "connecting" in pushed

    await sync_to_async(shard_leases_release)(shards=shards, holder=NEW)
    pushed = _section(await _receive_until(socket, "No worker is running."), "scale-out")
    assert NEW not in pushed
    await socket.disconnect()


@pytest.mark.django_db(transaction=True)
async def test_the_overview_socket_pushes_a_standby_and_its_turn_to_serve(guild_async):
    session = await sync_to_async(_session_cookie)("ada", staff=True)
    socket = _socket("/ws/overview/", session)
    connected, _ = await socket.connect()
    assert connected
    await _receive_until(socket, "No worker is running.")
    shards = ShardSet(ids=(1,), count=2)

    await sync_to_async(worker_standby_record)(holder=STANDBY, shards=shards, waiting_for=[OLD])
    pushed = _section(await _receive_until(socket, "stands by for"), "scale-out")
    assert 'lease-state standby">standby<' in pushed and "stands by for 1 of 2" in pushed

    await sync_to_async(shard_leases_claim)(
        shards=shards, holder=STANDBY, ttl=dt.timedelta(seconds=15)
    )
    await sync_to_async(worker_heartbeat_record)(
        holder=STANDBY, shard_ids=[1], shard_count=2, latencies={1: 0.02}, guild_ids=[]
    )
    pushed = _section(await _receive_until(socket, "latency 20.0 ms"), "scale-out")
    assert 'lease-state serving">serving<' in pushed and "stands by" not in pushed

    await sync_to_async(worker_heartbeat_clear)(holder=STANDBY)
    await sync_to_async(shard_leases_release)(shards=shards, holder=STANDBY)
    await _receive_until(socket, "No worker is running.")
    await socket.disconnect()
    await sync_to_async(connections.close_all)()  # sync_to_async's thread's, before the drop
