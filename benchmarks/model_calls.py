"""Model calls per delivered reply: reactive, autonomous, and the old three-step flow.

Run: ``.venv/bin/python -m benchmarks.model_calls``

The real worker (discord.py client, scheduler, planner loop, pipeline, model access) runs
against the local sandbox over websockets and the fake model server over HTTP, on a throwaway
SQLite database in a temporary directory (never the configured one) with an in-memory channel
layer. The planner's decisions come from a fixed policy answering from the prompt it is shown,
so the figures count what the product spends, not what a model happens to choose:

1. **Reactive**: ``tomori, question N`` in #general, one at a time.
2. **Autonomous**: bursts of three messages in #autonomous; the policy sends as soon as the
   unread messages are in its prompt ("direct").
3. **Baseline, the old three-step flow**: the same bursts, with the policy the old prompt asked
   for — ``read_unread_messages`` first, then ``send_message``, then the persona's turn.

Both autonomous runs use the production step delay (2.5 s between planner steps), so the
seconds to a reply are comparable too. Messages of a burst that land after the planner's
prompt was built cost extra calls (the send is refused until they are shown): that is counted.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.table import Row, emit

BURSTS = 5
QUESTIONS = 100
HISTORY_ROUTE = ("GET", "/channels/{channel_id}/messages")
STEP_DELAY = 2.5
WAIT = 30.0
ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "chat" / "sandbox" / "demo_config.json"
PLANNER_MARK = "You decide what happens next"
_UNREAD = re.compile(r"You have (\d+) unread message")
_ACTION_LINE = re.compile(r"^\d+\. (\w+): (ok|failed):", re.MULTILINE)


def _setup_django(directory: str) -> None:
    """Django on a scratch SQLite file and an in-memory channel layer; migrated."""
    os.environ["DATABASE_URL"] = f"sqlite:///{directory}/bench.sqlite3"
    os.environ.setdefault("DJANGO_SECRET_KEY", "benchmark-only-secret-key")
    os.environ["DJANGO_SETTINGS_MODULE"] = "botproject.settings"
    import django
    from django.conf import settings

    django.setup()
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    logging.disable(logging.WARNING)  # the worker's per-request log lines would bury the table


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

    @property
    def calls_per_reply(self) -> float:
        return self.calls / self.replies if self.replies else float("nan")


async def _measure(
    world: Any, channel_id: int, lines: Callable[[int], list[tuple[int, str]]], rounds: int
) -> Figures:
    """Post ``lines(n)`` for each round, wait for the reply and for the worker to go idle;
    count model calls and replies between the first round and the last idle."""
    calls_before = len(world.llm.chat_bodies)
    replies_before = len(world.bot_messages(channel_id))
    reads_before = world.sandbox.request_counts.get(HISTORY_ROUTE, 0)
    seconds = []
    for n in range(rounds):
        expected = len(world.bot_messages(channel_id)) + 1
        started = time.perf_counter()
        for author, content in lines(n):
            world.say(content, channel_id=channel_id, author=author)
        await _until(lambda e=expected: len(world.bot_messages(channel_id)) >= e)
        seconds.append(time.perf_counter() - started)
        await world.drained()
    return Figures(
        replies=len(world.bot_messages(channel_id)) - replies_before,
        calls=len(world.llm.chat_bodies) - calls_before,
        seconds=seconds,
        history_reads=world.sandbox.request_counts.get(HISTORY_ROUTE, 0) - reads_before,
    )


async def _until(check: Callable[[], bool]) -> None:
    deadline = time.perf_counter() + WAIT
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError("no reply within the benchmark's wait")
        await asyncio.sleep(0.02)


async def _run() -> dict[str, Figures]:
    from asgiref.sync import sync_to_async

    from chat.llm.fake_server import FakeLLMServer
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
    from chat.tests.e2e.conftest import World
    from personas.services import config_import

    general, autonomous = DEMO_CHANNEL_IDS["general"], DEMO_CHANNEL_IDS["autonomous"]
    alice, bob = DEMO_USER_IDS["alice"], DEMO_USER_IDS["bob"]
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    policy = PlannerPolicy()
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with (
        SandboxServer(demo_sandbox(), gateway=gateway) as sandbox,
        FakeLLMServer(responder=policy) as llm,
    ):
        world = World(sandbox=sandbox, llm=llm)
        await world.start_worker(step_delay=STEP_DELAY)
        try:
            figures = {
                "reactive": await _measure(
                    world, general, lambda n: [(alice, f"tomori, question {n}")], QUESTIONS
                ),
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
        finally:
            await world.stop_worker()
    return figures


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-model-calls-") as directory:
        _setup_django(directory)
        figures = asyncio.run(_run())
    if "--rows" in sys.argv:
        emit(
            [
                Row(
                    "model calls per reply, reactive",
                    f"{figures['reactive'].calls_per_reply:.2f}",
                    goal="1",
                ),
                Row(
                    f"REST history reads per 100 turns, conversation "
                    f"({figures['reactive'].replies} turns)",
                    f"{100 * figures['reactive'].history_reads / figures['reactive'].replies:.0f}",
                    "reading every turn: 100",
                    "≤ 2",
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


if __name__ == "__main__":
    main()
