"""Worker memory: resident size idle, and holding 1,000 active channels' windows and contexts.

Run: ``.venv/bin/python -m benchmarks.memory`` (``make bench`` runs it).

What a worker keeps per active channel is its history window (`chat.windows.WindowRegistry`, at
most ``MAX_CHANNELS`` of them) and the last built context per persona (`TurnRuntime`, at most
``MAX_WARM_CONTEXTS``). This builds both for 1,000 channels of 80 messages with the real
pipeline (o200k token counts included) and reads the process's resident set size from
``/proc/self/status`` — beside the same process's size after start-up, without and with the
tokenizer, measured in the same run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import sys

from benchmarks.table import Row, emit

CHANNELS = 1000
MESSAGES = 80


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botproject.settings_test")
    import django

    django.setup()
    import discord  # noqa: F401  (what the worker process holds)

    from chat.pipeline.context import build_turn_context
    from chat.pipeline.tokens import default_token_counter
    from chat.pipeline.window_reuse import GatewayCacheView
    from chat.tests.factories import ALICE, BOB, TOMORI, message, turn_input
    from chat.windows import WindowRegistry

    bare = rss_mb()
    counter = default_token_counter()
    counter.count("warm the tokenizer up")
    idle = rss_mb()

    def history(channel: int) -> list:
        return [
            message(
                channel * 1000 + n,
                f"channel {channel}, line {n}: what do you think about the new song?",
                author=(ALICE, BOB, TOMORI)[n % 3],
                minutes=n,
                channel_id=channel,
            )
            for n in range(1, MESSAGES + 1)
        ]

    histories = {channel: history(channel) for channel in range(1, CHANNELS + 1)}

    async def fetch(channel_id: int, limit: int) -> list:
        return list(reversed(histories[channel_id][-limit:]))

    registry = WindowRegistry(
        fetch_history=fetch, cache_view=lambda _: GatewayCacheView(messages=())
    )
    contexts = {}

    async def fill() -> None:
        for channel in histories:
            read = await registry.read(channel, limit=MESSAGES)
            contexts[channel] = build_turn_context(
                turn_input(list(read.messages), token_counter=counter, now=dt.datetime.now(dt.UTC))
            )

    asyncio.run(fill())
    active = rss_mb()
    if "--rows" in sys.argv:
        emit(
            [
                Row(
                    "worker RSS, idle (tokenizer loaded)",
                    f"{idle:.0f} MB",
                    f"without the tokenizer: {bare:.0f} MB",
                ),
                Row(
                    f"worker RSS, {CHANNELS} active channels",
                    f"{active:.0f} MB",
                    f"idle: {idle:.0f} MB",
                    "≤ 250 MB",
                ),
            ]
        )
        return
    print(f"worker memory ({CHANNELS} channels of {MESSAGES} messages, windows and contexts):")
    print(f"  baseline, Django, discord.py and the pipeline loaded: {bare:.0f} MB")
    print(f"  idle, with the o200k tokenizer loaded: {idle:.0f} MB (+{idle - bare:.0f} MB)")
    print(f"  with {CHANNELS} active channels: {active:.0f} MB (+{active - idle:.0f} MB)")


if __name__ == "__main__":
    sys.exit(main())
