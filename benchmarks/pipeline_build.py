"""How fast the context pipeline builds a prompt, and how stable the prompt's start stays.

Run: ``.venv/bin/python -m benchmarks.pipeline_build``

1. Build time: ``build_turn_context`` on an 80-message window with 12 participants, 3 notes,
   3 images, 2 files and short-term memory. *Cold* starts from nothing (no token cache, no
   previous history; the tokenizer itself is already loaded). *Warm* is a busy channel's next
   turn: the previous turn saw the same window without its newest message, and its token cache
   and simplified history are passed on.
2. Prefix stability: a simulated 2,000-message channel with a trigger on every message. Each
   turn selects its window with ``select_anchored_history`` from the stored anchor; a turn
   "keeps the prefix" when its dialogue starts with the previous turn's dialogue items (all but
   the previous newest, which the new message may have merged into). The same run measures a
   naive newest-80 window. Pairs are counted once the channel holds more than the limit, so the
   warm-up, where every window still grows, does not flatter either side.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from benchmarks.table import Row, emit
from chat.pipeline.context import TurnContext, TurnInput, build_turn_context
from chat.pipeline.items import ItemTag
from chat.pipeline.tokens import O200kTokenCounter
from chat.pipeline.types import (
    Attachment,
    Author,
    ContextNote,
    HistoryMessage,
    MessageReference,
    NameDirectory,
    PersonaSpec,
)
from chat.pipeline.window import history_window_stride, select_anchored_history

LIMIT = 80
BUILD_RUNS = 300
CHANNEL_SIZE = 2_000
SNOWFLAKE_BASE = 1_300_000_000_000_000_000
CHANNEL_ID = SNOWFLAKE_BASE + 1
START = datetime(2026, 7, 11, 9, 0, tzinfo=UTC)

TOMORI = PersonaSpec(
    name="Tomori",
    is_main=True,
    system_prompt="You are {char}, a cheerful guitarist who chats with {user} and friends.",
    context_note=ContextNote("Keep replies under three sentences.", 4),
)
KAITO = PersonaSpec(name="Kaito", aliases=("Kai",))
PEOPLE = tuple(
    Author(id=SNOWFLAKE_BASE + 100 + n, display_name=name)
    for n, name in enumerate(
        ["Alice", "Bob", "Carol", "Dave", "Erin", "Frank", "Grace", "Heidi", "Ivan", "Judy"]
    )
)
BOTS = (
    Author(id=SNOWFLAKE_BASE + 200, display_name="Tomori", is_bot=True, persona_name="Tomori"),
    Author(
        id=SNOWFLAKE_BASE + 201,
        display_name="Kaito",
        is_bot=True,
        webhook_id=SNOWFLAKE_BASE + 202,
        persona_name="Kaito",
    ),
)
NAMES = NameDirectory(users={author.id: author.display_name for author in PEOPLE + BOTS})
CHATTER = (
    "the band practice tonight guitar new song chords sounds great honestly maybe later did you "
    "see coffee rain tomorrow Tomori Kai what do you think lol yes no"
)


def channel(size: int, *, seed: int = 7) -> list[HistoryMessage]:
    """A channel's messages, oldest first: twelve authors, replies, mentions, images, files."""
    rng = random.Random(seed)
    words = CHATTER.split()
    messages: list[HistoryMessage] = []
    for n in range(size):
        author = rng.choice(PEOPLE + BOTS)
        content = " ".join(rng.choices(words, k=rng.randint(3, 16)))
        if rng.random() < 0.1:
            content = f"<@{rng.choice(PEOPLE).id}> {content}"
        reference = None
        if messages and rng.random() < 0.12:
            target = messages[max(0, len(messages) - rng.randint(1, 120))]
            reference = MessageReference(target.id, CHANNEL_ID)
        messages.append(
            HistoryMessage(
                id=SNOWFLAKE_BASE + 10_000 + n,
                channel_id=CHANNEL_ID,
                author=author,
                content=content,
                created_at=START + timedelta(minutes=7 * n),
                reference=reference,
                mention_ids=(),
            )
        )
    return messages


def with_attachment(message: HistoryMessage, filename: str, content_type: str) -> HistoryMessage:
    attachment = Attachment(
        id=message.id + 500_000,
        filename=filename,
        url=f"https://cdn.example/attachments/{filename}",
        content_type=content_type,
    )
    return replace(message, attachments=(attachment,))


def benchmark_window() -> list[HistoryMessage]:
    """80 messages with 3 images and 2 files."""
    messages = channel(LIMIT)
    for position, name in ((20, "cat.png"), (50, "stage.jpg"), (75, "setlist.png")):
        messages[position] = with_attachment(messages[position], name, "image/png")
    for position, name in ((30, "lyrics.txt"), (78, "chords.md")):
        messages[position] = with_attachment(messages[position], name, "text/plain")
    return messages


def turn_for(
    window: Sequence[HistoryMessage], all_messages: dict[int, HistoryMessage]
) -> TurnInput:
    return TurnInput(
        persona=TOMORI,
        history=tuple(window),
        trigger_id=window[-1].id,
        now=window[-1].created_at,
        timezone="Europe/Berlin",
        token_counter=O200kTokenCounter(),
        personas=(TOMORI, KAITO),
        reply_targets=all_messages,
        fetch_limit=LIMIT,
        names=NAMES,
        channel_note=ContextNote("This channel is about the band's next gig.", 2),
        reunion_note="Alice is back after two weeks away.",
        memories=("Alice plays bass.", "Bob is learning drums.", "Carol writes lyrics."),
        stm_text="The band is choosing songs for Saturday's gig.",
    )


def milliseconds(run: Callable[[], object], runs: int) -> list[float]:
    timings = []
    for _ in range(runs):
        started = time.perf_counter()
        run()
        timings.append((time.perf_counter() - started) * 1000)
    return timings


def percentile(values: Sequence[float], share: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


def next_turn(turn: TurnInput, previous: TurnContext) -> TurnInput:
    """``turn`` warmed with what the channel's previous turn left behind."""
    return replace(turn, previous=previous)


def measure_build() -> tuple[list[float], list[float]]:
    window = benchmark_window()
    by_id = {message.id: message for message in window}
    turn = turn_for(window, by_id)
    O200kTokenCounter().count("load the tokenizer before timing")
    warm_turn = next_turn(turn, build_turn_context(turn_for(window[:-1], by_id)))
    cold = milliseconds(lambda: build_turn_context(turn), BUILD_RUNS)
    warm = milliseconds(lambda: build_turn_context(warm_turn), BUILD_RUNS)
    return cold, warm


def dialogue_texts(context: TurnContext) -> list[str]:
    return [item.text for item in context.items if item.tag is ItemTag.DIALOGUE_HISTORY]


def keeps_prefix(previous: list[str], current: list[str]) -> bool:
    stable = previous[:-1]
    return current[: len(stable)] == stable


def measure_prefix_stability() -> tuple[float, float]:
    """Share of consecutive turns keeping the dialogue prefix: (anchored, naive newest-N)."""
    messages = channel(CHANNEL_SIZE)
    by_id = {message.id: message for message in messages}
    anchor_id: int | None = None
    previous: dict[str, TurnContext] = {}
    kept = {"anchored": 0, "naive": 0}
    pairs = 0
    for count in range(1, CHANNEL_SIZE + 1):
        history = messages[:count]
        selection = select_anchored_history(
            history, limit=LIMIT, anchor_id=anchor_id, anchor_limit=LIMIT
        )
        anchor_id = selection.anchor_id
        windows = {"anchored": selection.messages, "naive": history[-LIMIT:]}
        current = {}
        for name, window in windows.items():
            turn = turn_for(window, by_id)
            current[name] = build_turn_context(
                next_turn(turn, previous[name]) if name in previous else turn
            )
        if count > LIMIT + 1:
            pairs += 1
            for name in kept:
                kept[name] += keeps_prefix(
                    dialogue_texts(previous[name]), dialogue_texts(current[name])
                )
        previous = current
    return kept["anchored"] / pairs, kept["naive"] / pairs


def main() -> None:
    cold, warm = measure_build()
    anchored, naive = measure_prefix_stability()
    stride = history_window_stride(LIMIT)
    if "--rows" in sys.argv:
        emit(
            [
                Row(
                    f"prompt build, cold ({LIMIT} messages)",
                    f"p50 {percentile(cold, 0.5):.2f} ms, p95 {percentile(cold, 0.95):.2f} ms",
                    goal="≤ 5 ms",
                ),
                Row(
                    "prompt build, warm (the next turn)",
                    f"p50 {percentile(warm, 0.5):.2f} ms, p95 {percentile(warm, 0.95):.2f} ms",
                    f"cold p50 {percentile(cold, 0.5):.2f} ms",
                    "≤ 0.5 ms p50",
                ),
                Row(
                    f"prompts keeping the previous prefix (stride {stride})",
                    f"{anchored:.1%}",
                    f"naive newest {LIMIT}: {naive:.1%}",
                    "≥ 95 %",
                ),
            ]
        )
        return
    rows = [
        ("cold build, nothing cached", f"{percentile(cold, 0.5):.2f} ms",
         f"{percentile(cold, 0.95):.2f} ms", "≤ 5 ms"),
        ("warm build, the next turn", f"{percentile(warm, 0.5):.2f} ms",
         f"{percentile(warm, 0.95):.2f} ms", "≤ 0.5 ms"),
    ]  # fmt: skip
    print(f"Build: {LIMIT} messages, 12 participants, 3 notes, 3 images, 2 files, STM")
    print(f"{'':32}{'p50':>10}{'p95':>10}   goal")
    for label, p50, p95, goal in rows:
        print(f"{label:32}{p50:>10}{p95:>10}   {goal}")
    print()
    print(
        f"Prefix kept between consecutive turns: {CHANNEL_SIZE:,} messages, trigger on every "
        f"message, limit {LIMIT}"
    )
    print(f"{'':32}{'kept':>10}   goal")
    print(f"{f'anchored window (stride {stride})':32}{anchored:>10.1%}   ≥ 95 %")
    print(f"{f'naive newest {LIMIT}':32}{naive:>10.1%}   ~0 %")


if __name__ == "__main__":
    main()
