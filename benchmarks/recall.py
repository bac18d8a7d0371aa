"""Long-term memory recall: how well it finds, how fast, and what it costs the prompt cache.

Run: ``.venv/bin/python -m benchmarks.recall`` (``make bench`` runs it).

1. **recall@5** on `benchmarks.recall_eval` (200 facts about 20 people, 100 distractors, 100
   paraphrased questions), with the offline default model (WordLlama): the hybrid ranking every
   turn uses, beside keyword-only and vector-only ranking of the same index, same run. Every
   memory is eligible (as in the dashboard's search): a turn, which sees only the personal
   memories of the people in its window, has fewer to choose from.
2. **Latency** of one turn's recall (`chat.pipeline.recall.recall`: the query's embedding, the
   ranking, the token count of the chosen lines) at 1,000, 10,000 and 100,000 memories in one
   guild: personal memories of people 30 each (the default bound), plus 50 guild memories; the
   turn's window holds 8 of those people. Beside it, the same query ranked over every memory of
   the guild (what the dashboard's search does). 200 queries, each timed three times, its
   fastest run kept; p50 and p95 are over the queries.
3. **Embedding throughput**: WordLlama on 5,000 facts in batches of 256, beside the same texts
   sent to an OpenAI-compatible ``/v1/embeddings`` endpoint (the fake model server, over local
   HTTP, batches of 128).
4. **Cacheable share**: the conversation of `benchmarks.pipeline_build` (1,000 trigger/reply
   pairs, the persona's system prompt not naming ``{user}``), each turn with three memories
   recalled for its trigger from the evaluation set's index, against the same turns with no
   memories: the share of prompt tokens in leading items identical to the previous prompt's
   (what a provider's prompt cache reuses), and how often the cacheable prefix is token for
   token the one without memories. Baseline: the same memories placed in the system block, as
   they were before.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from benchmarks.recall_eval import KINDS, distractors, facts, questions
from benchmarks.table import Row, emit
from chat.llm.embeddings import EmbeddingModel, OpenAIEmbeddings, WordLlamaEmbeddings
from chat.pipeline.recall import (
    MemoryIndex,
    MemoryKind,
    MemoryRecord,
    RecallScope,
    RecallWeights,
    build_memory_index,
    memory_line,
    recall,
)
from chat.pipeline.tokens import O200kTokenCounter

SIZES = (1_000, 10_000, 100_000)
QUERIES = 200
REPEATS = 3
"""Each query is timed this many times and its fastest run kept (``timeit``'s rule: on a machine
shared with other work, the slower runs measure that work, not the recall)."""
PER_PERSON = 30
WINDOW_PEOPLE = 8
HYBRID = RecallWeights()
KEYWORD_ONLY = replace(HYBRID, vector=0.0, keyword=1.0)
VECTOR_ONLY = replace(HYBRID, vector=1.0, keyword=0.0)


def percentile(values: Sequence[float], share: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[round(share * 100) - 1]


def evaluation_index(model: EmbeddingModel) -> MemoryIndex:
    records = [
        MemoryRecord(fact.id, MemoryKind.PERSONAL, fact.text, user_id=1, subject=fact.person)
        for fact in facts()
    ]
    records += [
        MemoryRecord(1000 + n, MemoryKind.GUILD, text) for n, text in enumerate(distractors())
    ]
    return build_memory_index(records, model.embed([record.text for record in records]))


def recall_at_5(model: EmbeddingModel, index: MemoryIndex) -> dict[str, float]:
    asked = questions()
    vectors = model.embed([question.text for question in asked])
    found = {}
    for name, weights in (("hybrid", HYBRID), ("keyword", KEYWORD_ONLY), ("vector", VECTOR_ONLY)):
        hits = 0
        for question, vector in zip(asked, vectors, strict=True):
            top = recall(
                index,
                query=question.text,
                query_vector=vector,
                scope=None,
                k=5,
                min_score=0.0,
                weights=weights,
            )
            hits += question.answer_id in {memory.record.id for memory in top}
        found[name] = hits / len(asked)
    return found


def synthetic_guild(size: int, model: EmbeddingModel) -> tuple[MemoryIndex, int]:
    """``size`` memories: people with 30 personal memories each (facts of the evaluation
    set's kinds with random values), and 50 guild memories. Returns the index and the
    number of people."""
    rng = random.Random(size)
    people = max(WINDOW_PEOPLE, (size - 50) // PER_PERSON)
    templates = [(template, values) for template, _, values in KINDS.values()]
    records = []
    for n in range(size - 50):
        person = n % people
        template, values = templates[rng.randrange(len(templates))]
        text = template.format(p=f"Member{person}", v=values[rng.randrange(len(values))])
        records.append(
            MemoryRecord(n + 1, MemoryKind.PERSONAL, text, user_id=person + 1, subject="m")
        )
    records += [
        MemoryRecord(size - 50 + n + 1, MemoryKind.GUILD, distractors()[80 + n % 20])
        for n in range(50)
    ]
    return build_memory_index(records, model.embed([r.text for r in records])), people


def milliseconds(run: Callable[[], object], times: int) -> list[float]:
    """Each run's wall time, with the garbage collector paused during it (as ``timeit``
    does: a collection triggered by earlier allocations is not the recall's cost)."""
    timings = []
    for _ in range(times):
        gc.disable()
        try:
            started = time.perf_counter()
            run()
            timings.append((time.perf_counter() - started) * 1000)
        finally:
            gc.enable()
    return timings


def latency(model: EmbeddingModel) -> dict[int, tuple[list[float], list[float]]]:
    """Per size: (a turn's recall, the same query over every memory), milliseconds."""
    counter = O200kTokenCounter()
    counter.count("load the tokenizer")
    texts = [question.text for question in questions()]
    measured = {}
    for size in SIZES:
        index, people = synthetic_guild(size, model)
        rng = random.Random(7)
        turn_times, everything_times = [], []
        for n in range(QUERIES):
            query = texts[n % len(texts)].replace("Alice", f"Member{rng.randrange(people)}")
            present = frozenset((rng.randrange(people) + 1, "") for _ in range(WINDOW_PEOPLE))
            scope = RecallScope(persona_id=1, people=present)

            def turn(query=query, scope=scope, index=index) -> None:
                recall(
                    index,
                    query=query,
                    query_vector=model.embed([query])[0],
                    scope=scope,
                    k=6,
                    min_score=0.3,
                    weights=HYBRID,
                    token_budget=1500,
                    count_tokens=counter.count,
                )

            def everything(query=query, index=index) -> None:
                recall(
                    index,
                    query=query,
                    query_vector=model.embed([query])[0],
                    scope=None,
                    k=20,
                    min_score=0.0,
                    weights=HYBRID,
                )

            turn_times.append(min(milliseconds(turn, REPEATS)))
            everything_times.append(min(milliseconds(everything, REPEATS)))
        measured[size] = (turn_times, everything_times)
    return measured


def throughput(model: EmbeddingModel) -> tuple[float, float]:
    """Texts per second: ``model`` on 5,000 facts in batches of 256, and the OpenAI-compatible
    endpoint of the fake model server on the same texts."""
    from chat.llm.fake_server import FakeLLMServer

    texts = [f"{fact.text} ({n})" for n in range(25) for fact in facts()]
    started = time.perf_counter()
    for start in range(0, len(texts), 256):
        model.embed(texts[start : start + 256])
    offline = len(texts) / (time.perf_counter() - started)

    ready = threading.Event()
    stop = threading.Event()
    served: dict[str, str] = {}

    def serve() -> None:
        async def run() -> None:
            async with FakeLLMServer() as server:
                served["url"] = server.base_url
                ready.set()
                await asyncio.get_running_loop().run_in_executor(None, stop.wait)

        asyncio.run(run())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    ready.wait(10)
    endpoint = OpenAIEmbeddings(base_url=served["url"], model="fake-embedding", batch_size=128)
    started = time.perf_counter()
    endpoint.embed(texts)
    http = len(texts) / (time.perf_counter() - started)
    stop.set()
    thread.join(5)
    return offline, http


def cacheable_share(model: EmbeddingModel, index: MemoryIndex) -> dict[str, float]:
    """See the module docstring, item 4."""
    from benchmarks import pipeline_build as pb
    from chat.pipeline.context import build_turn_context
    from chat.pipeline.window import select_anchored_history

    talk = pb.conversation(pb.CONVERSATION_PAIRS)
    triggers = [message for message in talk[::2]]
    vectors = model.embed([message.content for message in triggers])
    recalled: dict[int, tuple[str, ...]] = {}
    for message, vector in zip(triggers, vectors, strict=True):
        top = recall(
            index,
            query=message.content,
            query_vector=vector,
            scope=None,
            k=3,
            min_score=0.0,
        )
        recalled[message.id] = tuple(memory_line(memory.record) for memory in top)

    by_id = {message.id: message for message in talk}
    trigger_ids = {message.id for message in triggers}
    persona = pb.TOMORI_WITHOUT_USER
    anchor_id = None
    previous: dict[str, object] = {}
    shares = {"off": 0.0, "on": 0.0, "system": 0.0}
    same_prefix = pairs = 0
    for count, message in enumerate(talk, start=1):
        if message.id not in trigger_ids:
            continue
        selection = select_anchored_history(
            talk[:count], limit=pb.LIMIT, anchor_id=anchor_id, anchor_limit=pb.LIMIT
        )
        anchor_id = selection.anchor_id
        base = replace(pb.turn_for(selection.messages, by_id, persona), memories=())
        lines = recalled[message.id]
        in_system = replace(
            base,
            persona=replace(persona, system_prompt="\n".join([persona.system_prompt, *lines])),
        )
        turns = {"off": base, "on": replace(base, memories=lines), "system": in_system}
        current = {}
        for name, turn in turns.items():
            warm = replace(turn, previous=previous[name]) if name in previous else turn
            current[name] = build_turn_context(warm)
        if count > pb.LIMIT and previous:
            pairs += 1
            for name in shares:
                end = pb.repeated_prefix_end(previous[name], current[name])
                shares[name] += pb.token_share(current[name], end)
            off, on = current["off"], current["on"]
            same_prefix += (
                on.items[: on.cacheable_prefix_end] == off.items[: off.cacheable_prefix_end]
            )
        previous = current
    return {**{name: total / pairs for name, total in shares.items()}, "same": same_prefix / pairs}


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model = WordLlamaEmbeddings()
    started = time.perf_counter()
    model.embed(["load the model"])
    load_s = time.perf_counter() - started
    index = evaluation_index(model)
    found = recall_at_5(model, index)
    timings = latency(model)
    offline, http = throughput(model)
    shares = cacheable_share(model, index)
    rows = [
        Row(
            "recall@5, long-term memory: 200 facts about 20 people, 100 distractors, 100 "
            "paraphrased questions (hybrid keyword + vector, offline WordLlama)",
            f"{found['hybrid']:.2f}",
            f"keyword only: {found['keyword']:.2f}; vector only: {found['vector']:.2f}",
            "≥ 0.90 and above both",
        ),
    ]
    goals = {1_000: "—", 10_000: "p95 ≤ 5 ms", 100_000: "p95 ≤ 25 ms"}
    for size, (turn_times, everything) in timings.items():
        rows.append(
            Row(
                f"memory recall of one turn, {size:,} memories in the guild (query embedded, "
                f"ranked, lines counted; {WINDOW_PEOPLE} people in the window)",
                f"p50 {percentile(turn_times, 0.5):.2f} ms, "
                f"p95 {percentile(turn_times, 0.95):.2f} ms",
                f"every memory ranked (dashboard search): p50 "
                f"{percentile(everything, 0.5):.2f} ms, "
                f"p95 {percentile(everything, 0.95):.2f} ms",
                goals[size],
            )
        )
    rows += [
        Row(
            "embedding throughput, 5,000 short facts (offline WordLlama, batches of 256; "
            "model load once per process)",
            f"{offline:,.0f} texts/s (load {load_s:.1f} s)",
            f"OpenAI-compatible /v1/embeddings on local HTTP (fake server): {http:,.0f} texts/s",
        ),
        Row(
            "prompt tokens the provider can reuse (leading items identical to the previous "
            "prompt's), conversation, three memories recalled per turn after the dialogue",
            f"{shares['on']:.1%} (cacheable prefix identical to the one without memories in "
            f"{shares['same']:.0%} of turns)",
            f"no memories: {shares['off']:.1%}; the same memories in the system block: "
            f"{shares['system']:.1%}",
            "within 1 point of no memories",
        ),
    ]
    emit(rows)


if __name__ == "__main__":
    main()
