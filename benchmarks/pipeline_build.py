"""How fast the context pipeline builds a prompt, and how stable the prompt's start stays.

Run: ``.venv/bin/python -m benchmarks.pipeline_build``

1. Build time: ``build_turn_context`` on an 80-message window with 12 participants, 3 notes,
   3 images, 2 files and short-term memory. *Cold* starts from nothing (no token cache, no
   previous history; the tokenizer itself is already loaded). *Warm* is a busy channel's next
   turn: the previous turn saw the same window without its newest message, and its token cache
   and simplified history are passed on. The baseline, same run, is the time to tokenize the
   window's 80 raw message texts (what counting a prompt's words costs at the least), and the
   figures are their ratios to it. Times are the CPU time of the building thread, so another
   process taking the core meanwhile does not count; the three are measured in interleaved
   rounds, so the machine's load falls on all three alike.
2. Prefix stability, two ways a channel moves:

   - *one message per turn*: a simulated 2,000-message channel with a trigger on every
     message;
   - *a conversation*: 1,000 turn pairs, each a person's trigger and Tomori's reply to it; the
     reply is added to the channel between one trigger and the next, so two messages arrive
     per turn.

   Each turn selects its window with ``select_anchored_history`` from the stored anchor; a turn
   "keeps the prefix" when its dialogue starts with the previous turn's dialogue items (all but
   the previous newest, which the new message may have merged into). The window's start moves
   by one stride once it would hold more than the limit: every ``stride`` turns with one message
   per turn, every ``stride / 2`` turns in a conversation, so the most any anchored window can
   keep is ``1 − 1/stride`` and ``1 − 2/stride`` of its turns. The same run measures a naive
   newest-80 window. Pairs are counted once the previous turn's channel held more than the
   limit, so the warm-up, where every window still grows, does not flatter either side.
3. Cacheable share of prompt tokens, over the same conversation: per prompt, the tokens of
   ``items[:cacheable_prefix_end]`` (the prefix the pipeline marks as expected to repeat) over
   all its tokens, and the tokens that did repeat: the longest run of leading items identical
   (role, text, media) to the previous prompt's. The naive newest-80 window's repeated share,
   same run, is the baseline. Both are means over the counted prompts. The benchmark's
   persona says ``{user}`` in its system prompt, which names whoever triggered the turn; the
   same conversation is measured again with a system prompt without it, to show what that
   costs.
"""

from __future__ import annotations

import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from benchmarks.table import Row, emit, percentile
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
    PersonaProfile,
)
from chat.pipeline.window import history_window_stride, select_anchored_history

LIMIT = 80
BUILD_RUNS = 300
BUILD_ROUNDS = 6
CHANNEL_SIZE = 2_000
CONVERSATION_PAIRS = 1_000
SNOWFLAKE_BASE = 1_300_000_000_000_000_000
CHANNEL_ID = SNOWFLAKE_BASE + 1
START = datetime(2026, 7, 11, 9, 0, tzinfo=UTC)

TOMORI = PersonaProfile(
    name="Tomori",
    is_main=True,
    system_prompt="You are {char}, a cheerful guitarist who chats with {user} and friends.",
    context_note=ContextNote("Keep replies under three sentences.", 4),
)
TOMORI_WITHOUT_USER = replace(
    TOMORI, system_prompt="You are {char}, a cheerful guitarist who chats with friends."
)
"""Tomori with a system prompt that does not name the triggering user: the same text every
turn (``{user}`` expands to whoever triggered the turn)."""
KAITO = PersonaProfile(name="Kaito", aliases=("Kai",))
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


def conversation(pairs: int, *, seed: int = 11) -> list[HistoryMessage]:
    """A conversation with Tomori, oldest first: a person's trigger, Tomori's reply to it (a
    Discord reply), the next trigger, and so on: ``2 × pairs`` messages."""
    rng = random.Random(seed)
    words = CHATTER.split()
    messages: list[HistoryMessage] = []
    for n in range(pairs):
        trigger = HistoryMessage(
            id=SNOWFLAKE_BASE + 10_000 + 2 * n,
            channel_id=CHANNEL_ID,
            author=rng.choice(PEOPLE),
            content="tomori, " + " ".join(rng.choices(words, k=rng.randint(3, 16))),
            created_at=START + timedelta(minutes=7 * n),
            mention_ids=(),
        )
        reply = HistoryMessage(
            id=trigger.id + 1,
            channel_id=CHANNEL_ID,
            author=BOTS[0],
            content=" ".join(rng.choices(words, k=rng.randint(6, 24))),
            created_at=trigger.created_at + timedelta(seconds=20),
            reference=MessageReference(trigger.id, CHANNEL_ID),
            mention_ids=(),
        )
        messages += (trigger, reply)
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
    window: Sequence[HistoryMessage],
    all_messages: dict[int, HistoryMessage],
    persona: PersonaProfile = TOMORI,
) -> TurnInput:
    return TurnInput(
        persona=persona,
        history=tuple(window),
        trigger_id=window[-1].id,
        now=window[-1].created_at,
        timezone="Europe/Berlin",
        token_counter=O200kTokenCounter(),
        personas=(persona, KAITO),
        reply_targets=all_messages,
        fetch_limit=LIMIT,
        names=NAMES,
        channel_note=ContextNote("This channel is about the band's next gig.", 2),
        reunion_note="Alice is back after two weeks away.",
        memories=("Alice plays bass.", "Bob is learning drums.", "Carol writes lyrics."),
        short_term_memory_text="The band is choosing songs for Saturday's gig.",
    )


def milliseconds(run: Callable[[], object], runs: int) -> list[float]:
    """CPU milliseconds of this thread for each of ``runs`` calls of ``run``."""
    timings = []
    for _ in range(runs):
        started = time.thread_time()
        run()
        timings.append((time.thread_time() - started) * 1000)
    return timings


def next_turn(turn: TurnInput, previous: TurnContext) -> TurnInput:
    """``turn`` warmed with what the channel's previous turn left behind."""
    return replace(turn, previous=previous)


@dataclass(frozen=True)
class BuildFigures:
    """CPU milliseconds per call: cold and warm builds, and the tokenizing baseline."""

    cold: list[float]
    warm: list[float]
    tokenize: list[float]

    def ratio(self, builds: list[float]) -> float:
        """p50 of ``builds`` over the baseline's p50."""
        return statistics.median(builds) / statistics.median(self.tokenize)


def measure_build() -> BuildFigures:
    window = benchmark_window()
    by_id = {message.id: message for message in window}
    turn = turn_for(window, by_id)
    counter = O200kTokenCounter()
    counter.count("load the tokenizer before timing")
    warm_turn = next_turn(turn, build_turn_context(turn_for(window[:-1], by_id)))
    texts = [message.content for message in window]
    runs = BUILD_RUNS // BUILD_ROUNDS
    figures = BuildFigures(cold=[], warm=[], tokenize=[])
    for _ in range(BUILD_ROUNDS):
        figures.tokenize.extend(milliseconds(lambda: [counter.count(t) for t in texts], runs))
        figures.cold.extend(milliseconds(lambda: build_turn_context(turn), runs))
        figures.warm.extend(milliseconds(lambda: build_turn_context(warm_turn), runs))
    return figures


def dialogue_texts(context: TurnContext) -> list[str]:
    return [item.text for item in context.items if item.tag is ItemTag.DIALOGUE_HISTORY]


def keeps_prefix(previous: list[str], current: list[str]) -> bool:
    stable = previous[:-1]
    return current[: len(stable)] == stable


@dataclass(frozen=True)
class PrefixFigures:
    """One simulated channel's figures; each keyed by window ("anchored", "naive")."""

    kept: dict[str, float]
    """Share of consecutive turns whose dialogue keeps the previous dialogue's prefix."""
    marked: dict[str, float]
    """Mean share of a prompt's tokens inside ``items[:cacheable_prefix_end]``."""
    repeated: dict[str, float]
    """Mean share of a prompt's tokens in leading items identical to the previous prompt's."""
    turns: int
    """How many consecutive-turn pairs were counted."""


def token_share(context: TurnContext, end: int) -> float:
    return sum(item.tokens for item in context.items[:end]) / context.total_tokens


def repeated_prefix_end(previous: TurnContext, current: TurnContext) -> int:
    """How many leading items ``current`` shares with ``previous``, as a request sees them."""
    end = 0
    for before, now in zip(previous.items, current.items, strict=False):
        if (before.role, before.text, before.media) != (now.role, now.text, now.media):
            break
        end += 1
    return end


def simulate_turns(
    messages: Sequence[HistoryMessage], trigger_ids: set[int], persona: PersonaProfile = TOMORI
) -> PrefixFigures:
    """Build ``persona``'s prompt at every message in ``trigger_ids``, with the anchored window
    and with a naive newest-``LIMIT`` window, each warmed from its own previous turn."""
    by_id = {message.id: message for message in messages}
    anchor_id: int | None = None
    previous: dict[str, TurnContext] = {}
    previous_count = 0
    names = ("anchored", "naive")
    kept = dict.fromkeys(names, 0)
    marked = dict.fromkeys(names, 0.0)
    repeated = dict.fromkeys(names, 0.0)
    pairs = 0
    for count, message in enumerate(messages, start=1):
        if message.id not in trigger_ids:
            continue
        history = messages[:count]
        selection = select_anchored_history(
            history, limit=LIMIT, anchor_id=anchor_id, anchor_limit=LIMIT
        )
        anchor_id = selection.anchor_id
        windows = {"anchored": selection.messages, "naive": history[-LIMIT:]}
        current = {}
        for name, window in windows.items():
            turn = turn_for(window, by_id, persona)
            current[name] = build_turn_context(
                next_turn(turn, previous[name]) if name in previous else turn
            )
        if previous_count > LIMIT:
            pairs += 1
            for name in names:
                before, now = previous[name], current[name]
                kept[name] += keeps_prefix(dialogue_texts(before), dialogue_texts(now))
                marked[name] += token_share(now, now.cacheable_prefix_end)
                repeated[name] += token_share(now, repeated_prefix_end(before, now))
        previous, previous_count = current, count
    return PrefixFigures(
        kept={name: kept[name] / pairs for name in names},
        marked={name: marked[name] / pairs for name in names},
        repeated={name: repeated[name] / pairs for name in names},
        turns=pairs,
    )


def measure_prefix_stability() -> tuple[PrefixFigures, PrefixFigures, PrefixFigures]:
    """(one message per turn, a conversation, the same conversation with a system prompt
    that does not name the triggering user): see the module's docstring."""
    messages = channel(CHANNEL_SIZE)
    per_message = simulate_turns(messages, {message.id for message in messages})
    talk = conversation(CONVERSATION_PAIRS)
    triggers = {message.id for message in talk[::2]}
    return (
        per_message,
        simulate_turns(talk, triggers),
        simulate_turns(talk, triggers, TOMORI_WITHOUT_USER),
    )


def main() -> None:
    build = measure_build()
    cold, warm = build.cold, build.warm
    per_message, talk, talk_without_user = measure_prefix_stability()
    stride = history_window_stride(LIMIT)
    baseline = (
        f"tokenizing the window's {LIMIT} raw texts: p50 {percentile(build.tokenize, 0.5):.3f} ms"
    )
    if "--rows" in sys.argv:
        emit(
            [
                Row(
                    f"prompt build, cold ({LIMIT} messages; CPU time, ratio to the baseline)",
                    f"{build.ratio(cold):.1f}× (p50 {percentile(cold, 0.5):.2f} ms, "
                    f"p95 {percentile(cold, 0.95):.2f} ms)",
                    baseline,
                    "≤ 10×",
                ),
                Row(
                    "prompt build, warm (the next turn; CPU time, ratio to the baseline)",
                    f"{build.ratio(warm):.2f}× (p50 {percentile(warm, 0.5):.3f} ms, "
                    f"p95 {percentile(warm, 0.95):.3f} ms)",
                    baseline,
                    "≤ 1.5×",
                ),
                Row(
                    f"prompts keeping the previous prefix, one message per turn (stride {stride})",
                    f"{per_message.kept['anchored']:.1%}",
                    f"naive newest {LIMIT}: {per_message.kept['naive']:.1%}",
                    "≥ 95 %",
                ),
                Row(
                    f"prompts keeping the previous prefix, conversation: trigger + reply per "
                    f"turn (stride {stride}; limit 1 − 2/{stride} = {1 - 2 / stride:.1%})",
                    f"{talk.kept['anchored']:.1%}",
                    f"naive newest {LIMIT}: {talk.kept['naive']:.1%}",
                    f"{1 - 2 / stride:.1%} (the limit)",
                ),
                Row(
                    "prompt tokens in the cacheable prefix, conversation: marked; repeated",
                    f"{talk.marked['anchored']:.1%}; {talk.repeated['anchored']:.1%}",
                    f"naive newest {LIMIT}: repeated {talk.repeated['naive']:.1%}; system "
                    f"prompt without {{user}}: {talk_without_user.marked['anchored']:.1%}; "
                    f"{talk_without_user.repeated['anchored']:.1%}",
                ),
            ]
        )
        return
    rows = [
        ("cold build, nothing cached", f"{percentile(cold, 0.5):.3f} ms",
         f"{percentile(cold, 0.95):.3f} ms", f"{build.ratio(cold):.1f}×", "≤ 10×"),
        ("warm build, the next turn", f"{percentile(warm, 0.5):.3f} ms",
         f"{percentile(warm, 0.95):.3f} ms", f"{build.ratio(warm):.2f}×", "≤ 1.5×"),
        ("baseline: tokenize the raw texts", f"{percentile(build.tokenize, 0.5):.3f} ms",
         f"{percentile(build.tokenize, 0.95):.3f} ms", "1×", ""),
    ]  # fmt: skip
    print(
        f"Build: {LIMIT} messages, 12 participants, 3 notes, 3 images, 2 files, short-term "
        "memory (CPU time)"
    )
    print(f"{'':34}{'p50':>10}{'p95':>10}{'ratio':>8}   goal")
    for label, p50, p95, ratio, goal in rows:
        print(f"{label:34}{p50:>10}{p95:>10}{ratio:>8}   {goal}")
    for title, figures, most in (
        (f"{CHANNEL_SIZE:,} messages, trigger on every message", per_message, 1 - 1 / stride),
        (f"a conversation of {CONVERSATION_PAIRS:,} trigger + reply pairs", talk, 1 - 2 / stride),
        ("the same, a system prompt without {user}", talk_without_user, 1 - 2 / stride),
    ):
        print()
        print(f"Consecutive turns: {title}, limit {LIMIT} ({figures.turns:,} pairs counted)")
        print(f"{'':32}{'kept':>10}{'marked':>10}{'repeated':>10}")
        for name, label in (
            ("anchored", f"anchored window (stride {stride})"),
            ("naive", f"naive newest {LIMIT}"),
        ):
            print(
                f"{label:32}{figures.kept[name]:>10.1%}{figures.marked[name]:>10.1%}"
                f"{figures.repeated[name]:>10.1%}"
            )
        print(f"{'most an anchored window keeps':32}{most:>10.1%}")
    print()
    print("kept: turns keeping the previous dialogue prefix; marked / repeated: mean share of a")
    print("prompt's tokens inside cacheable_prefix_end / identical to the previous prompt's start")


if __name__ == "__main__":
    main()
