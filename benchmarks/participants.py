"""What a turn reads besides its window, per co-responding turn: the people in the window
(privacy, blacklist, short-term memory, notices), the window's images hashed, the long-term
memories recalled; before and after they were shared and run at once.

Run: ``.venv/bin/python -m benchmarks.participants``

The services a turn runs (`chat.services.turn_input`) against the local sandbox over HTTP (its
REST API and its CDN, as a REST-only Discord port reads them; the sandbox in a process of its
own, as Discord is elsewhere) on a throwaway database of the
configured kind (``DATABASE_URL``; a SQLite file in a temporary directory otherwise), with the
product's own embedding model (offline WordLlama): #general holds 40 messages, three with
images, alice has ``MEMORIES`` memories, and each of ``MESSAGES`` new messages (with a new
image) is answered by two personas, Tomori then Anon, as co-responders.

- **After** (the product): `turn_participants_read` for each persona in turn, the two sharing
  one `ParticipantScope`: its people read once for both, the question's vector embedded once
  for both (the recall keeps it), and within a turn the images are hashed while the database
  thread reads the people and recalls the memories.
- **Before** (baseline, same run): the same building blocks one after another — the people
  (`turn_input_gather`, each persona on its own), the images, the memories (each persona
  embedding the question again) — as turns read them before.

Each variant has its own window registry and caches, so both read each image once (the first
persona's turn) and the second persona finds its hash kept, as a worker's turns do. The
variants alternate message by message, so the machine's load falls on both alike. Figures are
wall-clock milliseconds, p50 over the messages, for the first and the second persona.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

MESSAGES = 30
HISTORY = 40
MEMORIES = 30
ROOT = Path(__file__).resolve().parents[1]
DEMO_CONFIG = ROOT / "chat" / "sandbox" / "demo_config.json"
PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 2048


async def _timed(work: Awaitable[Any]) -> float:
    started = time.perf_counter()
    await work
    return (time.perf_counter() - started) * 1000


def _runtime(port: Any) -> Any:
    """A runtime over ``port`` with caches and a window registry of its own."""
    from chat.runtime import turn_capabilities_from_settings
    from chat.services.turn_request import TurnCaches, TurnRuntime
    from chat.windows import WindowRegistry

    class _Unused:
        async def complete(self, request: Any) -> Any:
            raise RuntimeError("no model is asked")

        def stream(self, request: Any) -> Any:
            raise RuntimeError("no model is asked")

    return TurnRuntime(
        port=port,
        windows=WindowRegistry(
            fetch_history=port.fetch_history, cache_view=port.cache_view, gateway=False
        ),
        llm=None,
        caches=TurnCaches(),
        **turn_capabilities_from_settings(vision_client=_Unused()).runtime_fields(),
    )


async def _after(runtime: Any, requests: list[Any], now: Any) -> list[float]:
    """The product: `turn_participants_read` per persona, sharing one scope."""
    from chat.services.turn_input import turn_participants_read, turn_window_read
    from chat.services.turn_request import ParticipantScope

    scope = ParticipantScope()
    timings = []
    for request in requests:
        request = _with_scope(request, scope)
        history, window = await turn_window_read(
            runtime=runtime,
            channel=request.channel,
            trigger=request.trigger,
            now=now,
            dry_run=False,
        )
        timings.append(
            await _timed(
                turn_participants_read(
                    runtime=runtime,
                    request=request,
                    history=history,
                    now=now,
                    dry_run=False,
                    anchor_id=window.anchor_id,
                )
            )
        )
    return timings


async def _before(runtime: Any, requests: list[Any], now: Any) -> list[float]:
    """The baseline: the same reads one after another, each persona on its own."""
    from asgiref.sync import sync_to_async

    from chat.services import memory_recall
    from chat.services.turn_input import (
        _reply_targets,
        turn_attachment_urls_refresh,
        turn_image_hashes,
        turn_input_gather,
        turn_memories_recall,
        turn_window_read,
    )

    timings = []
    for request in requests:
        history, window = await turn_window_read(
            runtime=runtime,
            channel=request.channel,
            trigger=request.trigger,
            now=now,
            dry_run=False,
        )

        async def read(request: Any = request, history: Any = history, window: Any = window):
            memory_recall._query_vectors.clear()  # before: each persona embedded its question
            targets = await _reply_targets(
                runtime,
                request.channel.channel_id,
                [m for m in history if m.id <= request.trigger.id],
            )
            turn_input = await turn_input_gather(
                runtime=runtime, request=request, history=history, reply_targets=targets, now=now
            )
            messages = (*turn_input.history, *turn_input.reply_targets.values())
            urls = await turn_attachment_urls_refresh(runtime=runtime, messages=messages, now=now)
            await turn_image_hashes(runtime=runtime, messages=messages, urls=urls)
            await sync_to_async(turn_memories_recall)(
                runtime=runtime, request=request, turn_input=turn_input, anchor_id=window.anchor_id
            )

        timings.append(await _timed(read()))
    return timings


def _with_scope(request: Any, scope: Any) -> Any:
    import dataclasses

    return dataclasses.replace(request, participants=scope)


def _seed_memories(guild_id: int, user_id: int) -> None:
    from chat.services.memory_store import MemoryScope, memory_add

    for n in range(MEMORIES):
        memory_add(
            scope=MemoryScope.personal(guild_id, user_id, name="Alice"),
            text=f"Alice likes painting number {n} in watercolours and ink",
            source="admin",
        )


def _sandbox_process(pipe: Connection) -> None:
    asyncio.run(_serve_sandbox(pipe))


async def _serve_sandbox(pipe: Connection) -> None:
    """Serve the demo world, its #general holding the history and the ``MESSAGES`` triggers
    (each with a new image), until told to stop; sends where it serves and the triggers' ids."""
    from chat.sandbox import SandboxServer
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_USER_IDS, demo_sandbox
    from chat.sandbox.records import Upload

    general = DEMO_CHANNEL_IDS["general"]
    alice, bob = DEMO_USER_IDS["alice"], DEMO_USER_IDS["bob"]
    world = demo_sandbox()
    for n in range(HISTORY):
        uploads = [Upload(f"old{n}.png", PNG + bytes([n]), "image/png")] if n % 13 == 5 else []
        world.user_says(general, bob if n % 2 else alice, f"line {n}", attachments=uploads)
    triggers = [
        int(
            world.user_says(
                general,
                alice,
                f"tomori and anon, what do you think of painting {n}?",
                attachments=[Upload(f"new{n}.png", PNG + bytes([100 + n]), "image/png")],
            )["id"]
        )
        for n in range(MESSAGES)
    ]
    async with SandboxServer(world) as server:
        pipe.send((server.token, server.api_base, server.gateway_url, triggers))
        await asyncio.to_thread(pipe.recv)  # stop


async def _run(token: str, api_base: str, gateway_url: str, triggers: list[int]):
    from asgiref.sync import sync_to_async
    from django.conf import settings
    from django.db import connections
    from django.utils import timezone

    from chat import selectors
    from chat.pipeline.triggers import TurnReason
    from chat.runtime import discord_rest_port
    from chat.sandbox.demo import DEMO_CHANNEL_IDS, DEMO_GUILD_ID, DEMO_USER_IDS
    from chat.services import memory_recall
    from chat.services.turn_request import TurnRequest
    from personas.services import config_import

    general = DEMO_CHANNEL_IDS["general"]
    await sync_to_async(config_import)(data=json.loads(DEMO_CONFIG.read_text()))
    await sync_to_async(_seed_memories)(DEMO_GUILD_ID, DEMO_USER_IDS["alice"])
    figures: dict[str, dict[str, list[float]]] = {
        "after": {"first": [], "second": []},
        "before": {"first": [], "second": []},
    }
    settings.DISCORD_TOKEN, settings.DISCORD_API_BASE = token, api_base
    settings.DISCORD_GATEWAY_URL = gateway_url
    async with discord_rest_port() as port:
        runtimes = {"after": _runtime(port), "before": _runtime(port)}
        variants: dict[str, Callable[..., Awaitable[list[float]]]] = {
            "after": _after,
            "before": _before,
        }
        for n, trigger_id in enumerate(triggers):
            trigger = await port.fetch_message(general, trigger_id)
            now = timezone.now()
            configuration = await sync_to_async(selectors.channel_configuration)(
                channel_id=general, guild_id=DEMO_GUILD_ID, now=now
            )
            requests = [
                TurnRequest(
                    configuration=configuration,
                    persona=configuration.persona_named(name),
                    trigger=trigger,
                    reason=TurnReason.TRIGGER_WORD,
                )
                for name in ("Tomori", "Anon")
            ]
            order = ("after", "before") if n % 2 else ("before", "after")
            for variant in order:
                # Each variant meets the message as new: nothing of its question is embedded.
                memory_recall._query_vectors.clear()
                first, second = await variants[variant](runtimes[variant], requests, now)
                figures[variant]["first"].append(first)
                figures[variant]["second"].append(second)
    await sync_to_async(connections.close_all)()
    return figures


def main() -> None:
    spawn = multiprocessing.get_context("spawn")
    pipe, sandbox_end = spawn.Pipe()
    sandbox = spawn.Process(target=_sandbox_process, args=(sandbox_end,), name="sandbox")
    sandbox.start()
    try:
        served = pipe.recv()
        with tempfile.TemporaryDirectory(prefix="bench-participants-") as directory:
            database = setup_django(directory, prefix="bench_participants")
            try:
                figures = asyncio.run(_run(*served))
            finally:
                teardown_django(database)
    finally:
        with contextlib.suppress(OSError):
            pipe.send("stop")
        sandbox.join(10)
        if sandbox.is_alive():
            sandbox.terminate()

    def p50(variant: str, persona: str) -> float:
        return statistics.median(figures[variant][persona])

    def both(variant: str) -> str:
        return (
            f"first persona {p50(variant, 'first'):.2f} ms, second {p50(variant, 'second'):.2f} ms"
        )

    emit(
        [
            Row(
                f"participant reads per co-responding turn ({HISTORY}-message window, images, "
                f"{MEMORIES} memories; {MESSAGES} messages each answered by two personas), p50",
                both("after") + " (people shared, reads at once)",
                both("before") + " (one after another, each persona alone)",
                "below the baseline",
            )
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
