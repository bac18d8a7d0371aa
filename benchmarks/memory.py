"""Worker memory: resident size idle, and holding 1,000 active channels' windows and contexts.

Run: ``.venv/bin/python -m benchmarks.memory`` (``make bench`` runs it).

What a worker keeps per active channel is its history window (`chat.windows.WindowRegistry`, at
most ``MAX_CHANNELS`` of them) and the last built context per persona (`TurnCaches`, at most
``MAX_WARM_CONTEXTS``). This builds both for 1,000 channels of 80 messages with the real
pipeline (o200k token counts included), from messages shaped as the gateway converts them,
and reads the process's resident set size from ``/proc/self/status`` (then once more with the
offline embedding model of long-term memory loaded: all-MiniLM-L6-v2, the default, here; the
same steps in a second process give the figure with WordLlama) — beside the same
process's size once it has imported everything the worker imports (``chat.worker``), without
and with the tokenizer, measured in the same run.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
import subprocess
import sys

from benchmarks.table import Row, emit

CHANNELS = 1000
MESSAGES = 80
SNOWFLAKE = 1_300_000_000_000_000_000


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
    import chat.worker  # noqa: F401  (everything the worker process imports)
    from chat.gateway.convert import shared_author
    from chat.pipeline.context import TurnInput, build_turn_context
    from chat.pipeline.tokens import default_token_counter
    from chat.pipeline.types import HistoryMessage, NameDirectory, PersonaProfile
    from chat.pipeline.window_reuse import GatewayCacheView
    from chat.windows import WindowRegistry

    bare = rss_mb()
    counter = default_token_counter()
    counter.count("warm the tokenizer up")
    idle = rss_mb()

    tomori = PersonaProfile(name="Tomori", is_main=True)
    personas = (tomori, PersonaProfile(name="Kaito", aliases=("Kai",)))
    people = [(SNOWFLAKE + 1, "Alice", None), (SNOWFLAKE + 2, "Bob", None)]
    people.append((SNOWFLAKE + 3, "Tomori", "Tomori"))
    names = NameDirectory(users={user_id: name for user_id, name, _ in people})
    start = dt.datetime(2026, 7, 11, 9, 0, tzinfo=dt.UTC)

    def history(channel: int) -> list[HistoryMessage]:
        """A channel's messages as the gateway adapter converts them (`Author` objects as
        `chat.gateway.convert` hands them out)."""
        messages = []
        for n in range(1, MESSAGES + 1):
            user_id, name, persona = people[n % 3]
            messages.append(
                HistoryMessage(
                    id=SNOWFLAKE + channel * 1000 + n,
                    channel_id=channel,
                    author=shared_author(user_id, name, persona is not None, None, persona),
                    content=f"channel {channel}, line {n}: what do you think about the new song?",
                    created_at=start + dt.timedelta(minutes=n),
                )
            )
        return messages

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
                TurnInput(
                    persona=tomori,
                    history=read.messages,
                    trigger_id=read.messages[-1].id,
                    now=read.messages[-1].created_at,
                    timezone="UTC",
                    token_counter=counter,
                    personas=personas,
                    names=names,
                )
            )

    asyncio.run(fill())
    active = rss_mb()
    # The offline embedding model long-term memory recall loads once per worker process.
    from chat.llm.embeddings import MiniLMEmbeddings, WordLlamaEmbeddings

    model = WordLlamaEmbeddings() if "--wordllama" in sys.argv else MiniLMEmbeddings()
    model.embed(["what do you think about the new song?"])
    with_model = rss_mb()
    if "--wordllama" in sys.argv:
        print(json.dumps({"active": active, "with_model": with_model}))
        return
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", "--wordllama"],
        capture_output=True,
        text=True,
        check=True,
    )
    wordllama = json.loads(done.stdout.strip().splitlines()[-1])
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
                Row(
                    f"worker RSS, {CHANNELS} active channels, embedding model loaded "
                    "(all-MiniLM-L6-v2, long-term memory recall)",
                    f"{with_model:.0f} MB (+{with_model - active:.0f} MB)",
                    f"without the model: {active:.0f} MB; with WordLlama instead (another "
                    f"process): {wordllama['with_model']:.0f} MB "
                    f"(+{wordllama['with_model'] - wordllama['active']:.0f} MB)",
                    "≤ 300 MB",
                ),
            ]
        )
        return
    print(f"worker memory ({CHANNELS} channels of {MESSAGES} messages, windows and contexts):")
    print(f"  baseline, Django, discord.py and the pipeline loaded: {bare:.0f} MB")
    print(f"  idle, with the o200k tokenizer loaded: {idle:.0f} MB (+{idle - bare:.0f} MB)")
    print(f"  with {CHANNELS} active channels: {active:.0f} MB (+{active - idle:.0f} MB)")
    other, other_active = wordllama["with_model"], wordllama["active"]
    print(
        f"  and the embedding model loaded (all-MiniLM-L6-v2): {with_model:.0f} MB "
        f"(+{with_model - active:.0f} MB); with WordLlama instead, in another process: "
        f"{other:.0f} MB (+{other - other_active:.0f} MB)"
    )


if __name__ == "__main__":
    sys.exit(main())
