"""How long a persona test run of 50 cases takes against a model that answers in 1 s.

Run: ``.venv/bin/python -m benchmarks.persona_tests``

The headline is what an admin gets: the run is queued as the dashboard queues it
(``persona_test_run_task``) and taken by a real Celery worker (``celery -A botproject worker``,
its own queue on ``REDIS_URL``, ``PERSONA_TEST_CONCURRENCY`` 8, the default), timed from the
queueing to the run's ``finished`` in the database. Beside it, in the same run: the same 50
cases one at a time (concurrency 1, in this process: the baseline a sequential runner gives),
and what building one case's request costs (a dry-run turn over its history, no model).

The fake model server (real HTTP) takes 1 s for every answer; each case has text checks only,
so each is one model call. A throwaway database of the configured kind (``DATABASE_URL``; a
SQLite file in a temporary directory otherwise), as `benchmarks.model_calls` makes it.
"""

from __future__ import annotations

import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchmarks.model_calls import DEMO_CONFIG
from benchmarks.table import Row, emit
from benchmarks.throwaway import setup_django, teardown_django

CASES = 50
MODEL_SECONDS = 1.0
CONCURRENCY = 8
GOAL_SECONDS = 20.0
WORKER_START = 60.0
ROOT = Path(__file__).resolve().parents[1]


def _database_url() -> str:
    from django.db import connection

    db = connection.settings_dict
    if db["ENGINE"].endswith("sqlite3"):
        return f"sqlite:///{db['NAME']}"
    password = f":{db['PASSWORD']}" if db["PASSWORD"] else ""
    return f"postgres://{db['USER']}{password}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def _cases() -> list:
    """Fifty cases of Tomori, each a short conversation ending with a different question."""
    from chat.services.persona_test_runs import run_cases_of
    from personas.case_schema import parse_case
    from personas.case_services import persona_case_save
    from personas.models import Persona
    from personas.services import config_import

    config_import(data=json.loads(DEMO_CONFIG.read_text()))
    tomori = Persona.objects.select_related("guild").get(name="Tomori")
    for n in range(CASES):
        persona_case_save(
            persona=tomori,
            spec=parse_case(
                {
                    "name": f"question {n}",
                    "history": [
                        {"author": "alice", "content": "hi everyone"},
                        {"author": "bob", "content": f"did you finish poem {n}?"},
                    ],
                    "message": {"author": "alice", "content": f"tomori, what is poem {n} about?"},
                    "expect": {"contains": ["You said"], "max_chars": 400},
                }
            ),
        )
    return run_cases_of(cases=list(tomori.test_cases.select_related("persona__guild")))


def _new_run(cases: list) -> int:
    from chat.services.persona_test_runs import Target, TargetKey, persona_test_run_create
    from personas.models import Persona

    persona = Persona.objects.select_related("guild").get(pk=cases[0].persona_id)
    return persona_test_run_create(
        cases=cases, targets=[Target(TargetKey.SAVED, "saved")], persona=persona
    ).pk


def _finished(run_id: int) -> bool:
    from chat.models import PersonaTestRun

    run = PersonaTestRun.objects.get(pk=run_id)
    if run.status == PersonaTestRun.Status.FAILED:
        raise RuntimeError(f"the run failed: {run.error}")
    return run.status == PersonaTestRun.Status.FINISHED


def _celery_worker(base_url: str, queue: str) -> subprocess.Popen:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "botproject.settings",
        "DATABASE_URL": _database_url(),
        "LLM_BASE_URL": base_url,
        "PERSONA_TEST_CONCURRENCY": str(CONCURRENCY),
    }
    command = [
        *(sys.executable, "-m", "celery", "-A", "botproject", "worker", "-Q", queue),
        *("--pool", "solo", "--without-gossip", "--without-mingle", "--without-heartbeat"),
        *("--loglevel", "WARNING"),
    ]
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def _through_celery(cases: list, base_url: str) -> float:
    """Seconds from queueing a run of ``cases`` to its end, taken by a real Celery worker. A
    first, one-case run warms the worker up (imports, the tokenizer) and is not counted."""
    from asgiref.sync import sync_to_async

    from chat.tasks import persona_test_run_task

    queue = f"bench-persona-tests-{uuid.uuid4().hex[:8]}"
    worker = _celery_worker(base_url, queue)
    try:
        warm = await sync_to_async(_new_run)(cases[:1])
        persona_test_run_task.apply_async(args=[warm], queue=queue)
        await _until(warm, WORKER_START)
        run_id = await sync_to_async(_new_run)(cases)
        started = time.perf_counter()
        persona_test_run_task.apply_async(args=[run_id], queue=queue)
        await _until(run_id, WORKER_START + MODEL_SECONDS * CASES)
        return time.perf_counter() - started
    finally:
        worker.terminate()
        worker.wait(20)


async def _until(run_id: int, within: float) -> None:
    from asgiref.sync import sync_to_async

    deadline = time.monotonic() + within
    while not await sync_to_async(_finished)(run_id):
        if time.monotonic() > deadline:
            raise TimeoutError(f"run {run_id} did not finish within {within:.0f} s")
        await asyncio.sleep(0.05)


async def _in_process(cases: list, base_url: str, concurrency: int) -> float:
    from asgiref.sync import sync_to_async

    from chat.llm.attempts import AttemptRunner
    from chat.llm.embeddings import HashingEmbeddings
    from chat.llm.openai_compat import OpenAICompatibleClient
    from chat.services.persona_test_runs import persona_test_run_execute

    run_id = await sync_to_async(_new_run)(cases)
    async with OpenAICompatibleClient(base_url=base_url, api_key="bench") as client:
        started = time.perf_counter()
        await persona_test_run_execute(
            run_id=run_id,
            runner=AttemptRunner(client=client, stream=False),
            embeddings=HashingEmbeddings,
            concurrency=concurrency,
        )
        return time.perf_counter() - started


async def _prepare_ms(cases: list) -> list[float]:
    """Milliseconds to build each case's request (a dry-run turn over its history)."""
    from asgiref.sync import sync_to_async
    from django.utils import timezone

    from chat.services.persona_tests import case_prepare, case_turn, guild_cast
    from personas.models import Persona

    tomori = await Persona.objects.select_related("guild").aget(name="Tomori")
    cast = await sync_to_async(guild_cast)(guild=tomori.guild)
    times = []
    for case in cases:
        turn = case_turn(
            case=case.spec, guild=tomori.guild, personas=cast, persona=tomori, now=timezone.now()
        )
        started = time.perf_counter()
        await case_prepare(turn=turn)
        times.append((time.perf_counter() - started) * 1000)
    return times[1:]  # the first loads the tokenizer


async def _measure() -> dict[str, float]:
    from asgiref.sync import sync_to_async

    from chat.llm.fake_server import FakeLLMServer, Fault, FaultKind

    cases = await sync_to_async(_cases)()
    one_second = FakeLLMServer(
        responder=lambda body: Fault(FaultKind.TIMEOUT, delay=MODEL_SECONDS)
    )  # answers normally, after a second
    async with one_second as server:
        prepare = await _prepare_ms(cases)
        celery = await _through_celery(cases, server.base_url)
        concurrent = await _in_process(cases, server.base_url, CONCURRENCY)
        sequential = await _in_process(cases, server.base_url, 1)
    return {
        "celery": celery,
        "concurrent": concurrent,
        "sequential": sequential,
        "prepare_p50": statistics.median(prepare),
        "prepare_p95": statistics.quantiles(prepare, n=20)[-1],
    }


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-persona-tests-") as directory:
        name = setup_django(directory, prefix="bench_persona_tests")
        try:
            figures = asyncio.run(_measure())
        finally:
            teardown_django(name)
    met = "met" if figures["celery"] <= GOAL_SECONDS else "NOT met"
    emit(
        [
            Row(
                f"persona test run, {CASES} cases against a model answering in "
                f"{MODEL_SECONDS:g} s, queued as the dashboard queues it and run by a Celery "
                f"worker (PERSONA_TEST_CONCURRENCY {CONCURRENCY})",
                f"{figures['celery']:.1f} s ({met}); the same run in-process "
                f"{figures['concurrent']:.1f} s",
                f"one case at a time: {figures['sequential']:.1f} s",
                f"≤ {GOAL_SECONDS:g} s",
            ),
            Row(
                "building one case's request (a dry-run turn over a 3-message history)",
                f"p50 {figures['prepare_p50']:.1f} ms, p95 {figures['prepare_p95']:.1f} ms",
            ),
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
