"""The scale-out drill: three `runbot` processes over 8 shards and 40 guilds under steady
traffic; one is killed with SIGKILL (its shards move to the worker standing by for them within
the lease time), then the bot is resharded to 16 shards by a rolling restart. Nothing is lost,
nothing is doubled (replies, planner reactions and sends), no IDENTIFY comes too soon for its
bucket and no second holds more REST requests than the shared limit lets through."""

from __future__ import annotations

import asyncio
import gc
import json
import re
import signal
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.db import connections

from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace, raw_discord_identifiers
from chat.models import ShardLease
from chat.pipeline.snowflakes import snowflake_from_ms
from chat.sandbox import GatewaySettings, SandboxServer
from chat.sandbox.demo import DEMO_BOT_ID
from chat.sandbox.state import Sandbox
from chat.tests.e2e.conftest import World, eventually
from chat.tests.e2e.test_restart import start_runbot
from personas.services import config_import

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.serial,
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres_only(reason="several worker processes share one database"),
]

GUILDS = 40
AUTONOMOUS_EVERY = 5
"""One guild in five also has an autonomous channel (the planner acts there)."""
LEASE_SECONDS = 8.0
REST_PER_SECOND = 30
IDENTIFY_INTERVAL = 5.0
MAX_CONCURRENCY = 16
TRAFFIC_PERIOD = 0.25
"""Seconds between two triggers of the steady traffic (pacing, never a barrier)."""
PLANNER_MARK = "You decide what happens next"
EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
ALICE = snowflake_from_ms(EPOCH_MS, increment=4000)


def _id(offset_ms: int, serial: int) -> int:
    return snowflake_from_ms(EPOCH_MS + offset_ms, increment=serial)


@dataclass(frozen=True)
class Fleet:
    """The drill's world: guild ids, their reactive and autonomous channels."""

    guilds: list[int]
    reactive: list[int]
    autonomous: list[int]

    @classmethod
    def build(cls) -> Fleet:
        # Guild k's shard is k mod the shard count: 40 guilds fill 8 and 16 shards evenly.
        guilds = [_id(k, 1) for k in range(GUILDS)]
        return cls(
            guilds=guilds,
            reactive=[_id(k, 2) for k in range(GUILDS)],
            autonomous=[_id(k, 3) for k in range(0, GUILDS, AUTONOMOUS_EVERY)],
        )

    def sandbox(self) -> Sandbox:
        sandbox = Sandbox(token="drill-bot-token", bot_name="Tomori", bot_user_id=DEMO_BOT_ID)
        sandbox.add_user("alice", user_id=ALICE, global_name="Alice")
        for k, guild_id in enumerate(self.guilds):
            sandbox.add_guild(f"Guild {k}", guild_id=guild_id)
            sandbox.add_member(guild_id, ALICE)
            sandbox.add_text_channel(guild_id, "chat", channel_id=self.reactive[k])
            if k % AUTONOMOUS_EVERY == 0:
                channel_id = self.autonomous[k // AUTONOMOUS_EVERY]
                sandbox.add_text_channel(guild_id, "lounge", channel_id=channel_id)
        return sandbox

    def configuration(self) -> dict:
        def guild(k: int, guild_id: int) -> dict:
            channels = [{"id": str(self.reactive[k]), "mode": "reactive"}]
            if k % AUTONOMOUS_EVERY == 0:
                channel_id = self.autonomous[k // AUTONOMOUS_EVERY]
                channels.append({"id": str(channel_id), "mode": "autonomous"})
            persona = {
                "name": "Tomori",
                "main": True,
                "system_prompt": "You are Tomori. You answer briefly.",
                "triggers": ["tomori"],
                "llm": {"max_output_tokens": 200, "context_window": 8000},
            }
            return {
                "id": str(guild_id),
                "name": f"Guild {k}",
                "personas": [persona],
                "channels": channels,
            }

        return {"version": 1, "guilds": [guild(k, g) for k, g in enumerate(self.guilds)]}


def planner_policy(body: dict) -> Reply:
    """The fake model's answers: a persona says a short line; the planner, for each unread
    message, reacts to it, then has Tomori answer it, then waits for the next one."""
    messages = body["messages"]
    if PLANNER_MARK not in str(messages[0]["content"]):
        return Reply("noted, thank you.")
    events = str(messages[-1]["content"])
    if int(re.search(r"You have (\d+) unread", events)[1]) == 0:
        return Reply(json.dumps({"action": "continue"}))
    newest = re.findall(r"ref_\d+", events)[-1]
    done = re.findall(r"^\d+\. (\w+): (?:ok|failed)", str(messages[1]["content"]), re.M)
    if done and done[-1] == "react":
        return Reply(
            json.dumps({"action": "send_message", "persona": "Tomori", "reply_to": newest})
        )
    return Reply(json.dumps({"action": "react", "message": newest, "emoji": "👍"}))


@dataclass
class Traffic:
    """Steady traffic: a trigger in the next guild's channel every `TRAFFIC_PERIOD`, and in
    each autonomous channel a message whenever its previous one has been answered."""

    world: World
    fleet: Fleet
    posted: dict[int, list[str]] = field(default_factory=dict)
    """Every message that wants one answer, by channel."""
    stop: asyncio.Event = field(default_factory=asyncio.Event)

    def say(self, channel_id: int, text: str) -> str:
        message_id = self.world.say(text, channel_id=channel_id, author=ALICE)["id"]
        self.posted.setdefault(channel_id, []).append(message_id)
        self.said_at[message_id] = time.monotonic()
        return message_id

    said_at: dict[str, float] = field(default_factory=dict)

    def describe(self, message_ids: list[str], started: float) -> list[str]:
        """Where and when each message was posted (for a failure's message)."""
        channels = {m: c for c, ids in self.posted.items() for m in ids}
        lines = []
        for message_id in message_ids:
            channel_id = channels[message_id]
            k = (self.fleet.reactive + self.fleet.autonomous).index(channel_id) % GUILDS
            if channel_id in self.fleet.autonomous:
                k = self.fleet.autonomous.index(channel_id) * AUTONOMOUS_EVERY
            at = self.said_at[message_id] - started
            lines.append(f"{message_id} in guild {k} (shard {k % 8}/8, {k % 16}/16) at {at:.1f} s")
        return lines

    def answers(self, channel_id: int) -> Counter[str]:
        return Counter(
            (m.get("message_reference") or {}).get("message_id")
            for m in self.world.bot_messages(channel_id)
        )

    def unanswered(self) -> list[str]:
        # One read of each channel: the sandbox answers REST in this event loop, and a slow
        # poll here would hold its requests back and bunch them into one measured second.
        unanswered = []
        for channel_id, ids in self.posted.items():
            answers = self.answers(channel_id)
            unanswered += [message_id for message_id in ids if message_id not in answers]
        return unanswered

    def replies(self) -> int:
        return sum(len(self.world.bot_messages(c)) for c in self.posted)

    async def run(self) -> None:
        n = 0
        while not self.stop.is_set():
            self.say(self.fleet.reactive[n % GUILDS], f"tomori, question {n}")
            for channel_id in self.fleet.autonomous:
                waiting = self.posted.get(channel_id, [])[-1:]
                if not waiting or waiting[0] in self.answers(channel_id):
                    self.say(channel_id, f"what do you all think about topic {n}?")
            n += 1
            await asyncio.sleep(TRAFFIC_PERIOD)


def runbot(
    world: World, shards: list[int], count: int, standby: list[int] | None = None, *, log: Path
) -> subprocess.Popen:
    args = ["--shard-ids", ",".join(map(str, shards)), "--shard-count", str(count)]
    if standby:
        args += ["--standby-shard-ids", ",".join(map(str, standby))]
    args += ["--lease-seconds", str(LEASE_SECONDS), "--step-delay", "0.05"]
    return start_runbot(
        world,
        *args,
        log=log,
        extra_env={
            "DISCORD_REST_PER_SECOND": str(REST_PER_SECOND),
            "DISCORD_GLOBAL_COMMANDS": "1",
        },
    )


def serving(world: World, count: int) -> set[int]:
    """The shards of ``count`` whose gateway session is connected now."""
    return {
        s["shard"][0] for s in world.sandbox.sessions() if s["connected"] and s["shard"][1] == count
    }


def leases_held(count: int, shards: set[int], *, not_by_pid: int) -> bool:
    """Whether every shard of ``count`` in ``shards`` has a live lease held by another process
    than ``not_by_pid``."""
    from django.db.models.functions import Now

    rows = ShardLease.objects.filter(shard_count=count, shard_id__in=shards, expires_at__gt=Now())
    holders = {row.shard_id: row.holder for row in rows}
    return set(holders) == shards and all(
        holder.split(":")[1] != str(not_by_pid) for holder in holders.values()
    )


traffic_channels: dict[int, int] = {}


def records_of(message_ids: list[str]) -> list[str]:
    """What the database holds about each message (for a failure's message)."""
    from chat.models import EventQueue, Turn, UnreadEvent

    lines = []
    for message_id in map(int, message_ids):
        queued = list(EventQueue.objects.filter(message_id=message_id).values_list("status"))
        unread = UnreadEvent.objects.filter(message_id=message_id).exists()
        turns = list(
            Turn.objects.filter(trigger_message_id=message_id).values_list("status", "error")
        )
        channel = traffic_channels.get(message_id)
        around = list(
            EventQueue.objects.filter(channel_id=channel)
            .order_by("message_id")
            .values_list("message_id", "status", "created_at")
        )
        before = [row for row in around if row[0] < message_id][-1:]
        after = [row for row in around if row[0] > message_id][:2]
        lines.append(
            f"{message_id}: queue {queued}, unread {unread}, turns {turns}; "
            f"queued before {before}, after {after}"
        )
    return lines


def planner_steps_around(message_ids: list[str]) -> list[str]:
    """The planner steps that reacted to or answered each message (for a failure's message)."""
    from chat.models import PlannerStep

    lines = []
    for message_id in map(int, message_ids):
        for row in PlannerStep.objects.filter(action__message_id=message_id).values():
            channel, first = row["channel_id"], row["id"]
            around = PlannerStep.objects.filter(channel_id=channel, id__gte=first - 3)
            for step in around.order_by("id")[:10]:
                lines.append(
                    f"{message_id}: step {step.id} {step.loop_id[:6]}#{step.iteration} "
                    f"{step.created_at:%H:%M:%S.%f} {step.action} -> {step.success} {step.result!r}"
                    f"\n    shown: {str(step.prompt[1:])[-900:]!r}"
                )
    return lines


def lease_holder_pids(count: int, shards: set[int]) -> set[int]:
    """The processes holding the live leases of ``shards`` of ``count``."""
    from django.db.models.functions import Now

    rows = ShardLease.objects.filter(shard_count=count, shard_id__in=shards, expires_at__gt=Now())
    return {int(row.holder.split(":")[1]) for row in rows}


def most_in_one_second(times: list[float]) -> int:
    """The most of ``times`` (seconds) that fall within any one second."""
    times, most, start = sorted(times), 0, 0
    for end, at in enumerate(times):
        while at - times[start] >= 1.0:
            start += 1
        most = max(most, end - start + 1)
    return most


def densest_second(requests: list) -> list:
    """The requests of the busiest one-second window."""
    requests = sorted(requests, key=lambda r: r.at)
    best, start = (0, 0), 0
    for end, request in enumerate(requests):
        while request.at - requests[start].at >= 1.0:
            start += 1
        best = max(best, (end - start + 1, start))
    return requests[best[1] : best[1] + best[0]]


@dataclass
class LoopStalls:
    """How late this process's event loop ran a 10 ms timer, at worst: the sandbox stamps each
    REST request as it arrives, in this loop, so a stall here bunches requests the workers spread
    out into one measured second."""

    longest: float = 0.0

    async def watch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            before = loop.time()
            await asyncio.sleep(0.01)
            self.longest = max(self.longest, loop.time() - before - 0.01)


async def stop(worker: subprocess.Popen) -> int:
    """SIGTERM, and the exit code; a worker still running after 30 s is killed and fails the
    drill."""
    worker.send_signal(signal.SIGTERM)
    try:
        return await asyncio.wait_for(asyncio.to_thread(worker.wait), 30)
    except TimeoutError:
        worker.kill()
        worker.wait()
        raise AssertionError(f"worker {worker.args} did not stop on SIGTERM") from None


@pytest.fixture
async def drill_world(transactional_db, no_raw_ids_reach_the_model) -> AsyncIterator[World]:
    fleet = Fleet.build()
    await sync_to_async(config_import)(data=fleet.configuration())
    gateway = GatewaySettings(
        heartbeat_interval_ms=500,
        max_concurrency=MAX_CONCURRENCY,
        identify_interval=IDENTIFY_INTERVAL,
    )
    llm_server = FakeLLMServer(
        responder=planner_policy,
        guard=raw_discord_identifiers,
        pace=StreamPace(first_token_s=0.2, words_per_s=30),
    )
    no_raw_ids_reach_the_model.findings = llm_server.guard_findings
    # The sandbox plays Discord's edge in this process. A full collection of this process's heap
    # (pytest, Django, every test module: 170-290 ms measured on two cores) stopped it while the
    # workers kept sending, and bunched their requests into one measured second: 31 of 30. The
    # heap as it is now is frozen for the drill, as `runbot` freezes its own at start.
    gc.collect()
    gc.freeze()
    stalls = LoopStalls()
    watching = asyncio.create_task(stalls.watch())
    try:
        async with SandboxServer(fleet.sandbox(), gateway=gateway) as sandbox, llm_server as llm:
            world = World(sandbox=sandbox, llm=llm)
            world.fleet = fleet  # type: ignore[attr-defined]
            world.stalls = stalls  # type: ignore[attr-defined]
            try:
                yield world
            finally:
                await sync_to_async(connections.close_all)()
    finally:
        watching.cancel()
        gc.unfreeze()


async def test_kill_9_and_a_rolling_reshard_lose_and_double_nothing(drill_world, tmp_path):
    world, fleet = drill_world, drill_world.fleet
    started = time.monotonic()
    workers = {
        "a": runbot(world, [0, 1, 2], 8, standby=[3, 4, 5], log=tmp_path / "a8.log"),
        "b": runbot(world, [3, 4, 5], 8, standby=[6, 7], log=tmp_path / "b8.log"),
        "c": runbot(world, [6, 7], 8, standby=[0, 1, 2], log=tmp_path / "c8.log"),
    }
    traffic = Traffic(world, fleet)
    flow = None
    try:
        await eventually(lambda: serving(world, 8) == set(range(8)), within=60)
        marks = {"serving": time.monotonic() - started}
        own = {"a": {0, 1, 2}, "b": {3, 4, 5}, "c": {6, 7}}
        for name, shards in own.items():
            holder = await sync_to_async(lease_holder_pids)(8, shards)
            assert holder == {workers[name].pid}, (name, holder)
        flow = asyncio.create_task(traffic.run())
        await eventually(lambda: traffic.replies() >= 20, within=60)

        # kill -9 the worker of shards 3-5: the worker standing by for them takes them over.
        killed = workers["b"]
        killed.send_signal(signal.SIGKILL)
        killed.wait(timeout=10)
        killed_at = time.monotonic()
        marks["killed"] = killed_at - started
        await eventually(
            lambda: sync_to_async(leases_held)(8, {3, 4, 5}, not_by_pid=killed.pid), within=30
        )
        moved = time.monotonic() - killed_at
        await eventually(lambda: {3, 4, 5} <= serving(world, 8), within=30)
        marks["moved"] = time.monotonic() - started
        served = time.monotonic() - killed_at
        replies = traffic.replies()
        await eventually(lambda: traffic.replies() >= replies + 10, within=60)

        # Reshard to 16, one worker at a time; guild k is on shard k % 8 and k % 16, so the
        # new worker of shards s and s + 8 replaces the old worker of shard s.
        workers["b"] = runbot(world, [3, 4, 5, 11, 12, 13], 16, log=tmp_path / "b16.log")
        marks["b16"] = time.monotonic() - started
        assert await stop(workers["c"]) == 0
        workers["c"] = runbot(world, [6, 7, 14, 15], 16, log=tmp_path / "c16.log")
        marks["c16"] = time.monotonic() - started
        await eventually(lambda: {6, 7, 14, 15} <= serving(world, 16), within=60)
        assert await stop(workers["a"]) == 0
        workers["a"] = runbot(world, [0, 1, 2, 8, 9, 10], 16, log=tmp_path / "a16.log")
        marks["a16"] = time.monotonic() - started
        await eventually(lambda: serving(world, 16) == set(range(16)), within=60)
        assert serving(world, 8) == set()
        replies = traffic.replies()
        await eventually(lambda: traffic.replies() >= replies + 10, within=60)

        traffic.stop.set()
        await flow
        try:
            await eventually(lambda: not traffic.unanswered(), within=90)
        except AssertionError:
            lost = traffic.describe(traffic.unanswered(), started)
            traffic_channels.update({int(m): c for c, ids in traffic.posted.items() for m in ids})
            lost += await sync_to_async(records_of)(traffic.unanswered())
            raise AssertionError(f"unanswered ({marks}):\n" + "\n".join(lost)) from None
        # Barrier: each channel answers in arrival order; once a message posted now is
        # answered in every channel, any second answer to an earlier one would be here.
        for channel_id in list(traffic.posted):
            traffic.say(channel_id, "tomori, last one")
        await eventually(lambda: not traffic.unanswered(), within=60)
    finally:
        traffic.stop.set()
        if flow is not None:
            await asyncio.gather(flow, return_exceptions=True)
        running = [worker for worker in workers.values() if worker.poll() is None]
        stopped = await asyncio.gather(*map(stop, running), return_exceptions=True)
        assert [code for code in stopped if code != 0] == []
    duration = time.monotonic() - started

    doubled = {
        message_id: count
        for channel_id in traffic.posted
        for message_id, count in traffic.answers(channel_id).items()
        if count != 1
    }
    assert doubled == {}
    assert sum(map(len, traffic.posted.values())) == traffic.replies()
    autonomous = [i for c in fleet.autonomous for i in traffic.posted[c]]
    reactions = Counter(
        r.path.split("/")[4]
        for r in world.sandbox.requests("PUT")
        if r.route.startswith("/channels/{channel_id}/messages/{message_id}/reactions")
    )
    wrong = {m: n for m, n in (reactions | Counter(dict.fromkeys(autonomous, 0))).items() if n != 1}
    assert wrong == {}, "\n".join(await sync_to_async(planner_steps_around)(list(wrong)))
    identifies = world.sandbox.identifies()
    assert [r for r in identifies if r.refused] == []
    assert world.sandbox.identifies_too_soon(IDENTIFY_INTERVAL) == []
    requests = world.sandbox.requests()
    rest = most_in_one_second([r.at for r in requests])
    densest = densest_second(requests)
    stalled_ms = world.stalls.longest * 1000
    assert rest <= REST_PER_SECOND, (
        Counter(f"{r.method} {r.route}" for r in densest),
        f"this process's event loop stalled {stalled_ms:.0f} ms at worst",
    )
    assert moved <= LEASE_SECONDS + LEASE_SECONDS / 3 + 1.0
    print(
        f"\ndrill: {duration:.1f} s, {sum(map(len, traffic.posted.values()))} messages answered "
        f"once ({len(autonomous)} by the planner), shards moved {moved:.1f} s and served "
        f"{served:.1f} s after the kill, {len(identifies)} IDENTIFYs, most REST in a second "
        f"{rest} of {REST_PER_SECOND} (the sandbox's loop stalled {stalled_ms:.0f} ms at worst)"
    )
