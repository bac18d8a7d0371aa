"""A worker killed with SIGKILL in the middle of a burst loses nothing and repeats nothing."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client

from chat.llm.fake_server import Fault, FaultKind, Reply, StreamPace
from chat.models import ShardLease, Turn, WorkerHeartbeat
from chat.tests.config_writes import rows_update
from chat.tests.e2e.conftest import BOB, GENERAL, eventually
from chat.tests.e2e.tcp_proxy import CuttableProxy
from personas.models import Persona

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

ROOT = Path(__file__).resolve().parents[3]
BURST = 6


def _database_url(port: int | None = None) -> str:
    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    host = "127.0.0.1" if port else db["HOST"]
    port = port or db["PORT"] or 5432
    return f"postgres://{db['USER']}{password}@{host}:{port}/{db['NAME']}"


def start_runbot(
    world,
    *args: str,
    log: Path | None = None,
    database_port: int | None = None,
    redis_url: str | None = None,
    extra_env: Mapping[str, str] | None = None,
) -> subprocess.Popen:
    """``manage.py runbot`` against the sandbox; its log goes to ``log`` when given; with
    ``database_port`` it reaches the database through that local port (a proxy); with
    ``redis_url`` it uses that Redis for its channel layer; ``extra_env`` adds settings."""
    env = {
        **os.environ,
        **({"REDIS_URL": redis_url} if redis_url else {}),
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DJANGO_SECRET_KEY": "test-only-secret-key",
        "DATABASE_URL": _database_url(database_port),
        "DISCORD_TOKEN": world.sandbox.token,
        "DISCORD_API_BASE": world.sandbox.api_base,
        "DISCORD_GATEWAY_URL": world.sandbox.gateway_url,
        "LLM_BASE_URL": world.llm.base_url,
        **(extra_env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "manage.py", "runbot", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w") if log is not None else subprocess.DEVNULL,
    )


def _overview_row(holder: str) -> str:
    """The text of ``holder``'s row on the dashboard's overview, as an operator reads it (the
    workers and shards are operators' to see)."""
    user, _ = User.objects.get_or_create(username="op", defaults={"is_staff": True})
    client = Client()
    client.force_login(user)
    html = client.get("/").content.decode()
    row = html.split(f'data-holder="{holder}">', 1)[1].split("</tr>", 1)[0]
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", row)).strip()


def connected_sessions(world) -> list[str]:
    return [s["session_id"] for s in world.sandbox.sessions() if s["connected"]]


def replies_by_trigger(world) -> dict[str, int]:
    counts: dict[str, int] = {}
    for message in world.bot_messages(GENERAL):
        trigger = (message.get("message_reference") or {}).get("message_id")
        counts[trigger] = counts.get(trigger, 0) + 1
    return counts


async def test_kill_9_mid_burst_then_restart_answers_every_trigger_exactly_once(world):
    # Slow answers, so the kill lands while a turn waits for the model.
    world.llm.enqueue(*[Fault(FaultKind.TIMEOUT, delay=0.3)] * (BURST + 2))
    worker = start_runbot(world, "--lease-seconds", "2")
    try:
        await eventually(lambda: world.sandbox.sessions(), within=30)
        triggers = [world.say(f"tomori, question {n}")["id"] for n in range(BURST)]

        # Two replies delivered and the third turn's model call in flight: kill.
        await eventually(
            lambda: (
                len(world.bot_messages(GENERAL)) >= 2
                and len(world.llm.chat_bodies) > len(world.bot_messages(GENERAL))
            ),
            within=30,
        )
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        answered_before_kill = len(world.bot_messages(GENERAL))
        assert answered_before_kill < BURST

        worker = start_runbot(world, "--lease-seconds", "2")
        await eventually(lambda: len(replies_by_trigger(world)) == BURST, within=60)
        # Barrier: the channel answers its triggers in arrival order, so once a trigger posted
        # now is answered, any second answer to an earlier one would already be here.
        sentinel = world.say("tomori, last question")["id"]
        await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
        # Its reply is out; stop once it is on record too (a worker stopped between the two
        # leaves the turn delivering, for the next start to settle).
        await eventually(
            lambda: Turn.objects.filter(
                trigger_message_id=int(sentinel), status=Turn.Status.REPLIED
            ).aexists(),
            within=30,
        )
    finally:
        worker.send_signal(signal.SIGTERM)
        exit_code = worker.wait(timeout=20)

    assert exit_code == 0  # SIGTERM closes the worker cleanly
    assert replies_by_trigger(world) == dict.fromkeys([*triggers, sentinel], 1)
    statuses = await sync_to_async(lambda: sorted(Turn.objects.values_list("status", flat=True)))()
    assert statuses.count("replied") == BURST + 1
    assert "running" not in statuses  # the interrupted turn was marked aborted at restart


@pytest.mark.parametrize(
    ("text", "send_route", "persona"),
    [
        ("tomori, are you there?", "/channels/{channel_id}/messages", "Tomori"),
        ("anon, are you there?", "/webhooks/{webhook_id}/{webhook_token}", "Anon"),
    ],
    ids=["bot-account", "webhook"],
)
async def test_kill_9_between_the_send_and_its_record_does_not_answer_twice(
    world, text, send_route, persona
):
    # Discord creates the reply, but the worker never hears back: it dies first.
    world.sandbox.hold_responses("POST", send_route, 30)
    worker = start_runbot(world, "--lease-seconds", "2")
    try:
        await eventually(lambda: world.sandbox.sessions(), within=30)
        trigger = world.say(text)["id"]
        await eventually(lambda: world.bot_messages(GENERAL), within=30)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        world.sandbox.clear_faults()
        stuck = await sync_to_async(lambda: list(Turn.objects.values_list("status", flat=True)))()
        assert stuck == ["delivering"]

        worker = start_runbot(world, "--lease-seconds", "2")
        await eventually(lambda: [s for s in world.sandbox.sessions() if s["connected"]], within=30)
        # Barrier: a later trigger answered means the restarted worker got past the first one.
        sentinel = world.say("tomori, still there?")["id"]
        await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=20)

    authors = [m["author"]["username"] for m in world.bot_messages(GENERAL)]
    assert authors == [persona, "Tomori"]  # one answer to the trigger, one to the sentinel
    turn = await Turn.objects.aget(trigger_message_id=int(trigger))
    assert turn.status == "replied"
    assert turn.delivered_message_ids == [world.bot_messages(GENERAL)[0]["id"]]


async def test_two_workers_on_one_shard_answer_every_trigger_once_across_a_kill_9(world, tmp_path):
    holder = start_runbot(world, "--lease-seconds", "2")
    standby_log = tmp_path / "standby.log"
    standby = None
    try:
        first_session = await eventually(lambda: connected_sessions(world), within=30)
        standby = start_runbot(world, "--lease-seconds", "2", log=standby_log)
        await eventually(lambda: "standby: waiting" in standby_log.read_text(), within=30)
        assert connected_sessions(world) == first_session  # the standby holds no gateway
        # Its heartbeat says it stands by for the shard, and for whom; so does the overview.
        waiting = await eventually(
            lambda: WorkerHeartbeat.objects.filter(standby_for=[0]).afirst(), within=30
        )
        lease = await ShardLease.objects.aget()
        assert lease.holder != waiting.holder
        assert (waiting.shard_ids, waiting.shard_count, waiting.waiting_for) == (
            [],
            1,
            [lease.holder],
        )
        row = await sync_to_async(_overview_row)(waiting.holder)
        assert row.startswith(f"{waiting.holder} up since") and " standby " in row
        assert f"stands by for 0 of 1 waiting for {lease.holder}" in row

        early = [world.say(f"tomori, early {n}")["id"] for n in range(3)]
        await eventually(lambda: set(early) <= set(replies_by_trigger(world)), within=30)

        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        taken_over = await eventually(
            lambda: [s for s in connected_sessions(world) if s not in first_session], within=30
        )
        assert len(taken_over) == 1
        # The standby's row is now a serving worker's.
        await eventually(
            lambda: WorkerHeartbeat.objects.filter(
                holder=waiting.holder, shard_ids=[0], standby_for=[]
            ).aexists(),
            within=30,
        )

        late = [world.say(f"tomori, late {n}")["id"] for n in range(3)]
        await eventually(lambda: set(late) <= set(replies_by_trigger(world)), within=30)
        # Barrier: the channel answers in arrival order; after this, no duplicate is pending.
        sentinel = world.say("tomori, anyone else?")["id"]
        await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
    finally:
        for worker in (holder, standby):
            if worker is not None and worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(timeout=20)

    assert replies_by_trigger(world) == dict.fromkeys([*early, *late, sentinel], 1)


async def test_messages_posted_while_the_worker_was_down_are_answered_once(world):
    worker = start_runbot(world, "--lease-seconds", "2")
    try:
        await eventually(lambda: connected_sessions(world), within=30)
        before = world.say("tomori, before the outage")["id"]
        await eventually(lambda: before in replies_by_trigger(world), within=30)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        await eventually(lambda: not connected_sessions(world), within=30)

        missed = [world.say(f"tomori, while you were away {n}")["id"] for n in range(4)]
        worker = start_runbot(world, "--lease-seconds", "2")
        await eventually(lambda: set(missed) <= set(replies_by_trigger(world)), within=60)
        sentinel = world.say("tomori, welcome back")["id"]
        await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=20)

    assert replies_by_trigger(world) == dict.fromkeys([before, *missed, sentinel], 1)


@pytest.mark.postgres_only(reason="the outage is cut between the worker and a database server")
async def test_a_database_outage_during_a_burst_loses_and_repeats_nothing(world, tmp_path):
    db = connection.settings_dict
    host = db["HOST"] or "127.0.0.1"
    async with CuttableProxy(
        "127.0.0.1" if host.startswith("/") else host, int(db["PORT"] or 5432)
    ) as proxy:
        log = tmp_path / "worker.log"
        worker = start_runbot(world, log=log, database_port=proxy.port)
        try:
            await eventually(lambda: connected_sessions(world), within=30)
            before = [world.say(f"tomori, before {n}")["id"] for n in range(2)]
            await eventually(lambda: set(before) <= set(replies_by_trigger(world)), within=30)

            proxy.cut()  # the database is gone for this worker
            during = [world.say(f"tomori, during {n}")["id"] for n in range(4)]
            await eventually(
                lambda: "storing incoming messages failed" in log.read_text(), within=30
            )
            await asyncio.sleep(2)  # an outage of a few seconds, while messages arrive
            proxy.restore()

            await eventually(lambda: set(during) <= set(replies_by_trigger(world)), within=60)
            sentinel = world.say("tomori, are we back?")["id"]
            await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
        finally:
            # Waited for off the event loop: the proxy this test runs carries the worker's
            # last database writes as it stops.
            worker.send_signal(signal.SIGTERM)
            await asyncio.wait_for(asyncio.to_thread(worker.wait), 20)

    assert replies_by_trigger(world) == dict.fromkeys([*before, *during, sentinel], 1)
    assert "storing incoming messages works again" in log.read_text()


@pytest.mark.postgres_only(reason="the worker's connections are ended by the database server")
async def test_connections_the_database_ends_between_statements_are_replaced(world, tmp_path):
    """Every connection the worker holds is ended by the server while the worker is idle (a
    failover, a restart, an idle timeout): the next statement on each finds its connection
    closed, and each is replaced, not reused, so the turns, the lease and the heartbeat go on."""
    log = tmp_path / "worker.log"
    worker = start_runbot(world, log=log)
    try:
        await eventually(lambda: connected_sessions(world), within=30)
        before = world.say("tomori, before")["id"]
        await eventually(lambda: before in replies_by_trigger(world), within=30)

        ended = await sync_to_async(_end_other_connections)()
        assert ended >= 2  # the worker's shared thread and the intake's, at least

        after = [world.say(f"tomori, after {n}")["id"] for n in range(3)]
        await eventually(lambda: set(after) <= set(replies_by_trigger(world)), within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.to_thread(worker.wait), 20)

    assert replies_by_trigger(world) == dict.fromkeys([before, *after], 1)
    assert "lost the lease" not in log.read_text()


def _end_other_connections() -> int:
    """End every connection to the test database but this one; how many were ended."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def start_redis(port: int) -> subprocess.Popen:
    """A private Redis on a loopback port (the machine's own Redis is shared by other runs)."""
    server = subprocess.Popen(
        [
            "redis-server",
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return server


async def test_a_redis_restart_under_load_loses_and_repeats_nothing_and_logs_little(
    world, tmp_path
):
    port = free_port()
    redis = start_redis(port)
    log = tmp_path / "worker.log"
    worker = start_runbot(world, log=log, redis_url=f"redis://127.0.0.1:{port}/0")
    try:
        await eventually(lambda: connected_sessions(world), within=30)
        before = [world.say(f"tomori, before {n}")["id"] for n in range(3)]
        await eventually(lambda: set(before) <= set(replies_by_trigger(world)), within=30)

        redis.terminate()
        redis.wait(timeout=10)
        during = [world.say(f"tomori, during {n}")["id"] for n in range(4)]
        await eventually(lambda: set(during) <= set(replies_by_trigger(world)), within=60)

        redis = start_redis(port)
        after = [world.say(f"tomori, after {n}")["id"] for n in range(3)]
        await eventually(lambda: set(after) <= set(replies_by_trigger(world)), within=60)
        sentinel = world.say("tomori, all good?")["id"]
        await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        await asyncio.wait_for(asyncio.to_thread(worker.wait), 20)
        redis.terminate()
        redis.wait(timeout=10)

    assert replies_by_trigger(world) == dict.fromkeys([*before, *during, *after, sentinel], 1)
    publishing = [
        line for line in log.read_text().splitlines() if "publishing live updates" in line
    ]
    # 10 turns publish about 60 events, most of them into the outage: a handful of lines.
    assert 1 <= len(publishing) <= 8, "\n".join(publishing)


async def test_a_restarted_worker_reads_each_personas_own_lines_back_from_discord(world):
    world.llm.enqueue(Reply("Anon: la la la, the band rules"), Reply("Tomori: welcome back, bob"))
    worker = start_runbot(world, "--lease-seconds", "2")
    try:
        await eventually(lambda: world.sandbox.sessions(), within=30)
        world.say("anon, sing something")
        await eventually(lambda: len(world.bot_messages(GENERAL)) == 1, within=30)
        world.say("tomori, hi", author=BOB)
        await eventually(lambda: len(world.bot_messages(GENERAL)) == 2, within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0

    # A new process knows nothing of the old one's deliveries; its first turn reads the
    # channel over REST. Meanwhile Anon became the main persona, so the bot account's old
    # lines are not Anon's just because Anon is main now.
    def make_anon_main() -> None:
        rows_update(Persona.objects.filter(is_main=True), is_main=False)
        rows_update(Persona.objects.filter(name="Anon"), is_main=True)

    await sync_to_async(make_anon_main)()
    worker = start_runbot(world, "--lease-seconds", "2")
    try:
        world.say("anon, and tomori, again please")
        await eventually(lambda: len(world.bot_messages(GENERAL)) == 4, within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(timeout=20) == 0

    bodies = world.llm.chat_bodies[2:]
    anon = next(b for b in bodies if "You are Anon" in b["messages"][0]["content"])
    tomori = next(b for b in bodies if "You are Tomori" in b["messages"][0]["content"])

    def role_of(body: dict, needle: str) -> str:
        [role] = [m["role"] for m in body["messages"] if needle in str(m["content"])]
        return role

    assert role_of(anon, "la la la, the band rules") == "assistant"
    assert role_of(anon, "welcome back, bob") == "user"
    assert role_of(tomori, "welcome back, bob") == "assistant"
    assert role_of(tomori, "la la la, the band rules") == "user"
    windows = await sync_to_async(
        lambda: list(Turn.objects.order_by("id").values_list("window", flat=True))
    )()
    assert windows[2]["rest_reason"] == "no_previous_window"


async def test_kill_9_between_two_pieces_of_a_streamed_reply_repeats_nothing(world):
    paragraphs = ["First, the beginning.", "Then, the middle part.", "Last, the end."]
    # Two words a second: the kill lands while the second paragraph is being written.
    world.llm.enqueue(
        Reply("\n\n".join(paragraphs), pace=StreamPace(first_token_s=0.1, words_per_s=2))
    )
    worker = start_runbot(world, "--lease-seconds", "2")
    try:
        await eventually(lambda: world.sandbox.sessions(), within=30)
        trigger = world.say("tomori, tell me slowly")["id"]
        # The first paragraph is out and on record; the second is being written: kill.
        await eventually(lambda: world.bot_messages(GENERAL), within=30)

        async def first_piece_recorded() -> bool:
            turn = await Turn.objects.filter(trigger_message_id=int(trigger)).afirst()
            return turn is not None and len(turn.delivered_message_ids) == 1

        await eventually(first_piece_recorded, within=30)
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=10)
        [first] = world.bot_messages(GENERAL)
        assert first["content"] == paragraphs[0]
        stuck = await Turn.objects.aget(trigger_message_id=int(trigger))
        assert (stuck.status, stuck.delivered_message_ids) == ("delivering", [first["id"]])

        worker = start_runbot(world, "--lease-seconds", "2")
        await eventually(lambda: connected_sessions(world), within=30)
        # Barrier: a later trigger answered means the restarted worker got past the first one.
        sentinel = world.say("tomori, still there?")["id"]
        await eventually(lambda: sentinel in replies_by_trigger(world), within=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=20)

    contents = [m["content"] for m in world.bot_messages(GENERAL)]
    assert contents[0] == paragraphs[0] and len(contents) == 2  # no repeat, no second answer
    assert replies_by_trigger(world) == {trigger: 1, sentinel: 1}
    turn = await Turn.objects.aget(trigger_message_id=int(trigger))
    assert turn.status == "replied" and turn.delivered_message_ids == [first["id"]]
    assert "stopped while the reply was being delivered" in turn.error
