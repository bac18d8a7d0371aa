"""Lorebook activation: one turn's scan of 1,000 entries over 80 messages.

Run: ``.venv/bin/python -m benchmarks.lorebook`` (``make bench`` runs it).

The book: 1,000 entries of two or three keys each (words, two-word phrases, one in fifty a
``/pattern/``), a tenth whole-word and a tenth case-sensitive, 25 selective with secondary keys,
10 constants, recursion on. The messages: 80 of 20 words each, 15 key words among them. Two rows:
the default ``scan_depth`` (2: the newest two messages are scanned, the goal's row) and 80 (every
message). Measured: `activate_lorebooks` on the compiled book (compiling, once per change of the
book, is reported on its own), the real tokenizer counting what fires, as CPU time (the machine
is shared; wall time would count waiting for a core). Baseline, same run: a naive scan of the
same messages, every key of every entry looked for in every message (``in`` on lower-cased
text, a regular expression for whole words and patterns), primary keys only.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import replace

from benchmarks.table import Row, emit, percentile
from chat.pipeline.lorebook import (
    Lorebook,
    LoreEntry,
    activate_lorebooks,
    compile_lorebook,
    parse_regex_key,
)
from chat.pipeline.tokens import O200kTokenCounter

ENTRIES = 1_000
MESSAGES = 80
RUNS = 200
GOAL_MS = 1.0
KEY_SYLLABLES = ("xa", "qo", "zi", "vu", "xe", "qi", "zo", "va", "xor", "quel", "zan", "vim")
"""Keys are names made of these; conversation words never hold an x, q, z or v, so a key is
found only where the conversation names it (as names in a real lorebook are)."""
CHAT_SYLLABLES = ("ba", "le", "mi", "no", "ra", "si", "tu", "de", "ka", "lo", "pe", "ru")


def _vocabulary(rng: random.Random, size: int, syllables: tuple[str, ...]) -> list[str]:
    words = set()
    while len(words) < size:
        words.add("".join(rng.choice(syllables) for _ in range(rng.randint(2, 4))))
    return sorted(words)


def build(seed: int = 7) -> tuple[Lorebook, list[str]]:
    """The book and the messages: keys come from one vocabulary, the conversation and the
    entries' content from another, with 15 key words mentioned in the messages and one entry
    in 20 naming another entry's key in its content (so recursion has work to do)."""
    rng = random.Random(seed)
    vocabulary = _vocabulary(rng, 3_000, KEY_SYLLABLES)
    chat = _vocabulary(rng, 3_000, CHAT_SYLLABLES)
    entries = []
    for n in range(ENTRIES):
        keys = [rng.choice(vocabulary) for _ in range(rng.randint(2, 3))]
        if n % 7 == 0:
            keys[0] = f"{rng.choice(vocabulary)} {rng.choice(vocabulary)}"
        if n % 50 == 0:
            keys[-1] = f"/{rng.choice(vocabulary)}s?/i"
        selective = n % 40 == 0
        entries.append(
            LoreEntry(
                uid=str(n),
                keys=tuple(keys),
                content=f"Entry {n}: "
                + " ".join(rng.choice(chat) for _ in range(30))
                + (f" {rng.choice(vocabulary)}" if n % 20 == 0 else ""),
                secondary_keys=(rng.choice(vocabulary),) if selective else (),
                selective=selective,
                constant=n % 100 == 0,
                match_whole_words=n % 10 == 3,
                case_sensitive=n % 10 == 5,
                insertion_order=rng.randint(0, 200),
                priority=rng.randint(0, 10),
            )
        )
    messages = [[rng.choice(chat) for _ in range(20)] for _ in range(MESSAGES)]
    for _ in range(15):
        entry = rng.choice(entries)
        rng.choice(messages)[rng.randrange(20)] = entry.keys[0].strip("/").removesuffix("s?/i")
    messages = [" ".join(message) for message in messages]
    book = Lorebook(
        "bench", tuple(entries), scan_depth=MESSAGES, token_budget=4_000, recursive_scanning=True
    )
    return book, messages


def naive_scan(book: Lorebook, messages: list[str]) -> set[str]:
    """Every key of every entry against every message, one at a time."""
    fired = set()
    lowered = [message.lower() for message in messages]
    for entry in book.entries:
        for key in entry.keys:
            pattern = parse_regex_key(key)
            if pattern is None and entry.match_whole_words:
                pattern = re.compile(rf"(?<!\w){re.escape(key)}(?!\w)", re.IGNORECASE)
            if pattern is not None:
                hit = any(pattern.search(message) for message in messages)
            elif entry.case_sensitive:
                hit = any(key in message for message in messages)
            else:
                hit = any(key.lower() in message for message in lowered)
            if hit:
                fired.add(entry.uid)
                break
    return fired


def _cpu_ms(run) -> float:
    """``run()``'s CPU time in ms: the machine may be shared, and wall time would count the
    waits for a core."""
    started = time.thread_time()
    run()
    return (time.thread_time() - started) * 1000


def _measure(book: Lorebook, messages: list[str], depth: int) -> tuple[float, float, int]:
    """(activation p95, naive scan p95, entries fired) at scan depth ``depth``."""
    book = replace(book, scan_depth=depth)
    compiled = compile_lorebook(book)
    counter = O200kTokenCounter()

    def activate(seed: str):
        return activate_lorebooks(
            [compiled], messages=messages, seed=seed, budget=4_000, token_counter=counter
        )

    activation = activate("warm")  # counts the fired entries' tokens once, as a turn would
    timings = [_cpu_ms(lambda run=run: activate(str(run))) for run in range(RUNS)]
    scanned = messages[-depth:]
    naive = [_cpu_ms(lambda: naive_scan(book, scanned)) for _ in range(RUNS // 10)]
    fired = len(activation.inserted) + len(activation.left_out)
    return percentile(timings, 0.95), percentile(naive, 0.95), fired


def main() -> None:
    book, messages = build()
    compile_ms = _cpu_ms(lambda: compile_lorebook(book))
    rows = []
    for depth, goal in ((2, f"≤ {GOAL_MS:g} ms"), (MESSAGES, "—")):
        measured, naive, fired = _measure(book, messages, depth)
        rows.append(
            Row(
                what=f"lorebook activation, {ENTRIES:,} entries, {MESSAGES} messages, scan depth "
                f"{depth} (p95 CPU; {fired} fired, recursion on)",
                measured=f"{measured:.2f} ms",
                baseline=f"naive scan {naive:.1f} ms",
                goal=goal,
            )
        )
    rows.append(
        Row(what="lorebook compile (once per change of the book)", measured=f"{compile_ms:.1f} ms")
    )
    emit(rows)


if __name__ == "__main__":
    main()
