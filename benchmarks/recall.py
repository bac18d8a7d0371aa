"""Long-term memory recall: how well it finds, how fast, and what it costs the prompt cache.

Run: ``.venv/bin/python -m benchmarks.recall`` (``make bench`` runs it).

1. **recall@5** on `benchmarks.recall_eval` (200 facts about 20 people, 100 distractors, 100
   paraphrased questions), with the offline default model (all-MiniLM-L6-v2) and with
   WordLlama: the hybrid ranking every turn uses, beside keyword-only and vector-only ranking
   of the same index, same run. Every memory is eligible (as in the dashboard's search) and
   no threshold applies: this is the ranker alone. What a person gets, through the worker and
   its thresholds, is `benchmarks.recall_e2e`.
2. **Latency** of one turn's recall as a turn runs it
   (`chat.services.memory_recall.memories_recall_for_turn`: the guild's index version read
   from the database, the query's embedding, the ranking, the token count of the chosen lines)
   at 1,000, 10,000 and 100,000 memories in one guild, stored in a throwaway database of the
   configured kind: personal memories of people 30 each (the default bound), plus 50 guild
   memories; the turn's window holds 8 of those people. Beside it, the same query ranked over
   every memory of the guild (what the dashboard's search does), and what checking the index
   cost each turn before the version stamp (an aggregate over the guild's rows). 200
   queries, each timed once (wall clock, and the CPU time of the timing thread); p50 and p95
   are over the queries.
   The memories' vectors are their facts' without the person's name (each distinct text
   embedded once: the ranking costs the same, and all-MiniLM-L6-v2 would take minutes for
   100,000 facts).
3. **Embedding**: one question's vector, 1,000 facts in batches of 256 and 64 document
   passages of 1,000 characters, all-MiniLM-L6-v2 beside WordLlama; and 5,000 facts sent to
   an OpenAI-compatible ``/v1/embeddings`` endpoint (the fake model server, over local HTTP,
   batches of 128).
4. **Cacheable share**: the conversation of `benchmarks.pipeline_build` (1,000 trigger/reply
   pairs, the persona's system prompt not naming ``{user}``), each turn with three memories
   recalled for its trigger from the evaluation set's index, against the same turns with no
   memories: the share of prompt tokens in leading items identical to the previous prompt's
   (what a provider's prompt cache reuses: the longest common prefix of consecutive requests
   of the channel, in whole items), the tokens per turn past it (what the provider processes
   anew). Memories as turns place them: each turn's set stays after its trigger in the later
   turns of the same window (`TurnInput.memories_shown`; when the window moves, the cached
   prefix ends at the configuration anyway, and the sets go), and a memory already shown is
   not shown again. Baselines: the recalled lines after the dialogue in every turn (as
   before; and how often the cacheable prefix is token for token the one without memories),
   and in the system block.
"""

from __future__ import annotations

import asyncio
import os
import random
import re
import threading
import time
from collections.abc import Callable
from dataclasses import replace

from benchmarks.recall_eval import KINDS, distractors, facts, questions
from benchmarks.table import Row, emit, percentile
from chat.llm.embeddings import (
    EmbeddingModel,
    MiniLMEmbeddings,
    OpenAIEmbeddings,
    WordLlamaEmbeddings,
)
from chat.pipeline.recall import (
    MemoryIndex,
    MemoryKind,
    MemoryRecord,
    RecallWeights,
    build_memory_index,
    memory_line,
    recall,
)
from chat.pipeline.tokens import O200kTokenCounter

SIZES = (1_000, 10_000, 100_000)
QUERIES = 200
PER_PERSON = 30
WINDOW_PEOPLE = 8
HYBRID = RecallWeights()
KEYWORD_ONLY = replace(HYBRID, vector=0.0, keyword=1.0)
VECTOR_ONLY = replace(HYBRID, vector=1.0, keyword=0.0)


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


def synthetic_guild(size: int) -> tuple[list[MemoryRecord], int]:
    """``size`` memories: people with 30 personal memories each (facts of the evaluation
    set's kinds with random values), and 50 guild memories. Returns them and the number of
    people."""
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
    return records, people


def timed(run: Callable[[], object]) -> tuple[float, float]:
    """One run's wall time and the CPU time of this thread, in milliseconds."""
    wall, cpu = time.perf_counter(), time.thread_time()
    run()
    return (time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000


def latency(model: EmbeddingModel) -> dict[int, dict[str, list[float]]]:
    """Per size, milliseconds of: a turn's recall (``turn`` wall, ``turn_cpu``), the guild's
    search index checked as before (``aggregate``: the aggregate over the guild's rows each turn
    ran before the guild's version stamp), and the same query over every memory
    (``everything``). The memories are stored in a throwaway database of the configured kind,
    one guild per size; each query is timed once."""
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "botproject.settings_test")
    django.setup()
    from django.db import connection

    if connection.vendor != "sqlite":  # its own database, never a test run's
        connection.settings_dict["TEST"]["NAME"] = f"bench_recall_{os.getpid()}"
    name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        return {size: _latency_in_guild(model, size) for size in SIZES}
    finally:
        connection.creation.destroy_test_db(name, verbosity=0)


def _latency_in_guild(model: EmbeddingModel, size: int) -> dict[str, list[float]]:
    from django.db.models import Count, Max, Q

    from chat.llm.embeddings import vector_bytes
    from chat.models import Memory
    from chat.models_memory import memory_version_bump
    from chat.services.memory_recall import memories_recall_for_turn, memory_search

    guild_id = size
    records, people = synthetic_guild(size)
    # A memory's vector is its fact's without the person's name: the ranking costs the same,
    # and all-MiniLM-L6-v2 would take minutes to embed 100,000 facts one by one.
    generic = [re.sub(r"Member\d+", "Member", record.text) for record in records]
    distinct = sorted(set(generic))
    by_text = dict(zip(distinct, model.embed(distinct), strict=True))
    vectors = [by_text[text] for text in generic]
    Memory.objects.bulk_create(
        (
            Memory(
                guild_id=guild_id,
                kind=str(record.kind),
                user_id=record.user_id,
                subject_name=record.subject,
                text=record.text,
                source="admin",
                embedding=vector_bytes(vector),
                embedding_model=model.name,
            )
            for record, vector in zip(records, vectors, strict=True)
        ),
        batch_size=5000,
    )
    memory_version_bump(guild_id)
    counter = O200kTokenCounter()
    counter.count("load the tokenizer")
    texts = [question.text for question in questions()]
    rng = random.Random(7)
    memory_search(guild_id=guild_id, query="build the index", embedder=model)
    asked = []
    for n in range(QUERIES):
        query = texts[n % len(texts)].replace("Alice", f"Member{rng.randrange(people)}")
        present = {(rng.randrange(people) + 1, ""): "m" for _ in range(WINDOW_PEOPLE)}
        asked.append((query, present))

    def turn(query: str, present: dict[tuple[int, str], str]) -> None:
        memories_recall_for_turn(
            guild_id=guild_id,
            persona_id=1,
            people=present,
            query=query,
            token_budget=1500,
            count_tokens=counter.count,
            embedder=model,
        )

    def aggregate(query: str, present: dict[tuple[int, str], str]) -> None:
        Memory.objects.filter(guild_id=guild_id).aggregate(
            count=Count("id"),
            changed=Max("updated_at"),
            newest=Max("id"),
            embedded=Count("id", filter=Q(embedding_model=model.name)),
        )

    def everything(query: str, present: dict[tuple[int, str], str]) -> None:
        memory_search(guild_id=guild_id, query=query, k=20, embedder=model)

    # Each kind in its own loop: a heavy neighbour (the dashboard's search) would otherwise
    # spend the scheduler's slice of the turn timed after it.
    measured: dict[str, list[float]] = {"turn": [], "turn_cpu": []}
    for query, present in asked:
        wall, cpu = timed(lambda query=query, present=present: turn(query, present))
        measured["turn"].append(wall)
        measured["turn_cpu"].append(cpu)
    for name, run in (("aggregate", aggregate), ("everything", everything)):
        measured[name] = [
            timed(lambda run=run, query=query, present=present: run(query, present))[0]
            for query, present in asked
        ]
    return measured


def offline_throughput(model: EmbeddingModel) -> dict[str, float]:
    """What ``model`` costs in CPU time of this thread (the matrix products run on it, one
    BLAS thread; wall time on the shared machine follows its load): texts per CPU second on
    1,000 facts in batches of 256 (``facts``) and on 64 document passages of about 1,000
    characters, as documents are cut (``passages``); one question's vector, p50 and p95 in
    milliseconds over 200 questions (``query_p50``, ``query_p95``)."""
    texts = [f"{fact.text} ({n})" for n in range(5) for fact in facts()]
    cpu = 0.0
    for start in range(0, len(texts), 256):
        cpu += timed(lambda start=start: model.embed(texts[start : start + 256]))[1]
    figures = {"facts": len(texts) / (cpu / 1000)}
    passage = " ".join(fact.text for fact in facts()[:30])[:1000]
    passages = [f"{n}: {passage}" for n in range(64)]
    figures["passages"] = len(passages) / (timed(lambda: model.embed(passages))[1] / 1000)
    asked = [question.text for question in questions()]
    asked = [asked[n % len(asked)] for n in range(QUERIES)]
    each = [timed(lambda question=question: model.embed([question]))[1] for question in asked]
    figures["query_p50"], figures["query_p95"] = percentile(each, 0.5), percentile(each, 0.95)
    return figures


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
    shares = {"off": 0.0, "kept": 0.0, "on": 0.0, "system": 0.0}
    new_tokens = dict.fromkeys(shares, 0)
    shown: dict[int, tuple[tuple[str, ...], ...]] = {}  # since the window moved
    same_prefix = pairs = repeated_lines = all_lines = 0
    for count, message in enumerate(talk, start=1):
        if message.id not in trigger_ids:
            continue
        selection = select_anchored_history(
            talk[:count], limit=pb.LIMIT, anchor_id=anchor_id, anchor_limit=pb.LIMIT
        )
        if selection.anchor_id != anchor_id:
            shown = {}
        anchor_id = selection.anchor_id
        base = replace(pb.turn_for(selection.messages, by_id, persona), memories=())
        lines = recalled[message.id]
        already = {line for sets in shown.values() for lines in sets for line in lines}
        fresh = tuple(line for line in lines if line not in already)
        kept = replace(base, memories=fresh, memories_shown=dict(shown))
        in_system = replace(
            base,
            persona=replace(persona, system_prompt="\n".join([persona.system_prompt, *lines])),
        )
        turns = {
            "off": base,
            "kept": kept,
            "on": replace(base, memories=lines),
            "system": in_system,
        }
        current = {}
        for name, turn in turns.items():
            warm = replace(turn, previous=previous[name]) if name in previous else turn
            current[name] = build_turn_context(warm)
        after = current["kept"].memories_after
        if after is not None:
            shown[after] = (*shown.get(after, ()), fresh)
        if count > pb.LIMIT and previous:
            pairs += 1
            repeated_lines += len(lines) - len(fresh)
            all_lines += len(lines)
            for name in shares:
                end = pb.repeated_prefix_end(previous[name], current[name])
                shares[name] += pb.token_share(current[name], end)
                new_tokens[name] += current[name].total_tokens - sum(
                    item.tokens for item in current[name].items[:end]
                )
            off, on = current["off"], current["on"]
            same_prefix += (
                on.items[: on.cacheable_prefix_end] == off.items[: off.cacheable_prefix_end]
            )
        previous = current
    return {
        **{name: total / pairs for name, total in shares.items()},
        **{f"{name}_new": total / pairs for name, total in new_tokens.items()},
        "same": same_prefix / pairs,
        "repeated_lines": repeated_lines / all_lines,
    }


def main() -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    model, other = MiniLMEmbeddings(), WordLlamaEmbeddings()
    loads = []
    for each in (model, other):
        started = time.perf_counter()
        each.embed(["load the model"])
        loads.append(time.perf_counter() - started)
    index, other_index = evaluation_index(model), evaluation_index(other)
    found, other_found = recall_at_5(model, index), recall_at_5(other, other_index)
    speed, other_speed = offline_throughput(model), offline_throughput(other)
    _, http = throughput(other)
    timings = latency(model)
    shares = cacheable_share(model, index)
    rows = [
        Row(
            "recall@5 of the ranking alone (every memory eligible, no threshold): 200 facts "
            "about 20 people, 100 distractors, 100 paraphrased questions naming the person "
            "(hybrid keyword + vector, all-MiniLM-L6-v2); what a person gets is "
            "benchmarks.recall_e2e's",
            f"{found['hybrid']:.2f}",
            f"keyword only: {found['keyword']:.2f}; vector only: {found['vector']:.2f}; with "
            f"WordLlama: hybrid {other_found['hybrid']:.2f}, vector only "
            f"{other_found['vector']:.2f}",
        ),
        Row(
            "a question's vector (all-MiniLM-L6-v2, NumPy, one BLAS thread), CPU time, each "
            "of 200 timed once",
            f"p50 {speed['query_p50']:.1f} ms, p95 {speed['query_p95']:.1f} ms",
            f"WordLlama: p50 {other_speed['query_p50']:.2f} ms, "
            f"p95 {other_speed['query_p95']:.2f} ms",
        ),
        Row(
            "embedding throughput (all-MiniLM-L6-v2) per CPU second: 1,000 short facts in "
            "batches of 256; 64 document passages of 1,000 characters; model load once per "
            "process (wall)",
            f"{speed['facts']:,.0f} facts/s; {speed['passages']:,.1f} passages/s "
            f"(load {loads[0]:.1f} s)",
            f"WordLlama: {other_speed['facts']:,.0f} facts/s; {other_speed['passages']:,.0f} "
            f"passages/s (load {loads[1]:.1f} s); OpenAI-compatible /v1/embeddings on local "
            f"HTTP (fake server), 5,000 facts, wall: {http:,.0f} texts/s",
        ),
    ]
    goals = {
        1_000: "—",
        10_000: "p95 ≤ 5 ms past the question's vector",
        100_000: "p95 ≤ 25 ms past the question's vector",
    }
    for size, times in timings.items():
        rows.append(
            Row(
                f"memory recall of one turn, {size:,} memories in the guild (PostgreSQL: the "
                f"index's version read, query embedded, ranked, lines counted; "
                f"{WINDOW_PEOPLE} people in the window; each query timed once)",
                f"p50 {percentile(times['turn'], 0.5):.2f} ms, "
                f"p95 {percentile(times['turn'], 0.95):.2f} ms "
                f"(CPU p95 {percentile(times['turn_cpu'], 0.95):.2f} ms)",
                f"the index checked by an aggregate over the guild's rows, as before, that check "
                f"alone: p50 {percentile(times['aggregate'], 0.5):.2f} ms, "
                f"p95 {percentile(times['aggregate'], 0.95):.2f} ms; every memory ranked "
                f"(dashboard search): p50 {percentile(times['everything'], 0.5):.2f} ms, "
                f"p95 {percentile(times['everything'], 0.95):.2f} ms",
                goals[size],
            )
        )
    rows += [
        Row(
            "prompt tokens the provider can reuse (leading items identical to the previous "
            "prompt's), conversation, three memories recalled per turn, each turn's set kept "
            "after its trigger until the window moves (a memory shown is not repeated); and the "
            "tokens per turn past that prefix (new to the provider's cache)",
            f"{shares['kept']:.1%}, {shares['kept_new']:,.0f} new tokens per turn "
            f"({shares['repeated_lines']:.0%} of recalled lines were already shown)",
            f"no memories: {shares['off']:.1%}, {shares['off_new']:,.0f} new tokens; the "
            f"recalled lines after the dialogue every turn (as before): {shares['on']:.1%}, "
            f"{shares['on_new']:,.0f} new tokens (cacheable prefix identical to the one without "
            f"memories in {shares['same']:.0%} of turns); in the system block: "
            f"{shares['system']:.1%}, {shares['system_new']:,.0f} new tokens",
            "within 1 point of no memories",
        ),
    ]
    emit(rows)


if __name__ == "__main__":
    main()
