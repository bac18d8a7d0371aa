"""Streaming delivery: how soon a reply's first and last messages reach Discord, per delivery
mode, and what each mode costs in Discord requests.

Run: ``.venv/bin/python -m benchmarks.streaming``

The real worker (discord.py client, scheduler, pipeline, model access with streamed requests)
runs against the local sandbox over websockets and the fake model server over HTTP, on a
throwaway database (as `benchmarks.model_calls` sets one up). The fake model writes 300 tokens
(one word each) in three paragraphs of 100, at 30 tokens a second after 0.8 s, as a hosted
model does. For each mode (``paragraphs``, ``edit``, ``whole``) the main persona answers
`REPLIES` triggers, one at a time; times are the sandbox's arrival times of the bot's requests
against the fake model's send times of its words (one clock, one process):

- **first message**: the first persona message's arrival, less the time the first paragraph's
  last token went out (the goal: within 150 ms, p95); for ``edit``, less the first token's;
  for ``whole``, less the last token's.
- **last message**: the arrival of the request that made the reply complete (its last message,
  or in ``edit`` mode its last edit), less the time the last token went out.
- **Discord requests per reply**: every REST request from the trigger to the turn's end
  (sends, edits, typing, history reads), with the sends and edits among them.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field

from benchmarks.model_calls import DEMO_CONFIG
from benchmarks.table import Row, emit, percentile
from benchmarks.throwaway import setup_django, teardown_django

REPLIES = 4
WORDS_PER_PARAGRAPH = 100
FIRST_TOKEN_S = 0.8
TOKENS_PER_S = 30.0
MODES = ("paragraphs", "edit", "whole")
SEND = ("POST", "/channels/{channel_id}/messages")
EDIT = ("PATCH", "/channels/{channel_id}/messages/{message_id}")
WAIT = 60.0


def reply_text() -> str:
    """300 one-word tokens in three paragraphs of 100 (about 700 characters each)."""
    return "\n\n".join(
        " ".join(f"word{p}x{n}" for n in range(WORDS_PER_PARAGRAPH)) + "." for p in range(3)
    )


@dataclass
class ModeFigures:
    first_lag_s: list[float] = field(default_factory=list)
    """First persona message, less the token it waited for: the first paragraph's last
    (``paragraphs``), the first (``edit``), the last (``whole``)."""
    first_s: list[float] = field(default_factory=list)
    """First persona message, from the trigger."""
    last_lag_s: list[float] = field(default_factory=list)
    last_s: list[float] = field(default_factory=list)
    requests: list[int] = field(default_factory=list)
    sends: list[int] = field(default_factory=list)
    edits: list[int] = field(default_factory=list)
    edits_per_second: list[int] = field(default_factory=list)
    """The most edits of one reply that arrived within any one second."""


async def _run() -> dict[str, ModeFigures]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace
    from chat.models import Turn
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, demo_sandbox
    from chat.sandbox.harness import World
    from personas.models import Persona
    from personas.services import config_import

    general = DEMO_CHANNEL_IDS["general"]
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    text = reply_text()
    pace = StreamPace(first_token_s=FIRST_TOKEN_S, words_per_s=TOKENS_PER_S)
    figures = {mode: ModeFigures() for mode in MODES}
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    async with (
        SandboxServer(demo_sandbox(), gateway=gateway) as sandbox,
        FakeLLMServer(responder=lambda body: Reply(text, pace=pace)) as llm,
    ):
        world = World(sandbox=sandbox, llm=llm)
        await world.start_worker(stream=True)
        try:
            tomori = await Persona.objects.aget(name="Tomori")
            for mode in MODES:
                # Saved as the dashboard saves it: the worker keeps configurations until a
                # save moves their stamp (a queryset update would not, and every mode would
                # run as the first).
                tomori.delivery_mode = mode
                await tomori.asave(update_fields=["delivery_mode"])
                for n in range(REPLIES):
                    before = len(sandbox.requests())
                    call = len(llm.chat_bodies)
                    started = time.monotonic()
                    trigger = world.say(f"tomori, story {mode} {n}", channel_id=general)
                    await asyncio.wait_for(_finished(Turn, int(trigger["id"])), WAIT)
                    await world.settle()
                    requests = sandbox.requests()[before:]
                    words = llm.word_times[call]
                    _measure(figures[mode], mode, requests, words, started)
        finally:
            await world.stop_worker()
            await sync_to_async(connections.close_all)()
    return figures


async def _finished(turn_model, trigger_id: int) -> None:
    """Until the turn answering ``trigger_id`` has ended (the database is polled: it is the
    worker's record)."""
    finished = turn_model.objects.filter(
        trigger_message_id=trigger_id, status__in=["replied", "failed", "aborted"]
    )
    while not await finished.aexists():  # noqa: ASYNC110 - no event tells a turn ended
        await asyncio.sleep(0.05)


def _measure(into: ModeFigures, mode: str, requests, words: list[float], started: float) -> None:
    sends = [r for r in requests if (r.method, r.route) == SEND]
    edits = [r for r in requests if (r.method, r.route) == EDIT]
    paragraph_end = words[WORDS_PER_PARAGRAPH - 1]
    last_token = words[-1]
    first = sends[0].at
    done = max(r.at for r in [*sends, *edits])
    waited_for = {"paragraphs": paragraph_end, "edit": words[0], "whole": last_token}[mode]
    into.first_lag_s.append(first - waited_for)
    into.first_s.append(first - started)
    into.last_lag_s.append(done - last_token)
    into.last_s.append(done - started)
    into.requests.append(len(requests))
    into.sends.append(len(sends))
    into.edits.append(len(edits))
    times = [r.at for r in edits]
    into.edits_per_second.append(
        max((sum(1 for t in times if start <= t < start + 1.0) for start in times), default=0)
    )


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-streaming-") as directory:
        database = setup_django(directory, prefix="bench_streaming")
        try:
            figures = asyncio.run(_run())
        finally:
            teardown_django(database)
    whole = figures["whole"]
    rows = []
    waited_for = {
        "paragraphs": "its paragraph's last token",
        "edit": "the first token",
        "whole": "the last token",
    }
    for mode in MODES:
        f = figures[mode]
        rows.append(
            Row(
                f"streaming {mode}: first persona message after the trigger (300 tokens in "
                "3 paragraphs, 30 tok/s after 0.8 s)",
                f"{statistics.median(f.first_s):.2f} s median; p95 "
                f"{percentile(f.first_lag_s, 0.95) * 1000:+.0f} ms after {waited_for[mode]}",
                f"whole: {statistics.median(whole.first_s):.2f} s",
                "unchanged" if mode == "whole" else "≤ that token + 150 ms (p95)",
            )
        )
        rows.append(
            Row(
                f"streaming {mode}: the reply complete (last message or edit) after the last token",
                f"p95 {percentile(f.last_lag_s, 0.95) * 1000:.0f} ms "
                f"({statistics.median(f.last_s):.2f} s after the trigger)",
                f"whole: p95 {percentile(whole.last_lag_s, 0.95) * 1000:.0f} ms",
                "≤ 1 s (one edit a second)" if mode == "edit" else "≤ 150 ms",
            )
        )
        edits = ""
        if mode == "edit":
            edits = f", at most {max(f.edits_per_second)} in any second"
        rows.append(
            Row(
                f"streaming {mode}: Discord requests per reply",
                f"{statistics.median(f.requests):.0f} ({statistics.median(f.sends):.0f} sends, "
                f"{statistics.median(f.edits):.0f} edits{edits})",
                f"whole: {statistics.median(whole.requests):.0f}",
                "≤ 1 edit a second" if mode == "edit" else "—",
            )
        )
    if "--rows" in sys.argv:
        emit(rows)
        return
    print(f"Streaming delivery ({REPLIES} replies per mode)")
    for row in rows:
        print(f"  {row.what}: {row.measured}   (baseline {row.baseline}; goal {row.goal})")


if __name__ == "__main__":
    main()
