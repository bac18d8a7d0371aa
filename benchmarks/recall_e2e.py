"""Long-term memory recall as a person gets it: through the real worker, in conversation.

Run: ``.venv/bin/python -m benchmarks.recall_e2e`` (``make bench`` runs it).

The real worker (discord.py client, scheduler, pipeline, model access) runs against the local
sandbox over websockets and the fake model server over HTTP, on a throwaway database of the
configured kind (as `benchmarks.model_calls`). The people, what they tell and what they ask are
`benchmarks.recall_people`, written by hand:

1. Twelve people each tell the personas their ten facts with ``/memory add`` in their own
   channel, through the worker, at a person's pace (their own commands at least 2.2 s apart,
   within the commands' rate limit; the people take turns).
2. For each way of recalling below, every person asks their questions in a channel of their
   own (where they and Carol, who has no memories, had 30 exchanges of small talk first, so
   that the window holds a channel's worth of history), one at a time as in a conversation:
   the lines said before it, the question to Tomori
   (a Discord reply when the question replies to one of those lines), Tomori's answer, the
   next. A trigger that asks about nothing anyone told ("tomori, good morning!") comes after
   each person's second question.
3. What reaches the model is read from the requests the fake model received: a question
   counts when its fact's line (``About Dara: …``) is anywhere in the request of its turn
   (recalled by that turn or kept from an earlier one of the window); a request leaks when it
   holds a memory about anyone other than the person talking in that channel.

Ways of recalling, all in one run, each in channels of its own: the product's (hybrid ranking,
all-MiniLM-L6-v2), keyword only (``MEMORY_RECALL_VECTOR_PERCENT=0``), vector only (``100``),
the product's with WordLlama as the embedding model (the memories embedded anew with it, as
the background task does after a change of model), and no memories at all
(``MEMORY_RECALL_K=0``), the baseline of the cacheable share: the share of a request's
tokens in leading messages identical to the channel's previous request (what a provider's
prompt cache serves), over consecutive requests of a channel.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.recall_people import CHATTER, FACTS, QUESTIONS, Question
from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "chat" / "sandbox" / "demo_config.json"
PACE_SECONDS = 2.2
"""A person's ``/memory add`` commands at least this far apart: 5 in any 10 s at most."""
WAIT = 30.0
PEOPLE_SERIAL = 200
"""Sandbox ids of the evaluation's people and channels follow the demo world's."""
SMALL_TALK = (
    ("morning!", "morning :)"),
    ("did it rain where you are?", "all night, the garden is a lake"),
    ("anyone up for a film on friday?", "maybe, depends on work"),
    ("I finally cleaned my desk", "pics or it didn't happen"),
    ("the new album is out", "listening right now"),
    ("lunch was terrible today", "same, soggy sandwiches"),
    ("my phone died twice today", "time for a new battery"),
    ("who's watching the final?", "me, with snacks"),
    ("it's so quiet in here today", "everyone's on holiday"),
    ("I need a nap", "don't we all"),
)
"""What the person and Carol said in the channel before anything is asked (30 exchanges, these
ten in turn): the window then holds a conversation's worth of history, as a channel does."""
EXCHANGES = 30


@dataclass(frozen=True)
class Way:
    """One way of recalling: its label, the offline embedding model, the settings it changes."""

    label: str
    model: str
    settings: dict[str, Any] = field(default_factory=dict)


WAYS = (
    Way("hybrid, all-MiniLM-L6-v2 (the product)", "minilm"),
    Way("keyword only", "minilm", {"MEMORY_RECALL_VECTOR_PERCENT": 0}),
    Way("vector only", "minilm", {"MEMORY_RECALL_VECTOR_PERCENT": 100}),
    Way("no memories", "minilm", {"MEMORY_RECALL_K": 0}),
    Way("hybrid, WordLlama", "wordllama"),
)


@dataclass
class Figures:
    """What one way of recalling showed the model."""

    questions: int = 0
    reached: int = 0
    """Questions whose fact's line was in the request of their turn."""
    requests: int = 0
    leaking: int = 0
    """Requests holding a memory about someone other than the person talking."""
    recalled_per_question: list[int] = field(default_factory=list)
    recalled_per_chatter: list[int] = field(default_factory=list)
    cacheable: list[float] = field(default_factory=list)
    """Per consecutive pair of a channel's requests: the later one's share of tokens in
    leading messages identical to the earlier one's."""
    recall_ms: list[float] = field(default_factory=list)
    """Each turn's ``participant_ms`` (people, memories: the query embedded and ranked)."""
    missed: list[str] = field(default_factory=list)

    @property
    def share(self) -> float:
        return self.reached / self.questions if self.questions else float("nan")


_ABOUT = re.compile(r"^- About ([^:]+): ", re.MULTILINE)


def memory_subjects(body: dict) -> list[str]:
    """The names the request's recalled-memory items are about, one per line."""
    from chat.pipeline.recall import MEMORY_HEADER

    names = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str) and content.startswith(f"[System: {MEMORY_HEADER}"):
            names += _ABOUT.findall(content)
    return names


def prompt_texts(body: dict) -> list[str]:
    """Every text of a Chat Completions request's messages."""
    texts = []
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, list):
            texts += [part.get("text", "") for part in content]
        elif content:
            texts.append(content)
    return texts


def leading_share(before: dict, after: dict, count: Callable[[str], int]) -> float:
    """The share of ``after``'s tokens in its leading messages identical to ``before``'s."""
    messages = after["messages"]
    tokens = [count(json.dumps(m, ensure_ascii=False)) for m in messages]
    same = 0
    for earlier, later, size in zip(before["messages"], messages, tokens, strict=False):
        if earlier != later:
            break
        same += size
    return same / sum(tokens)


def _people_ids() -> dict[str, int]:
    from chat.pipeline.snowflakes import snowflake_from_ms

    epoch = 1_704_067_200_000  # the demo world's (2024-01-01)
    return {
        person: snowflake_from_ms(epoch, increment=PEOPLE_SERIAL + n)
        for n, person in enumerate(FACTS)
    }


def _channel_ids() -> dict[tuple[int, str], int]:
    from chat.pipeline.snowflakes import snowflake_from_ms

    epoch = 1_704_067_200_000
    serial = PEOPLE_SERIAL + 100
    return {
        (way, person): snowflake_from_ms(epoch, increment=serial + way * 100 + n)
        for way in range(len(WAYS))
        for n, person in enumerate(FACTS)
    }


def _configuration(channels: dict[tuple[int, str], int]) -> dict:
    """The demo configuration with every evaluation channel reactive."""
    data = json.loads(DEMO_CONFIG.read_text())
    data["guilds"][0]["channels"] += [
        {"id": str(channel_id), "mode": "reactive"} for channel_id in channels.values()
    ]
    return data


@contextmanager
def _recalling(way: Way) -> Iterator[None]:
    """The worker's settings and embedding model for ``way`` while it lasts (the memories
    are then embedded anew by the caller, as the background task does after a change of
    model)."""
    from django.test import override_settings

    from chat.services.memory_store import default_embedding_model

    with override_settings(OFFLINE_EMBEDDING_MODEL=way.model, **way.settings):
        default_embedding_model.cache_clear()
        try:
            yield
        finally:
            default_embedding_model.cache_clear()


async def _until(check: Callable[[], bool], *, within: float = WAIT) -> None:
    deadline = time.perf_counter() + within
    while not check():
        if time.perf_counter() > deadline:
            raise TimeoutError("no answer within the benchmark's wait")
        await asyncio.sleep(0.02)


async def _tell(world: Any, people: dict[str, int], home: dict[str, int]) -> None:
    """Every person's facts through ``/memory add``, the people taking turns, each person's
    commands at least `PACE_SECONDS` apart."""
    last: dict[str, float] = {}
    rounds = max(len(facts) for facts in FACTS.values())
    for n in range(rounds):
        for person, facts in FACTS.items():
            texts = list(facts.values())
            if n >= len(texts):
                continue
            wait = last.get(person, -PACE_SECONDS) + PACE_SECONDS - time.monotonic()
            await asyncio.sleep(max(0.0, wait))
            last[person] = time.monotonic()
            record = world.sandbox.sandbox.interactions.run(
                home[person], people[person], "memory add", {"text": texts[n]}
            )
            await _until(lambda r=record: r.answered)
            if not record.content.startswith("Remembered:"):
                raise RuntimeError(f"/memory add refused for {person}: {record.content}")


async def _ask(world: Any, channel_id: int, author: int, question: Question | str) -> dict:
    """Say a question's lead lines and the question in ``channel_id``; return the request of
    the turn that answered it, once the worker is idle."""
    leads = question.lead if isinstance(question, Question) else ()
    said = [world.say(line, channel_id=channel_id, author=author) for line in leads]
    ask = question.ask if isinstance(question, Question) else question
    reply_to = (
        int(said[question.reply_to]["id"])
        if isinstance(question, Question) and question.reply_to is not None
        else None
    )
    expected = len(world.bot_messages(channel_id)) + 1
    calls = len(world.llm.chat_bodies)
    world.say(ask, channel_id=channel_id, author=author, reply_to=reply_to)
    await _until(lambda: len(world.bot_messages(channel_id)) >= expected)
    await world.drained()
    if len(world.llm.chat_bodies) != calls + 1:
        raise RuntimeError(f"expected one model call for {ask!r}")
    return world.llm.chat_bodies[-1]


def _turn_figures(channel_id: int) -> list[tuple[int, float]]:
    """Each replied turn of the channel, in order: how many memories it recalled itself, and
    its ``participant_ms``."""
    from chat.models import Turn

    turns = Turn.objects.filter(channel_id=channel_id, status=Turn.Status.REPLIED).order_by("id")
    return [(len(turn.recalled), turn.participant_ms or 0.0) for turn in turns]


async def _converse(
    world: Any, way: int, people: dict[str, int], channels: dict[tuple[int, str], int]
) -> Figures:
    """Every person's questions and chatter in their channel of ``way``; what reached the model."""
    from asgiref.sync import sync_to_async

    from chat.pipeline.tokens import O200kTokenCounter

    counter = O200kTokenCounter()
    figures = Figures()
    chatter = dict(CHATTER)
    for person in FACTS:
        channel_id, author = channels[(way, person)], people[person]
        name = person.capitalize()
        asked: list[Question | str] = [q for q in QUESTIONS if q.person == person]
        asked.insert(min(2, len(asked)), chatter[person])
        bodies = []
        for question in asked:
            body = await _ask(world, channel_id, author, question)
            bodies.append(body)
            figures.requests += 1
            figures.leaking += any(subject != name for subject in memory_subjects(body))
            if isinstance(question, Question):
                figures.questions += 1
                line = f"- About {name}: {question.fact_text}"
                reached = any(line in text for text in prompt_texts(body))
                figures.reached += reached
                if not reached:
                    figures.missed.append(f"{person}: {question.ask}")
        turns = await sync_to_async(_turn_figures)(channel_id)
        for question, (recalled, participant_ms) in zip(asked, turns, strict=True):
            kind = figures.recalled_per_question if isinstance(question, Question) else None
            (kind if kind is not None else figures.recalled_per_chatter).append(recalled)
            figures.recall_ms.append(participant_ms)
        figures.cacheable += [
            leading_share(before, after, counter.count)
            for before, after in itertools.pairwise(bodies)
        ]
    return figures


async def _run() -> list[Figures]:
    from asgiref.sync import sync_to_async
    from django.db import connections

    from chat.llm.fake_server import FakeLLMServer, Reply
    from chat.sandbox import GatewaySettings, SandboxServer
    from chat.sandbox.demo import DEMO_GUILD_ID, DEMO_USER_IDS, demo_sandbox
    from chat.services.memory_store import memories_embed_missing
    from chat.tests.e2e.conftest import World
    from personas.services import config_import

    people, channels = _people_ids(), _channel_ids()
    await sync_to_async(config_import)(data=_configuration(channels))
    sandbox_state = demo_sandbox()
    for person, user_id in people.items():
        sandbox_state.add_user(person, user_id=user_id, global_name=person.capitalize())
        sandbox_state.add_member(DEMO_GUILD_ID, user_id)
    for (way, person), channel_id in channels.items():
        sandbox_state.add_text_channel(DEMO_GUILD_ID, f"{person}-{way}", channel_id=channel_id)
    gateway = GatewaySettings(heartbeat_interval_ms=500)
    carol = DEMO_USER_IDS["carol"]
    for (_, person), channel_id in channels.items():
        for n in range(EXCHANGES):
            said, answered = SMALL_TALK[n % len(SMALL_TALK)]
            sandbox_state.user_says(channel_id, people[person], said)
            sandbox_state.user_says(channel_id, carol, answered)
    results = []
    async with (
        SandboxServer(sandbox_state, gateway=gateway) as sandbox,
        FakeLLMServer(responder=lambda body: Reply("mm, I think I remember.")) as llm,
    ):
        world = World(sandbox=sandbox, llm=llm)
        await world.start_worker()
        try:
            home = {person: channels[(0, person)] for person in FACTS}
            await _tell(world, people, home)
            for n, way in enumerate(WAYS):
                print(f"  {way.label} …", file=sys.stderr, flush=True)
                with _recalling(way):
                    await sync_to_async(memories_embed_missing)()
                    results.append(await _converse(world, n, people, channels))
        finally:
            await world.stop_worker()
            await sync_to_async(connections.close_all)()
    return results


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-recall-e2e-") as directory:
        database = setup_django(directory, prefix="bench_recall_e2e")
        try:
            results = asyncio.run(_run())
        finally:
            teardown_django(database)
    by = dict(zip((way.label for way in WAYS), results, strict=True))
    product, keyword, vector = by[WAYS[0].label], by[WAYS[1].label], by[WAYS[2].label]
    off, wordllama = by[WAYS[3].label], by[WAYS[4].label]

    def mean(values: list[float]) -> float:
        return statistics.fmean(values) if values else float("nan")

    people = len(FACTS)
    facts = sum(len(f) for f in FACTS.values())
    rows = [
        Row(
            f"recall through the worker: share of {product.questions} paraphrased questions "
            f"({people} people, {facts} facts told with /memory add) whose fact reaches the "
            "model's request",
            f"{product.share:.2f} (all-MiniLM-L6-v2, hybrid)",
            f"keyword only {keyword.share:.2f}; vector only {vector.share:.2f}; hybrid with "
            f"WordLlama {wordllama.share:.2f}",
            "≥ 0.90",
        ),
        Row(
            "requests holding another person's memory",
            f"{product.leaking} of {product.requests}",
            f"keyword only {keyword.leaking}; vector only {vector.leaking}; WordLlama "
            f"{wordllama.leaking}",
            "0",
        ),
        Row(
            "memories a turn recalls: per question; per trigger asking nothing anyone told",
            f"{mean(product.recalled_per_question):.2f}; {mean(product.recalled_per_chatter):.2f}",
            f"WordLlama {mean(wordllama.recalled_per_question):.2f}; "
            f"{mean(wordllama.recalled_per_chatter):.2f}",
        ),
        Row(
            "cacheable share: tokens in leading messages identical to the channel's previous "
            "request, memories on",
            f"{mean(product.cacheable):.1%}",
            f"no memories: {mean(off.cacheable):.1%}",
            "within 1 point of no memories",
        ),
        Row(
            "a turn's people-and-memories step (participant_ms, median), the query embedded",
            f"{statistics.median(product.recall_ms):.1f} ms (all-MiniLM-L6-v2)",
            f"WordLlama {statistics.median(wordllama.recall_ms):.1f} ms; no memories "
            f"{statistics.median(off.recall_ms):.1f} ms",
        ),
    ]
    if "--rows" in sys.argv:
        emit(rows)
        return
    for row in rows:
        print(f"{row.what}\n    {row.measured}   (beside: {row.baseline}; goal: {row.goal})")
    for way, figures in by.items():
        if figures.missed:
            print(f"missed, {way}: " + "; ".join(figures.missed))


if __name__ == "__main__":
    main()
