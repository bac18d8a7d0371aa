"""``runbot``'s monitoring endpoint end to end: the real worker process against the sandbox and
the fake model, scraped with ``prometheus_client``'s own parser before and after three turns;
``/readyz`` following the shard's gateway session."""

from __future__ import annotations

import re
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from chat.llm.fake_server import Reply
from chat.models import Turn
from chat.tests.e2e.conftest import GENERAL, eventually
from chat.tests.e2e.test_restart import start_runbot

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]

MODEL = "metrics-e2e-model"
USAGE = [(120, 40, 11), (130, 60, 12), (140, 0, 13)]
"""(prompt, cached prompt, completion) tokens the fake model reports for each of the turns."""

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def _url(log: Path) -> str | None:
    found = re.search(r"metrics and health checks on (http://\S+)/metrics", log.read_text())
    return found.group(1) if found else None


async def _scrape(base: str) -> Samples:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{base}/metrics")
    assert response.status_code == 200
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(response.text)
        for sample in family.samples
    }


def _moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after.get(key, 0.0) - before.get(key, 0.0)


async def _status(base: str, path: str) -> tuple[int, str]:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{base}{path}")
    return response.status_code, response.text


async def test_a_scrape_before_and_after_three_turns_sees_what_they_did(world, tmp_path):
    log = tmp_path / "runbot.log"
    world.llm.enqueue(
        *[
            Reply(f"Answer {n}.", prompt_tokens=p, cached_prompt_tokens=c, completion_tokens=o)
            for n, (p, c, o) in enumerate(USAGE)
        ]
    )
    worker = start_runbot(
        world, log=log, extra_env={"WORKER_METRICS_PORT": "0", "LLM_MODEL": MODEL}
    )
    try:
        base = await eventually(lambda: _url(log), within=30)
        await eventually(async_ok(base, "/readyz"), within=30)
        assert await _status(base, "/healthz") == (200, "ok\n")
        before = await _scrape(base)

        for n in range(3):
            world.say(f"tomori, question {n}?")
            await eventually(lambda n=n: len(world.bot_messages(GENERAL)) == n + 1, within=30)
        replied = Turn.objects.filter(status=Turn.Status.REPLIED).acount
        await eventually(lambda: _equals(replied(), 3), within=30)
        # Three triggers and the three replies' own echoes went through the intake.
        await eventually(lambda: _ingested(base, before, 6), within=30)
        after = await _scrape(base)
    finally:
        worker.terminate()
        worker.wait(timeout=30)

    assert _moved(before, after, "personabot_turns_started_total") == 3
    assert _moved(before, after, "personabot_turns_total", status="replied") == 3
    for status in ("failed", "aborted", "withheld", "refused"):
        assert _moved(before, after, "personabot_turns_total", status=status) == 0
    assert _moved(before, after, "personabot_first_message_seconds_count") == 3
    assert _moved(before, after, "personabot_turn_seconds_count") == 3
    assert _moved(before, after, "personabot_turn_seconds_sum") > 0
    model = {"model": MODEL}
    assert _moved(before, after, "personabot_model_requests_total", outcome="ok", **model) == 3
    assert (
        sum(
            value - before.get(key, 0.0)
            for key, value in after.items()
            if key[0] == "personabot_model_requests_total"
        )
        == 3
    )  # no other outcome, no other model
    assert _moved(before, after, "personabot_model_request_seconds_count", **model) == 3
    prompt, cached, completion = (sum(column) for column in zip(*USAGE, strict=True))
    assert _moved(before, after, "personabot_model_tokens_total", kind="prompt", **model) == prompt
    assert (
        _moved(before, after, "personabot_model_tokens_total", kind="cached_prompt", **model)
        == cached
    )
    assert (
        _moved(before, after, "personabot_model_tokens_total", kind="completion", **model)
        == completion
    )
    assert _moved(before, after, "personabot_ingest_seconds_count") == 6
    posted = _moved(before, after, "personabot_discord_requests_total", method="POST", status="2xx")
    assert posted >= 3  # each reply is one message (typing and reactions may add more)
    assert (
        _moved(before, after, "personabot_discord_requests_total", method="POST", status="4xx") == 0
    )
    gauges = {name: value for (name, labels), value in after.items() if not labels}
    assert gauges["personabot_event_queue_ready"] == 0
    assert gauges["personabot_unread_messages"] >= 0
    assert (gauges["personabot_shards_ready"], gauges["personabot_shard_count"]) == (1, 1)
    assert 0 <= gauges["personabot_gateway_latency_seconds"] < 5
    assert gauges["process_cpu_seconds_total"] > 0


async def test_readyz_answers_503_while_the_shards_gateway_is_held_down(world, tmp_path):
    log = tmp_path / "runbot.log"
    worker = start_runbot(world, log=log, extra_env={"WORKER_METRICS_PORT": "0"})
    try:
        base = await eventually(lambda: _url(log), within=30)
        await eventually(async_ok(base, "/readyz"), within=30)

        assert world.sandbox.drop_shard(0, 1, hold=True) == 1
        _, text = await eventually(async_status(base, "/readyz", 503), within=30)
        assert text == "not ready: shard(s) 0 not connected\n"
        assert await _status(base, "/healthz") == (200, "ok\n")  # alive, only not ready
        scraped = await _scrape(base)
        assert scraped[("personabot_shards_ready", frozenset())] == 0

        world.sandbox.release_shard(0, 1)
        await eventually(async_ok(base, "/readyz"), within=30)
        assert (await _scrape(base))[("personabot_shards_ready", frozenset())] == 1
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def async_ok(base: str, path: str):
    return async_status(base, path, 200)


def async_status(base: str, path: str, expected: int):
    """A probe for `eventually`: the answer (status, text) once its status is ``expected``."""

    async def probe() -> tuple[int, str] | None:
        try:
            status, text = await _status(base, path)
        except httpx.HTTPError:
            return None
        return (status, text) if status == expected else None

    return probe


async def _equals(count, expected: int) -> bool:
    return await count == expected


async def _ingested(base: str, before: Samples, count: int) -> bool:
    return _moved(before, await _scrape(base), "personabot_ingest_seconds_count") >= count
