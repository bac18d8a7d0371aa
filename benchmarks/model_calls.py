"""Model calls per delivered reply (reactive, autonomous, the old three-step flow) and the
REST reads a conversation and a busy stretch cost.

Run: ``.venv/bin/python -m benchmarks.model_calls``

The real worker (discord.py client, scheduler, planner loop, pipeline, model access) runs
against the local sandbox over websockets and the fake model server over HTTP, on a throwaway
database of the configured kind (``DATABASE_URL``; a SQLite file in a temporary directory when
it names SQLite or nothing; never the configured database itself) with an in-memory channel
layer. The planner's decisions come from a fixed policy answering from the prompt it is shown,
so the figures count what the product spends, not what a model happens to choose:

1. **Reactive, a conversation**: ``tomori, question N`` in #general, each posted once the
   previous one has its reply: a trigger, its reply, the next trigger. Besides model calls it
   counts REST history reads (``GET /channels/{id}/messages``) and single-message GETs
   (``GET /channels/{id}/messages/{id}``) per 100 turns, beside the distinct messages that
   the run's messages reply to.
2. **Reactive, a busy stretch**: #poetry holds ``OLD_TARGETS`` old messages and enough chatter
   after them that they are out of every window (posted before the worker starts, so no
   gateway cache holds them either); then ``BUSY_TRIGGERS`` triggers are posted in one go,
   two in three replying to one of the old messages, so they are all queued before the first
   is answered. Same counts, over the whole stretch until the worker is idle. (Posted a few
   milliseconds apart instead, the triggers' arrival interleaves with the worker's turns on
   the one event loop they share, and the figures swing from run to run: the flood is the
   reproducible case.)
   Runs 1 and 2 also give the prompt's stability (the turn records' context items, as
   `benchmarks.pipeline_build` measures it): the share of consecutive prompts whose dialogue
   keeps the previous prompt's dialogue (all but its newest item), and the mean share of a
   prompt's tokens in leading items identical to the previous prompt's. Pairs are counted from
   the first turn whose window starts later than the previous one's, so a window still
   growing toward the limit flatters neither run; in the busy stretch every turn but the first
   answers a queued trigger.
3. **Autonomous**: bursts of three messages in #autonomous; the policy sends as soon as the
   unread messages are in its prompt ("direct").
4. **Baseline, the old three-step flow**: the same bursts, with the policy the old prompt asked
   for — ``read_unread_messages`` first, then ``send_message``, then the persona's turn.

Both autonomous runs use the production step delay (2.5 s between planner steps), so the
seconds to a reply are comparable too. Messages of a burst that land after the planner's
prompt was built cost extra calls (the send is refused until they are shown): that is counted.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.pipeline_build import keeps_prefix
from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

BURSTS = 5
QUESTIONS = 100
BUSY_TRIGGERS = 100
OLD_TARGETS = 10
OLD_CHATTER = 100
"""More than the demo guild's fetch limit (80): the old messages start outside the window."""
HISTORY_ROUTE = ("GET", "/channels/{channel_id}/messages")
MESSAGE_ROUTE = ("GET", "/channels/{channel_id}/messages/{message_id}")
STEP_DELAY = 2.5
WAIT = 30.0
BUSY_WAIT = 180.0
ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "chat" / "sandbox" / "demo_config.json"
PLANNER_MARK = "You decide what happens next"
_UNREAD = re.compile(r"You have (\d+) unread message")
_ACTION_LINE = re.compile(r"^\d+\. (\w+): (ok|failed):", re.MULTILINE)


@dataclass
class PlannerPolicy:
    """Answers the planner from its prompt: ``direct`` sends once unread messages are shown;
    ``read-first`` reads them, then sends (the old flow). Persona turns get a short reply."""

    style: str = "direct"

    def __call__(self, body: dict[str, Any]) -> Any:
        from chat.llm.fake_server import Reply

        messages = body["messages"]
        if PLANNER_MARK not in str(messages[0]["content"]):
            return Reply("sure, see you there.")
        prompt = "\n".join(str(m["content"]) for m in messages[1:])
        unread = int(_UNREAD.search(prompt)[1]) if _UNREAD.search(prompt) else 0
        actions = _ACTION_LINE.findall(prompt)
        last = actions[-1] if actions else None

        def act(**fields: Any) -> Reply:
            return Reply(json.dumps(fields))

        if self.style == "direct":
            if unread:
                return act(action="send_message", persona="Tomori")
            return act(action="continue")
        if unread:
            return act(action="read_unread_messages")
        if last == ("read_unread_messages", "ok"):
            return act(action="send_message", persona="Tomori")
        return act(action="continue")


@dataclass
class Figures:
    replies: int
    calls: int
    seconds: list[float]
    history_reads: int = 0
    """REST history reads (``GET /channels/{id}/messages``) during the run."""
    message_gets: int = 0
    """Single-message GETs (``GET /channels/{id}/messages/{id}``) during the run."""
    reply_targets: int = 0
    """Distinct messages that the run's messages (triggers and replies alike) reply to."""
    old_targets: int = 0
    """Of ``reply_targets``, those posted before the run."""

    @property
    def calls_per_reply(self) -> float:
        return self.calls / self.replies if self.replies else float("nan")

    def per_100_turns(self, count: int) -> float:
        return 100 * count / self.replies if self.replies else float("nan")


@dataclass(frozen=True)
class PrefixFigures:
    """How stable a channel's consecutive prompts were (see the module docstring, point 2)."""

    kept: float
    """Share of counted pairs whose dialogue keeps the previous prompt's dialogue prefix."""
    repeated: float
    """Mean share of a prompt's tokens in leading items identical to the previous prompt's."""
    pairs: int


def prefix_figures(channel_id: int) -> PrefixFigures:
    """`PrefixFigures` over the channel's replied turns, in order."""
    from chat.models import Turn
    from chat.pipeline.items import ItemTag

    turns = Turn.objects.filter(channel_id=channel_id, status=Turn.Status.REPLIED).order_by("id")
    prompts = [
        ((turn.window.get("message_ids") or [None])[0], turn.context_items) for turn in turns
    ]
    kept = pairs = 0
    repeated = 0.0
    counting = False
    for (first_before, before), (first, now) in itertools.pairwise(prompts):
        counting = counting or first != first_before
        if not counting:
            continue
        pairs += 1
        dialogue_before, dialogue = (
            [item["text"] for item in items if item["tag"] == ItemTag.DIALOGUE_HISTORY]
            for items in (before, now)
        )
        kept += keeps_prefix(dialogue_before, dialogue)
        same = 0
        for earlier, later in zip(before, now, strict=False):
            if (earlier["role"], earlier["text"]) != (later["role"], later["text"]):
                break
            same += later["tokens"]
        repeated += same / sum(item["tokens"] for item in now)
    if not pairs:
        return PrefixFigures(kept=float("nan"), repeated=float("nan"), pairs=0)
    return PrefixFigures(kept=kept / pairs, repeated=repeated / pairs, pairs=pairs)


@dataclass(frozen=True)
class _Mark:
    """The counters at the start of a run in one channel."""

    calls: int
    replies: int
    reads: int
    gets: int
    newest_id: int
    """The channel's newest message: later messages are the run's."""

    @classmethod
    def now(cls, world: Any, channel_id: int) -> _Mark:
        counts = world.sandbox.request_counts
        messages = world.sandbox.sandbox.channel_messages(channel_id)
        return cls(
            calls=len(world.llm.chat_bodies),
            replies=len(world.bot_messages(channel_id)),
            reads=counts.get(HISTORY_ROUTE, 0),
            gets=counts.get(MESSAGE_ROUTE, 0),
            newest_id=max((int(m["id"]) for m in messages), default=0),
        )

    def figures(self, world: Any, channel_id: int, seconds: list[float]) -> Figures:
        """What the run spent since this mark."""
        counts = world.sandbox.request_counts
        targets = {
            int(message["message_reference"]["message_id"])
            for message in world.sandbox.sandbox.channel_messages(channel_id)
            if int(message["id"]) > self.newest_id and message.get("message_reference")
        }
        return Figures(
            replies=len(world.bot_messages(channel_id)) - self.replies,
            calls=len(world.llm.chat_bodies) - self.calls,
            seconds=seconds,
            history_reads=counts.get(HISTORY_ROUTE, 0) - self.reads,
            message_gets=counts.get(MESSAGE_ROUTE, 0) - self.gets,
            reply_targets=len(targets),
            old_targets=sum(target <= self.newest_id for target in targets),
        )


async def _measure(
    world: Any, channel_id: int, lines: Callable[[int], list[tuple[int, str]]], rounds: int
) -> Figures:
    """Post ``lines(n)`` for each round, wait for the reply and for the worker to go idle;
    count model calls and replies between the first round and the last idle."""
    mark = _Mark.now(world, channel_id)
    seconds = []
    for n in range(rounds):
        expected = len(world.bot_messages(channel_id)) + 1
        started = time.perf_counter()
        for author, content in lines(n):
            world.say(content, channel_id=channel_id, author=author)
        await _until(lambda e=expected: len(world.bot_messages(channel_id)) >= e)
        seconds.append(time.perf_counter() - started)
        await world.drained()
    return mark.figures(world, channel_id, seconds)


def _seed_old_messages(world: Any, channel_id: int, author: int) -> list[int]:
    """``OLD_TARGETS`` messages, then ``OLD_CHATTER`` more that push them out of the window;
    returns the first ones' ids. None of them triggers a persona."""
    targets = [
        int(world.say(f"an old thought {n}", channel_id=channel_id, author=author)["id"])
        for n in range(OLD_TARGETS)
    ]
    for n in range(OLD_CHATTER):
        world.say(f"chatter {n}", channel_id=channel_id, author=author)
    return targets


async def _measure_busy(world: Any, channel_id: int, author: int, targets: list[int]) -> Figures:
    """``BUSY_TRIGGERS`` triggers in one go, two in three replying to one of ``targets``; wait
    until each has its reply and the worker is idle; count as `_measure`."""
    mark = _Mark.now(world, channel_id)
    started = time.perf_counter()
    triggers = set()
    for n in range(BUSY_TRIGGERS):
        reply_to = targets[n % len(targets)] if n % 3 != 2 else None
        said = world.say(
            f"tomori, about that ({n})", channel_id=channel_id, author=author, reply_to=reply_to
        )
        triggers.add(int(said["id"]))

    def answered() -> bool:
        replied_to = {
            int((m.get("message_reference") or {}).get("message_id") or 0)
            for m in world.bot_messages(channel_id)
        }
        return triggers <= replied_to

    await _until(answered, within=BUSY_WAIT)
    seconds = [time.perf_counter() - started]
    await world.drained()
    return mark.figures(world, channel_id, seconds)


async def _until(check: Callable[[], bool], *, within: float = WAIT) -> None:
    deadline = time.perf_counter() + within
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError("no reply within the benchmark's wait")
        await asyncio.sleep(0.02)


async def _run() -> tuple[dict[str, Figures], dict[str, PrefixFigures]]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.fake_server import FakeLLMServer
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
    from chat.sandbox.harness import World
    from personas.services import config_import

    general, poetry = DEMO_CHANNEL_IDS["general"], DEMO_CHANNEL_IDS["poetry"]
    autonomous = DEMO_CHANNEL_IDS["autonomous"]
    alice, bob = DEMO_USER_IDS["alice"], DEMO_USER_IDS["bob"]
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    policy = PlannerPolicy()
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with (
        SandboxServer(demo_sandbox(), gateway=gateway) as sandbox,
        FakeLLMServer(responder=policy) as llm,
    ):
        world = World(sandbox=sandbox, llm=llm)
        old_targets = _seed_old_messages(world, poetry, bob)
        await world.start_worker(step_delay=STEP_DELAY)
        try:
            figures = {
                "reactive": await _measure(
                    world, general, lambda n: [(alice, f"tomori, question {n}")], QUESTIONS
                ),
                "busy": await _measure_busy(world, poetry, alice, old_targets),
            }

            def burst(n: int) -> list[tuple[int, str]]:
                return [
                    (alice, f"who is coming on day {n}?"),
                    (bob, "I am, with the drums"),
                    (alice, "and you, tomori?"),
                ]

            figures["autonomous"] = await _measure(world, autonomous, burst, BURSTS)
            policy.style = "read-first"
            figures["baseline"] = await _measure(world, autonomous, burst, BURSTS)
            prefixes = {
                "reactive": await sync_to_async(prefix_figures)(general),
                "busy": await sync_to_async(prefix_figures)(poetry),
            }
        finally:
            await world.stop_worker()
            # The worker's database work ran on sync_to_async's thread: close its connection
            # there, so the throwaway database can be dropped.
            await sync_to_async(connections.close_all)()
    return figures, prefixes


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-model-calls-") as directory:
        database = setup_django(directory, prefix="bench_model_calls")
        try:
            figures, prefixes = asyncio.run(_run())
        finally:
            teardown_django(database)
    talk, busy = figures["reactive"], figures["busy"]
    talk_prefix, busy_prefix = prefixes["reactive"], prefixes["busy"]
    if "--rows" in sys.argv:
        emit(
            [
                Row("model calls per reply, reactive", f"{talk.calls_per_reply:.2f}", goal="1"),
                Row(
                    f"REST history reads per 100 turns, conversation ({talk.replies} turns)",
                    f"{talk.per_100_turns(talk.history_reads):.0f}",
                    "reading every turn: 100",
                    "≤ 2",
                ),
                Row(
                    "single-message GETs per 100 turns, conversation",
                    f"{talk.per_100_turns(talk.message_gets):.0f}",
                    f"distinct reply targets: {talk.reply_targets}",
                    "≤ 1 per distinct reply target",
                ),
                Row(
                    f"REST history reads per 100 turns, busy ({busy.replies} triggers at once)",
                    f"{busy.per_100_turns(busy.history_reads):.0f}",
                    "reading every turn: 100",
                ),
                Row(
                    f"single-message GETs per 100 turns, busy ({busy.old_targets} old messages "
                    "replied to)",
                    f"{busy.per_100_turns(busy.message_gets):.0f}",
                    f"distinct reply targets: {busy.reply_targets}",
                    "≤ 1 per distinct reply target",
                ),
                Row(
                    f"prompts keeping the previous dialogue prefix; tokens repeated, busy "
                    f"({busy.replies} triggers at once: queued turns; {busy_prefix.pairs} pairs)",
                    f"kept {busy_prefix.kept:.1%}; repeated {busy_prefix.repeated:.1%}",
                    f"conversation ({talk_prefix.pairs} pairs): kept {talk_prefix.kept:.1%}; "
                    f"repeated {talk_prefix.repeated:.1%}",
                    "≥ the conversation's",
                ),
                Row(
                    "model calls per reply, autonomous",
                    f"{figures['autonomous'].calls_per_reply:.2f}",
                    f"old three-step flow: {figures['baseline'].calls_per_reply:.2f}",
                    "≤ 2",
                ),
            ]
        )
        return
    print(f"Model calls per delivered reply (step delay {STEP_DELAY} s between planner steps)")
    rows = [
        ("reactive: one trigger per reply", figures["reactive"], "1"),
        ("autonomous: bursts of 3, send once shown", figures["autonomous"], "≤ 2"),
        ("… baseline: read, then send, then turn", figures["baseline"], "3 (old rule)"),
    ]
    for label, figure, goal in rows:
        median = statistics.median(figure.seconds)
        print(
            f"  {label:<44} {figure.calls_per_reply:4.2f} calls/reply "
            f"({figure.calls} calls, {figure.replies} replies), "
            f"median {median:4.2f} s to reply   goal {goal}"
        )
    print()
    print("REST reads per 100 turns            history reads  single-message GETs  reply targets")
    for label, figure in (
        (f"conversation ({talk.replies} turns)", talk),
        (f"busy stretch ({busy.replies} turns)", busy),
    ):
        print(
            f"  {label:<34}{figure.per_100_turns(figure.history_reads):>13.0f}"
            f"{figure.per_100_turns(figure.message_gets):>21.0f}"
            f"{figure.reply_targets:>15} ({figure.old_targets} old)"
        )
    print()
    print("Consecutive prompts                 kept prefix  tokens repeated  pairs counted")
    for label, prefix in (
        ("conversation", talk_prefix),
        ("busy stretch (queued turns)", busy_prefix),
    ):
        print(f"  {label:<34}{prefix.kept:>11.1%}{prefix.repeated:>17.1%}{prefix.pairs:>15}")


if __name__ == "__main__":
    main()
