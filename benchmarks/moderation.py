"""Moderation: what checking every piece costs a person waiting for a streamed reply.

Run: ``.venv/bin/python -m benchmarks.moderation``

The real worker (discord.py client, scheduler, pipeline, streamed model requests, the moderation
client) runs against the local sandbox over websockets and the fake model server over HTTP, on a
throwaway database (as `benchmarks.model_calls` sets one up). The fake model writes a reply of
three paragraphs (`WORDS_PER_PARAGRAPH` one-word tokens each, `TOKENS_PER_S` after
`FIRST_TOKEN_S`); its moderation service answers every check after `CHECK_LATENCY_S` (50 ms, a
hosted service's usual figure). The demo guild keeps moderation on; a second guild, configured
the same but with ``"moderation": "off"``, is the baseline. The main persona answers `REPLIES`
triggers in each, one at a time, alternating between the two guilds reply by reply, so both see
the same machine and the same worker (no configuration changes during the run); the first reply
in each is a warm-up, not measured. Times are the sandbox's arrival times of the bot's sends
against the trigger and the fake model's send times of its words (one clock, one process):

- **first message**: the first persona message's arrival after the trigger (and, as a
  diagnostic, after the first paragraph's last token);
- **last message**: the third (last) message's arrival after the trigger (and after the
  reply's last token).

The goal: with moderation on, each at most 60 ms later than with it off (p95 against p95): at
most one check's wait, since each paragraph is checked while the model writes the next.
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

REPLIES = 50
BASELINE_GUILD_ID = 1191168914227201000
BASELINE_CHANNEL_ID = 1191168914227201010
WORDS_PER_PARAGRAPH = 15
FIRST_TOKEN_S = 0.2
TOKENS_PER_S = 50.0
CHECK_LATENCY_S = 0.05
GOAL_MS = 60
SEND = ("POST", "/channels/{channel_id}/messages")
WAIT = 60.0


def reply_text() -> str:
    """Three paragraphs of `WORDS_PER_PARAGRAPH` one-word tokens, none of them flagged."""
    return "\n\n".join(
        " ".join(f"word{p}x{n}" for n in range(WORDS_PER_PARAGRAPH)) + "." for p in range(3)
    )


@dataclass
class Figures:
    first_s: list[float] = field(default_factory=list)
    last_s: list[float] = field(default_factory=list)
    first_lag_s: list[float] = field(default_factory=list)
    """The first message after the first paragraph's last token."""
    last_lag_s: list[float] = field(default_factory=list)
    """The last message after the reply's last token."""
    check_ms: list[float] = field(default_factory=list)
    """Each check's latency as the turn recorded it (moderation on only)."""


async def _run() -> dict[str, Figures]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.fake_server import FakeLLMServer, Reply, StreamPace
    from chat.llm.moderation import ModerationOnError
    from chat.models import Turn
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
    from chat.tests.e2e.conftest import World
    from personas.services import config_import

    channels = {"on": DEMO_CHANNEL_IDS["general"], "off": BASELINE_CHANNEL_ID}
    await sync_to_async(config_import)(data=_configuration())
    text = reply_text()
    pace = StreamPace(first_token_s=FIRST_TOKEN_S, words_per_s=TOKENS_PER_S)
    figures = {"on": Figures(), "off": Figures()}
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    world_state = demo_sandbox()
    world_state.add_guild("Baseline", guild_id=BASELINE_GUILD_ID)
    world_state.add_text_channel(BASELINE_GUILD_ID, "general", channel_id=BASELINE_CHANNEL_ID)
    world_state.add_member(BASELINE_GUILD_ID, DEMO_USER_IDS["alice"])
    async with (
        SandboxServer(world_state, gateway=gateway) as sandbox,
        FakeLLMServer(
            responder=lambda body: Reply(text, pace=pace), moderation_latency_s=CHECK_LATENCY_S
        ) as llm,
    ):
        world = World(sandbox=sandbox, llm=llm)
        await world.start_worker(stream=True, moderation=ModerationOnError.WITHHOLD)
        try:
            for n in range(2 * (REPLIES + 1)):
                setting = ("on", "off")[n % 2]
                before = len(sandbox.requests(*SEND))
                call = len(llm.chat_bodies)
                started = time.monotonic()
                trigger = world.say(f"tomori, story {n}", channel_id=channels[setting])
                turn = await asyncio.wait_for(_finished(Turn, int(trigger["id"])), WAIT)
                await world.settle()
                sends = sandbox.requests(*SEND)[before:]
                if len(sends) != 3 or turn.status != "replied":
                    raise RuntimeError(f"reply {n}: {turn.status}, {len(sends)} sends")
                if bool(turn.moderation) != (setting == "on"):
                    raise RuntimeError(f"reply {n} was not moderated as {setting}")
                if n >= 2:  # the first in each guild warms its configuration and window
                    words = llm.word_times[call]
                    into = figures[setting]
                    into.first_s.append(sends[0].at - started)
                    into.last_s.append(sends[-1].at - started)
                    into.first_lag_s.append(sends[0].at - words[WORDS_PER_PARAGRAPH - 1])
                    into.last_lag_s.append(sends[-1].at - words[-1])
                    into.check_ms += [c["latency_ms"] for c in turn.moderation.get("checks", [])]
        finally:
            await world.stop_worker()
            await sync_to_async(connections.close_all)()
    return figures


def _configuration() -> dict:
    """The demo configuration (moderation on), and the same guild again as the baseline: its
    own id and channel, moderation off."""
    document = json.loads(DEMO_CONFIG.read_text())
    baseline = json.loads(json.dumps(document["guilds"][0]))
    baseline |= {"id": str(BASELINE_GUILD_ID), "name": "Baseline", "moderation": "off"}
    baseline["channels"] = [{"id": str(BASELINE_CHANNEL_ID), "mode": "reactive"}]
    document["guilds"].append(baseline)
    return document


async def _finished(turn_model, trigger_id: int):
    """The turn answering ``trigger_id`` once it has ended (the database is polled: it is the
    worker's record)."""
    finished = turn_model.objects.filter(
        trigger_message_id=trigger_id, status__in=["replied", "failed", "aborted", "withheld"]
    )
    while (turn := await finished.afirst()) is None:  # noqa: ASYNC110 - no event tells a turn ended
        await asyncio.sleep(0.05)
    return turn


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-moderation-") as directory:
        database = setup_django(directory, prefix="bench_moderation")
        try:
            figures = asyncio.run(_run())
        finally:
            teardown_django(database)
    on, off = figures["on"], figures["off"]
    rows = []
    for label, attribute, token in (
        ("first", "first", "its paragraph's last token"),
        ("last", "last", "the last token"),
    ):
        moderated, baseline = getattr(on, f"{attribute}_s"), getattr(off, f"{attribute}_s")
        lag, lag_baseline = getattr(on, f"{attribute}_lag_s"), getattr(off, f"{attribute}_lag_s")
        added = (percentile(moderated, 0.95) - percentile(baseline, 0.95)) * 1000
        rows.append(
            Row(
                f"moderation on ({CHECK_LATENCY_S * 1000:.0f} ms checks): {label} message of a "
                f"3-paragraph streamed reply after the trigger (p95 of {REPLIES})",
                f"{percentile(moderated, 0.95):.3f} s ({added:+.0f} ms; median "
                f"{(statistics.median(moderated) - statistics.median(baseline)) * 1000:+.0f} ms)",
                f"moderation off: {percentile(baseline, 0.95):.3f} s",
                f"≤ +{GOAL_MS} ms",
            )
        )
        rows.append(
            Row(
                f"moderation on: {label} message after {token} (p95, diagnostic)",
                f"{percentile(lag, 0.95) * 1000:.0f} ms",
                f"moderation off: {percentile(lag_baseline, 0.95) * 1000:.0f} ms",
                "—",
            )
        )
    rows.append(
        Row(
            "moderation: one check's latency as the turn recorded it (diagnostic)",
            f"median {statistics.median(on.check_ms):.0f} ms, "
            f"p95 {percentile(on.check_ms, 0.95):.0f} ms ({len(on.check_ms)} checks)",
            f"the service answers after {CHECK_LATENCY_S * 1000:.0f} ms",
            "—",
        )
    )
    if "--rows" in sys.argv:
        emit(rows)
        return
    print(f"Moderation ({REPLIES} replies with it on, {REPLIES} off, alternating)")
    for row in rows:
        print(f"  {row.what}: {row.measured}   (baseline {row.baseline}; goal {row.goal})")


if __name__ == "__main__":
    main()
